package evidence_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/evidence"
	"github.com/gated/gated/internal/natstest"
)

// testLog is a real NATS server with a tenant's records and the keys
// that sign its checkpoints.
type testLog struct {
	js   jetstream.JetStream
	a    *audit.Writer
	keys *evidence.Keys
	file []byte
	// signer keeps its trees from one checkpoint to the next.
	signer *evidence.Signer
}

func newTestLog(t *testing.T) *testLog {
	t.Helper()
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
	if _, err := bus.Setup(t.Context(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	file, err := evidence.NewKeyFile("gated.test")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := evidence.ParseKeys(file)
	if err != nil {
		t.Fatal(err)
	}
	return &testLog{js: js, a: natstest.AuditWriter(t, js, audit.Config{}), keys: keys, file: file, signer: evidence.NewSigner(js, keys)}
}

// write seals n verdicts of tenant, ids prefix0..prefix<n-1>.
func (l *testLog) write(t *testing.T, tenant, prefix string, n int) {
	t.Helper()
	for i := range n {
		ev := gated.AuditEvent{
			V: gated.SchemaVersion, Event: gated.EventVerdict, Tenant: tenant, ProposalID: fmt.Sprint(prefix, i),
			At: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Instance: "test",
			Data: fmt.Appendf(nil, `{"action":"host_restart_service","operator":"alice","outcome":"rejected","n":%d}`, i),
		}
		if _, err := l.a.Trail().Seal(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
}

func (l *testLog) sign(t *testing.T, tenant string) evidence.Signed {
	t.Helper()
	c, _, err := l.signer.Sign(t.Context(), tenant, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (l *testLog) export(t *testing.T, o evidence.ExportOptions) []byte {
	t.Helper()
	var buf bytes.Buffer
	if o.Keys == nil {
		o.Keys = l.keys.Public
	}
	if _, err := evidence.Export(t.Context(), l.js, &buf, o); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func verify(b []byte, o evidence.VerifyOptions) (evidence.Result, error) {
	return evidence.Verify(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, o)
}

func lines(b []byte) []string { return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") }

func join(ls []string) []byte { return []byte(strings.Join(ls, "\n") + "\n") }

// setHeader rewrites the bundle's header with fn.
func setHeader(t *testing.T, b []byte, fn func(*evidence.Header)) []byte {
	t.Helper()
	ls := lines(b)
	h, err := evidence.DecodeHeader([]byte(ls[0]))
	if err != nil {
		t.Fatal(err)
	}
	fn(&h)
	hb, _ := json.Marshal(h)
	ls[0] = string(hb)
	return join(ls)
}

func TestExportVerifies(t *testing.T) {
	l := newTestLog(t)
	l.write(t, "acme", "a", 5)
	l.write(t, "beta", "b", 2)
	first := l.sign(t, "acme")
	l.write(t, "acme", "c", 6)
	last := l.sign(t, "acme")
	l.write(t, "acme", "late", 2) // not under a checkpoint yet
	if first.Size != 5 || last.Size != 11 {
		t.Fatalf("checkpoints of sizes %d and %d, want 5 and 11", first.Size, last.Size)
	}
	if again, signed, err := evidence.NewSigner(l.js, l.keys).Sign(t.Context(), "beta", time.Now()); err != nil || !signed || again.Size != 2 {
		t.Fatalf("beta: %v %v %v", again.Size, signed, err)
	}
	whole := l.export(t, evidence.ExportOptions{Tenant: "acme"})
	res, err := verify(whole, evidence.VerifyOptions{Keys: l.keys.Public, Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != 11 || !res.Range || res.Start != 0 || len(res.Checkpoints) != 2 || res.KeysFromBundle {
		t.Errorf("whole export: %+v", res)
	}
	ids := l.export(t, evidence.ExportOptions{Tenant: "acme", IDs: []string{"a3", "c1", "late0"}})
	if res, err := verify(ids, evidence.VerifyOptions{Tenant: "acme"}); err != nil || res.Records != 2 || res.Range || !res.KeysFromBundle {
		t.Errorf("the records of a3 and c1 (late0 is under no checkpoint): %+v, %v", res, err)
	}
	cons := l.export(t, evidence.ExportOptions{Tenant: "acme", From: 5, To: 11})
	if res, err := verify(cons, evidence.VerifyOptions{Keys: l.keys.Public}); err != nil || res.Records != 0 || len(res.Checkpoints) != 2 {
		t.Errorf("consistency 5..11: %+v, %v", res, err)
	}
	// A range from the middle: the records stored since a time.
	since := l.export(t, evidence.ExportOptions{Tenant: "acme", Since: time.Now().Add(-time.Hour)})
	if res, err := verify(since, evidence.VerifyOptions{Keys: l.keys.Public}); err != nil || res.Records != 11 {
		t.Errorf("since an hour ago: %+v, %v", res, err)
	}
	// From acme's 8th record's time on: at least its last 4 records,
	// proved from the frontier of the tree before them.
	stream, err := l.js.Stream(t.Context(), audit.Stream)
	if err != nil {
		t.Fatal(err)
	}
	var ws []evidence.RecordLine
	for _, ln := range lines(whole)[1:] {
		var r evidence.RecordLine
		_ = json.Unmarshal([]byte(ln), &r)
		ws = append(ws, r)
	}
	m, err := stream.GetMsg(t.Context(), ws[7].Seq)
	if err != nil {
		t.Fatal(err)
	}
	mid := l.export(t, evidence.ExportOptions{Tenant: "acme", Since: m.Time})
	if res, err := verify(mid, evidence.VerifyOptions{Keys: l.keys.Public}); err != nil || res.Start < 1 || res.Start > 7 || res.Records != 11-res.Start {
		t.Errorf("since the 8th record: %+v, %v", res, err)
	}
	none := l.export(t, evidence.ExportOptions{Tenant: "acme", Since: time.Now().Add(time.Hour)})
	if res, err := verify(none, evidence.VerifyOptions{Keys: l.keys.Public}); err != nil || res.Records != 0 || res.Start != 11 {
		t.Errorf("since an hour ahead: %+v, %v", res, err)
	}
}

// TestBundleTampering: each change to a bundle is caught, with an error
// that names it.
func TestBundleTampering(t *testing.T) {
	l := newTestLog(t)
	l.write(t, "acme", "a", 6)
	l.sign(t, "acme")
	l.write(t, "acme", "b", 4)
	l.sign(t, "acme")
	l.write(t, "beta", "x", 3)
	l.sign(t, "beta")
	whole := l.export(t, evidence.ExportOptions{Tenant: "acme"})
	ids := l.export(t, evidence.ExportOptions{Tenant: "acme", IDs: []string{"a2"}})
	beta := l.export(t, evidence.ExportOptions{Tenant: "beta"})
	ls := lines(whole)
	if len(ls) != 11 {
		t.Fatalf("%d lines, want a header and 10 records", len(ls))
	}
	record := func(i int) evidence.RecordLine {
		var r evidence.RecordLine
		if err := json.Unmarshal([]byte(ls[1+i]), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	line := func(r evidence.RecordLine) string { b, _ := json.Marshal(r); return string(b) }
	edit := func(fn func([]string) []string) []byte {
		return join(fn(append([]string(nil), ls...)))
	}
	// changed re-encodes record i with an outcome approved instead, as
	// someone who knows the format would; flipped flips a bit of it.
	changed := func(i int) []byte {
		return edit(func(ls []string) []string {
			r := record(i)
			rec, err := audit.DecodeRecord("gated.audit.acme.verdict.decided", nil, r.Body)
			if err != nil {
				t.Fatal(err)
			}
			evs := append([]gated.AuditEvent(nil), rec.Events()...)
			evs[0].Data = bytes.Replace(evs[0].Data, []byte("rejected"), []byte("approved"), 1)
			m, err := audit.NewCompressedRecordMsg(evs, rec.Chain, nil)
			if err != nil {
				t.Fatal(err)
			}
			r.Body = m.Data
			ls[1+i] = line(r)
			return ls
		})
	}
	flipped := func(i int) []byte {
		return edit(func(ls []string) []string {
			r := record(i)
			r.Body = bytes.Clone(r.Body)
			r.Body[len(r.Body)-3] ^= 1
			ls[1+i] = line(r)
			return ls
		})
	}
	recount := func(b []byte, n int64) []byte {
		return setHeader(t, b, func(h *evidence.Header) { h.Records = n })
	}
	other, err := evidence.NewKeyFile("witness.test")
	if err != nil {
		t.Fatal(err)
	}
	otherKeys, _ := evidence.ParseKeys(other)
	sameName, _ := evidence.NewKeyFile("gated.test")
	otherOfName, _ := evidence.ParseKeys(sameName)
	forged := func(size int64, root byte) string {
		c := evidence.Checkpoint{Origin: evidence.OriginOf("gated.test", "acme"), Size: size, Time: time.Now().UTC().Truncate(time.Second)}
		c.Root[0] = root
		msg, err := evidence.Sign(c, l.keys.Signer)
		if err != nil {
			t.Fatal(err)
		}
		return string(msg)
	}
	for _, tc := range []struct {
		name   string
		bundle []byte
		opts   evidence.VerifyOptions
		want   string
	}{
		{"a record changed", changed(3), evidence.VerifyOptions{}, "the record at index 3 (stream sequence " + fmt.Sprint(record(3).Seq) + ") was changed"},
		{"the last record changed", changed(9), evidence.VerifyOptions{}, "the last record, at index 9, was changed"},
		{"a bit of a record flipped", flipped(5), evidence.VerifyOptions{}, "the record at index 5 (stream sequence " + fmt.Sprint(record(5).Seq) + ") is not a gated audit record: it was changed"},
		{"a record removed", recount(edit(func(ls []string) []string { return append(ls[:4], ls[5:]...) }), 9), evidence.VerifyOptions{}, "1 record(s) were removed"},
		{"a record removed and the rest renumbered", recount(edit(func(ls []string) []string {
			out := ls[:4]
			for i := 4; i < 10; i++ {
				r := record(i)
				r.Index--
				out = append(out, line(r))
			}
			h := setHeader(t, join(out), func(h *evidence.Header) {})
			return lines(h)
		}), 9), evidence.VerifyOptions{}, "the records end at index 8, the last checkpoint covers 10"},
		{"a record inserted", recount(edit(func(ls []string) []string { return append(ls[:5], append([]string{ls[4]}, ls[5:]...)...) }), 11), evidence.VerifyOptions{}, "index 3 appears twice (stream sequence 4): a record was inserted"},
		{"records reordered", edit(func(ls []string) []string { ls[3], ls[4] = ls[4], ls[3]; return ls }), evidence.VerifyOptions{}, "records were reordered"},
		{"records reordered, their indexes kept", edit(func(ls []string) []string {
			a, b := record(2), record(3)
			a.Index, b.Index = b.Index, a.Index
			ls[3], ls[4] = line(b), line(a)
			return ls
		}), evidence.VerifyOptions{}, "records were reordered"},
		{"a checkpoint with a bad signature", setHeader(t, whole, func(h *evidence.Header) {
			s := h.Checkpoints[1]
			// Another base64 letter, 8 letters into the signature.
			i, c := strings.LastIndex(s, " ")+8, "A"
			if s[i] == 'A' {
				c = "B"
			}
			h.Checkpoints[1] = s[:i] + c + s[i+1:]
		}), evidence.VerifyOptions{}, "checkpoint 2: checkpoint signature by gated.test does not verify"},
		{"a checkpoint signed by an unknown key", whole, evidence.VerifyOptions{Keys: otherKeys.Public}, "checkpoint 1: checkpoint signed by no known key"},
		{"a checkpoint signed by another key of the log's name", whole, evidence.VerifyOptions{Keys: otherOfName.Public}, "checkpoint 1: checkpoint signed by no known key"},
		{"a fork: two heads of one size", setHeader(t, whole, func(h *evidence.Header) {
			h.Checkpoints = []string{h.Checkpoints[0], forged(6, 7), h.Checkpoints[1]}
		}), evidence.VerifyOptions{}, "fork: checkpoints 1 and 2 are both signed for tree size 6"},
		{"a fork: a head inconsistent with an earlier one", setHeader(t, whole, func(h *evidence.Header) {
			h.Checkpoints = []string{h.Checkpoints[0], forged(10, 7)}
		}), evidence.VerifyOptions{}, "fork: checkpoint 2 (size 10) is not consistent with checkpoint 1 (size 6)"},
		{"another tenant's bundle", beta, evidence.VerifyOptions{Tenant: "acme"}, `a bundle of tenant "beta", not of "acme"`},
		{"another tenant's checkpoint", setHeader(t, whole, func(h *evidence.Header) {
			hb, _ := evidence.DecodeHeader([]byte(lines(beta)[0]))
			h.Checkpoints = hb.Checkpoints
		}), evidence.VerifyOptions{}, `checkpoint of tenant "beta"'s log, not of tenant "acme"`},
		{"a proof for another tenant", setHeader(t, ids, func(h *evidence.Header) {
			h.Tenant = "beta"
			hb, _ := evidence.DecodeHeader([]byte(lines(beta)[0]))
			h.Checkpoints, h.Consistency = hb.Checkpoints, nil
		}), evidence.VerifyOptions{}, "is not in the tree of the last checkpoint"},
		{"a proved record changed", func() []byte {
			ils := lines(ids)
			var r evidence.RecordLine
			_ = json.Unmarshal([]byte(ils[1]), &r)
			r.Body[10] ^= 1
			ils[1] = line(r)
			return join(ils)
		}(), evidence.VerifyOptions{}, "index 2 (stream sequence"},
		{"a consistency proof missing", setHeader(t, whole, func(h *evidence.Header) { h.Consistency = nil }), evidence.VerifyOptions{}, "no consistency proof from tree size 6 to 10"},
		{"records cut from the end", recount(edit(func(ls []string) []string { return ls[:10] }), 9), evidence.VerifyOptions{}, "the last checkpoint covers 10"},
		{"a witness missing", whole, evidence.VerifyOptions{Witnesses: []string{otherKeys.Public[0]}}, "not cosigned by the witness witness.test"},
		{"not a bundle", []byte("{}\n"), evidence.VerifyOptions{}, `format ""`},
		{"the header's records count", recount(whole, 3), evidence.VerifyOptions{}, "10 record lines, the header counts 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := verify(tc.bundle, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one that says %q", err, tc.want)
			}
		})
	}
	if _, err := verify(whole, evidence.VerifyOptions{}); err != nil {
		t.Fatalf("the bundle itself: %v", err)
	}
}

// TestSignRefusesAReplacedStream: a checkpoint signed over one stream
// is not extended over another history of the same tenant.
func TestSignRefusesAReplacedStream(t *testing.T) {
	l := newTestLog(t)
	l.write(t, "acme", "a", 4)
	c := l.sign(t, "acme")
	other := newTestLog(t)
	other.keys = l.keys
	other.write(t, "acme", "z", 6)
	if _, err := evidence.EnsureStream(t.Context(), other.js); err != nil {
		t.Fatal(err)
	}
	if _, err := other.js.Publish(t.Context(), evidence.SubjectPrefix+"acme", c.Note); err != nil {
		t.Fatal(err)
	}
	_, _, err := evidence.NewSigner(other.js, l.keys).Sign(t.Context(), "acme", time.Now())
	if err == nil || !strings.Contains(err.Error(), "the first 4 records no longer hash to the root") {
		t.Fatalf("signing over a replaced stream: %v", err)
	}
	var buf bytes.Buffer
	if _, err := evidence.Export(t.Context(), other.js, &buf, evidence.ExportOptions{Tenant: "acme", Keys: l.keys.Public}); err == nil {
		t.Fatal("exported a stream that its checkpoint does not match")
	}
}

// TestWitnessCosignature: a witness's cosignature is stored beside
// gated's and a verifier may require it.
func TestWitnessCosignature(t *testing.T) {
	l := newTestLog(t)
	l.write(t, "acme", "a", 3)
	c := l.sign(t, "acme")
	wfile, _ := evidence.NewKeyFile("witness.test")
	w, _ := evidence.ParseKeys(wfile)
	n, err := note.Open(c.Note, note.VerifierList(mustVerifier(t, l.keys.Public[0])))
	if err != nil {
		t.Fatal(err)
	}
	cosigned, err := note.Sign(n, w.Signer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := evidence.Cosign(t.Context(), l.js, "acme", cosigned, l.keys.Public, l.keys.Public[0]); err == nil {
		t.Error("a cosignature by gated's own key was taken for a witness's")
	}
	if _, err := evidence.Cosign(t.Context(), l.js, "acme", cosigned, l.keys.Public, w.Public[0]); err != nil {
		t.Fatal(err)
	}
	b := l.export(t, evidence.ExportOptions{Tenant: "acme", WitnessKeys: w.Public})
	res, err := verify(b, evidence.VerifyOptions{Keys: l.keys.Public, Witnesses: w.Public})
	if err != nil || len(res.Witnessed) != 1 || res.Witnessed[0] != "witness.test" {
		t.Fatalf("a cosigned checkpoint: %+v, %v", res, err)
	}
	// A witness's signature alone does not make a checkpoint.
	alone, _ := note.Sign(&note.Note{Text: n.Text}, w.Signer)
	bad := setHeader(t, b, func(h *evidence.Header) { h.Checkpoints[0] = string(alone) })
	if _, err := verify(bad, evidence.VerifyOptions{Keys: l.keys.Public, Witnesses: w.Public}); err == nil {
		t.Fatal("a checkpoint signed by the witness alone verified")
	}
}

func mustVerifier(t *testing.T, vkey string) note.Verifier {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
