package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine/wire"
)

func TestVerifyDetectsTampering(t *testing.T) {
	otherKey := []byte("fedcba9876543210fedcba9876543210")
	tests := []struct {
		note string
		// tamper writes to the stream and returns the problems Verify must
		// report, exactly.
		tamper func(t *testing.T, s *tamperStream) []wantProblem
		// macOnly is set when only the MAC shows the tampering: without a
		// key Verify must find nothing; macOnlyV2 likewise for records of
		// version 2.
		macOnly, macOnlyV2 bool
	}{
		{
			note: "a modified copy of a record",
			tamper: func(t *testing.T, s *tamperStream) []wantProblem {
				orig, err := s.audit.GetMsg(t.Context(), 2)
				if err != nil {
					t.Fatal(err)
				}
				m := nats.NewMsg(orig.Subject)
				for _, h := range []string{wire.AuditHashHeader, wire.AuditMACHeader, wire.AuditKeyHeader} {
					m.Header.Set(h, orig.Header.Get(h))
				}
				m.Data = alter(t, orig.Data, `"rejected"`, `"approved"`)
				seq := s.publish(t, m)
				return []wantProblem{{seq, audit.ProblemModified}, {seq, audit.ProblemReordered}}
			},
		},
		{
			// A version-2 record has no hash header: its MAC shows the
			// alteration, and without a key the chain does once a record
			// follows (the next case).
			note: "a body altered under its link and headers",
			tamper: func(t *testing.T, s *tamperStream) []wantProblem {
				m := s.next(t, 4, hexSHA256(s.head.Data), testKey)
				m.Data = alter(t, m.Data, `"rejected"`, `"approved"`)
				return []wantProblem{{s.publish(t, m), audit.ProblemModified}}
			},
			macOnlyV2: true,
		},
		{
			note: "a body altered, and a record after it",
			tamper: func(t *testing.T, s *tamperStream) []wantProblem {
				m := s.next(t, 4, hexSHA256(s.head.Data), testKey)
				five := s.next(t, 5, hexSHA256(m.Data), testKey)
				m.Data = alter(t, m.Data, `"rejected"`, `"approved"`)
				want := []wantProblem{{s.publish(t, m), audit.ProblemModified}}
				return append(want, wantProblem{s.publish(t, five), audit.ProblemModified})
			},
		},
		{
			note: "a link that matches no record",
			tamper: func(t *testing.T, s *tamperStream) []wantProblem {
				m := s.next(t, 4, hexSHA256([]byte("another record")), testKey)
				return []wantProblem{{s.publish(t, m), audit.ProblemModified}}
			},
		},
		{
			note: "a record skipped in the chain",
			tamper: func(t *testing.T, s *tamperStream) []wantProblem {
				four := s.next(t, 4, hexSHA256(s.head.Data), testKey)
				five := s.next(t, 5, hexSHA256(four.Data), testKey)
				return []wantProblem{{s.publish(t, five), audit.ProblemRemoved}}
			},
		},
		{
			note: "two records swapped",
			tamper: func(t *testing.T, s *tamperStream) []wantProblem {
				four := s.next(t, 4, hexSHA256(s.head.Data), testKey)
				five := s.next(t, 5, hexSHA256(four.Data), testKey)
				first := s.publish(t, five)
				second := s.publish(t, four)
				return []wantProblem{{first, audit.ProblemReordered}, {second, audit.ProblemReordered}}
			},
		},
		{
			note: "a record MACed with another key",
			tamper: func(t *testing.T, s *tamperStream) []wantProblem {
				return []wantProblem{{s.publish(t, s.next(t, 4, hexSHA256(s.head.Data), otherKey)), audit.ProblemForged}}
			},
			macOnly: true,
		},
		{
			note: "a made-up MAC",
			tamper: func(t *testing.T, s *tamperStream) []wantProblem {
				m := s.next(t, 4, hexSHA256(s.head.Data), testKey)
				m.Header.Set(wire.AuditMACHeader, hexSHA256([]byte("made up")))
				// A version-2 MAC covers the body itself: a wrong one is
				// reported as an altered body.
				kind := audit.ProblemForged
				if s.form != formV1 {
					kind = audit.ProblemModified
				}
				return []wantProblem{{s.publish(t, m), kind}}
			},
			macOnly: true,
		},
		{
			// A version-1 MAC is hex, read in either case; a version-2 MAC
			// is the writer's base64 alone, not one of its other spellings
			// of the same bytes (the last character carries two bits more).
			note: "a MAC spelt another way",
			tamper: func(t *testing.T, s *tamperStream) []wantProblem {
				m := s.next(t, 4, hexSHA256(s.head.Data), testKey)
				mac := m.Header.Get(wire.AuditMACHeader)
				if s.form == formV1 {
					m.Header.Set(wire.AuditMACHeader, strings.ToUpper(mac))
					s.publish(t, m)
					return nil
				}
				const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
				last := strings.IndexByte(alphabet, mac[len(mac)-1])
				m.Header.Set(wire.AuditMACHeader, mac[:len(mac)-1]+string(alphabet[last^1]))
				return []wantProblem{{s.publish(t, m), audit.ProblemModified}}
			},
			macOnly: true,
		},
		{
			note: "a record without a MAC",
			tamper: func(t *testing.T, s *tamperStream) []wantProblem {
				return []wantProblem{{s.publish(t, s.next(t, 4, hexSHA256(s.head.Data), nil)), audit.ProblemForged}}
			},
			macOnly: true,
		},
		{
			note: "a message that is not a record",
			tamper: func(t *testing.T, s *tamperStream) []wantProblem {
				m := nats.NewMsg("gated.audit.acme.verdict.decided")
				m.Data = []byte(`{"outcome":"approved"}`)
				return []wantProblem{{s.publish(t, m), audit.ProblemForged}}
			},
		},
	}
	for _, form := range []recordForm{formV1, formV2, formV3, formV3Compressed} {
		for _, tc := range tests {
			t.Run(fmt.Sprintf("%s/%s", form, tc.note), func(t *testing.T) {
				s := newTamperStream(t, form)
				if rep := verifyKeyed(t, s.js); !rep.Clean() {
					t.Fatalf("problems before tampering: %+v", rep.Problems)
				}
				want := tc.tamper(t, s)
				rep := verifyKeyed(t, s.js)
				if got := problemsOf(rep); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("problems %v, want %v\n%+v", got, want, rep.Problems)
				}
				for _, p := range rep.Problems {
					if p.Tenant != "acme" || p.Detail == "" {
						t.Errorf("problem %+v: want tenant acme and a detail", p)
					}
				}
				macOnly := tc.macOnly || form != formV1 && tc.macOnlyV2
				unkeyed := verify(t, s.js, audit.VerifyOptions{})
				if macOnly != unkeyed.Clean() {
					t.Errorf("without a key: problems %+v", unkeyed.Problems)
				}
			})
		}
	}
}

// TestVerifyDetectsTamperingInsideARecord tampers with the events of a
// record of version 2 or 3, keeping its link and headers: the MAC shows
// every change, and what leaves the record unable to decode (a version-2
// record unable to rebuild its verdict, a version-3 one whose subject no
// longer names its last event, or with no event) is not a record at all,
// key or no key.
func TestVerifyDetectsTamperingInsideARecord(t *testing.T) {
	tests := []struct {
		note string
		edit func([]json.RawMessage) []json.RawMessage
		// kind is what Verify reports with the key; invalid is set when
		// the record no longer decodes, which shows without a key too.
		// whole is set when a record of version 3, which rebuilds
		// nothing, still decodes: its MAC alone shows the change.
		kind         audit.ProblemKind
		invalid      bool
		wholeDecodes bool
	}{
		{note: "an event removed", kind: audit.ProblemModified,
			edit: func(evs []json.RawMessage) []json.RawMessage { return evs[1:] }, invalid: true, wholeDecodes: true},
		{note: "the policy event removed", kind: audit.ProblemForged,
			edit: func(evs []json.RawMessage) []json.RawMessage { return []json.RawMessage{evs[0], evs[2]} }, invalid: true, wholeDecodes: true},
		{note: "an event added", kind: audit.ProblemModified,
			edit: func(evs []json.RawMessage) []json.RawMessage { return append([]json.RawMessage{evs[1]}, evs...) }},
		{note: "two events swapped", kind: audit.ProblemModified,
			edit: func(evs []json.RawMessage) []json.RawMessage { return []json.RawMessage{evs[1], evs[0], evs[2]} }},
		{note: "the verdict moved before the policy", kind: audit.ProblemForged,
			edit: func(evs []json.RawMessage) []json.RawMessage { return []json.RawMessage{evs[0], evs[2], evs[1]} }, invalid: true},
		{note: "every event removed", kind: audit.ProblemForged,
			edit: func([]json.RawMessage) []json.RawMessage { return []json.RawMessage{} }, invalid: true},
	}
	for _, form := range []recordForm{formV2, formV3, formV3Compressed} {
		for _, tc := range tests {
			if form != formV2 && tc.wholeDecodes {
				tc.kind, tc.invalid = audit.ProblemModified, false
			}
			t.Run(form.String()+"/"+tc.note, func(t *testing.T) {
				s := newTamperStream(t, form)
				m := editEvents(t, s.decision(t, 4, hexSHA256(s.head.Data), testKey), tc.edit)
				seq := s.publish(t, m)
				rep := verifyKeyed(t, s.js)
				want := tc.kind
				if tc.invalid {
					want = audit.ProblemForged
				}
				if got := problemsOf(rep); fmt.Sprint(got) != fmt.Sprint([]wantProblem{{seq, want}}) {
					t.Fatalf("problems %v, want %v at seq %d\n%+v\n%s", got, want, seq, rep.Problems, m.Data)
				}
				if unkeyed := verify(t, s.js, audit.VerifyOptions{}); unkeyed.Clean() == tc.invalid {
					t.Errorf("without a key: problems %+v", unkeyed.Problems)
				}
			})
		}
	}
	t.Run("a version-3 record labelled version 1", func(t *testing.T) {
		s := newTamperStream(t, formV3)
		m := s.decision(t, 4, hexSHA256(s.head.Data), testKey)
		m.Data = bytes.Replace(m.Data, []byte(`{"v":3,`), []byte(`{"v":1,`), 1)
		seq := s.publish(t, m)
		for _, keys := range [][][]byte{{testKey}, nil} {
			rep := verify(t, s.js, audit.VerifyOptions{Keys: keys})
			if got := problemsOf(rep); fmt.Sprint(got) != fmt.Sprint([]wantProblem{{seq, audit.ProblemForged}}) {
				t.Fatalf("keys %d: problems %v, want it forged\n%+v", len(keys), got, rep.Problems)
			}
		}
	})
}

// TestWriterChainsPastForeignMessages checks that gated, finding its
// chain extended by someone else, links its next record to whatever is
// last, so the tampering is reported once and the chain goes on.
func TestWriterChainsPastForeignMessages(t *testing.T) {
	tests := []struct {
		note   string
		tamper func(t *testing.T, s *tamperStream) wantProblem
		head   uint64
	}{
		{
			note: "not a record",
			tamper: func(t *testing.T, s *tamperStream) wantProblem {
				m := nats.NewMsg("gated.audit.acme.verdict.decided")
				m.Data = []byte("garbage")
				return wantProblem{s.publish(t, m), audit.ProblemForged}
			},
			head: 2, // the chain restarts at 1 after the foreign message
		},
		{
			note: "a record skipped",
			tamper: func(t *testing.T, s *tamperStream) wantProblem {
				four := s.next(t, 4, hexSHA256(s.head.Data), testKey)
				return wantProblem{s.publish(t, s.next(t, 5, hexSHA256(four.Data), testKey)), audit.ProblemRemoved}
			},
			head: 7,
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			s := newTamperStream(t, formV3Compressed)
			want := tc.tamper(t, s)
			a := bustest.AuditWriter(t, s.js, audit.Config{Key: testKey})
			writeTrails(t, a, "after", 2, 0, "acme")
			rep := verifyKeyed(t, s.js)
			if got := problemsOf(rep); fmt.Sprint(got) != fmt.Sprint([]wantProblem{want}) {
				t.Fatalf("problems %v, want only %v\n%+v", got, want, rep.Problems)
			}
			if got := heads(rep)["acme"]; got != tc.head {
				t.Fatalf("acme's head n=%d, want %d", got, tc.head)
			}
		})
	}
}

// TestVerifyDetectsDeletedRecords deletes records from a stream that
// allows it: the chain shows the one inside a tenant's chain, the stream
// sequences the one at the end of a tenant's chain.
func TestVerifyDetectsDeletedRecords(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	stream, err := js.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: audit.Stream, Subjects: []string{wire.AuditSubjectPrefix + ">"}, AllowAtomicPublish: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	a := bustest.AuditWriter(t, js, audit.Config{Key: testKey})
	for i, tenant := range []string{"acme", "acme", "acme", "acme", "acme", "beta"} {
		if _, err := a.Trail().Seal(t.Context(), verdictEvent(tenant, fmt.Sprint("p", i))); err != nil {
			t.Fatal(err)
		}
	}
	for _, seq := range []uint64{3, 5} {
		if err := stream.DeleteMsg(t.Context(), seq); err != nil {
			t.Fatal(err)
		}
	}
	rep := verify(t, js, audit.VerifyOptions{Keys: [][]byte{testKey}})
	want := []wantProblem{{4, audit.ProblemRemoved}, {4, audit.ProblemRemoved}, {6, audit.ProblemRemoved}}
	if got := problemsOf(rep); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("problems %v, want %v\n%+v", got, want, rep.Problems)
	}
	// One tenant's chain alone shows the gap inside it only.
	rep = verify(t, js, audit.VerifyOptions{Tenant: "acme", Keys: [][]byte{testKey}})
	if got := problemsOf(rep); fmt.Sprint(got) != fmt.Sprint([]wantProblem{{4, audit.ProblemRemoved}}) {
		t.Fatalf("acme alone: problems %v\n%+v", got, rep.Problems)
	}
}

func TestVerifyAnchors(t *testing.T) {
	_, js := setupAudit(t)
	a := bustest.AuditWriter(t, js, audit.Config{Key: testKey})
	writeTrails(t, a, "p", 2, 1, "acme", "beta")
	before := verify(t, js, audit.VerifyOptions{})
	writeTrails(t, a, "q", 2, 1, "acme", "beta")
	if rep := verify(t, js, audit.VerifyOptions{Anchors: before.Heads}); !rep.Clean() {
		t.Fatalf("anchors of an intact chain: %+v", rep.Problems)
	}
	altered := append([]audit.Head(nil), before.Heads...)
	altered[0].Hash = hexSHA256([]byte("other"))
	rep := verify(t, js, audit.VerifyOptions{Anchors: altered})
	if len(rep.Problems) != 1 || rep.Problems[0].Kind != audit.ProblemModified || rep.Problems[0].Tenant != altered[0].Tenant {
		t.Fatalf("an anchor whose record changed: %+v", rep.Problems)
	}
	// An anchor past the chain's end: the chain was cut short.
	cut := []audit.Head{{Tenant: "acme", N: 99, Hash: hexSHA256([]byte("x"))}}
	rep = verify(t, js, audit.VerifyOptions{Anchors: cut})
	if len(rep.Problems) != 1 || rep.Problems[0].Kind != audit.ProblemRemoved {
		t.Fatalf("an anchor past the end: %+v", rep.Problems)
	}
	// Anchors round-trip through the JSON lines verify --json prints.
	var lines bytes.Buffer
	for _, h := range before.Heads {
		fmt.Fprintf(&lines, `{"type":"head","tenant":%q,"n":%d,"hash":%q,"seq":%d}`+"\n", h.Tenant, h.N, h.Hash, h.Seq)
	}
	fmt.Fprintln(&lines, `{"type":"summary","messages":4}`)
	parsed, err := audit.ParseHeads(lines.Bytes())
	if err != nil || fmt.Sprint(parsed) != fmt.Sprint(before.Heads) {
		t.Fatalf("ParseHeads = %v, %v; want %v", parsed, err, before.Heads)
	}
	if _, err := audit.ParseHeads([]byte(`{"tenant":"acme","n":0,"hash":"x"}`)); err == nil {
		t.Error("an anchor without n or hash was accepted")
	}
	// A stray bracket must not end the anchors silently.
	for _, bad := range []string{"}\n" + lines.String(), lines.String() + "]\n" + lines.String(), lines.String() + "garbage"} {
		if heads, err := audit.ParseHeads([]byte(bad)); err == nil {
			t.Errorf("ParseHeads(%q) = %v, want an error", bad, heads)
		}
	}
}

func TestVerifyWithoutStream(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	if _, err := audit.Verify(t.Context(), js, audit.VerifyOptions{}); !errors.Is(err, audit.ErrNoStream) {
		t.Fatalf("err = %v, want ErrNoStream", err)
	}
	if err := audit.Read(t.Context(), js, audit.Query{}, func(audit.Entry) error { return nil }); !errors.Is(err, audit.ErrNoStream) {
		t.Fatalf("err = %v, want ErrNoStream", err)
	}
}

func TestReadAudit(t *testing.T) {
	_, js := setupAudit(t)
	a := bustest.AuditWriter(t, js, audit.Config{})
	writeTrails(t, a, "p", 4, 1, "acme", "beta") // seq 1-8

	read := func(q audit.Query) []string {
		t.Helper()
		var out []string
		err := audit.Read(t.Context(), js, q, func(e audit.Entry) error {
			if e.Err != nil {
				return e.Err
			}
			out = append(out, fmt.Sprintf("%d:%s", e.Record.Chain.N, e.Tenant()))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := read(audit.Query{}); len(got) != 8 {
		t.Errorf("everything: %v", got)
	}
	if got := strings.Join(read(audit.Query{Tenant: "beta"}), " "); got != "1:beta 2:beta 3:beta 4:beta" {
		t.Errorf("tenant beta: %s", got)
	}
	if got := read(audit.Query{Tenant: "nobody"}); len(got) != 0 {
		t.Errorf("a tenant without records: %v", got)
	}
	if got := read(audit.Query{Since: time.Now().Add(time.Hour)}); len(got) != 0 {
		t.Errorf("since the future: %v", got)
	}
	if got := read(audit.Query{Since: time.Now().Add(-time.Hour)}); len(got) != 8 {
		t.Errorf("since an hour ago: %v", got)
	}
	if got := read(audit.Query{StartSeq: 7}); len(got) != 2 {
		t.Errorf("from seq 7: %v", got)
	}
	// An event is read by its subject: each trail's verdict.decided, one
	// of its two records.
	if got := read(audit.Query{Event: gated.EventVerdict}); len(got) != 4 {
		t.Errorf("the verdicts: %v", got)
	}
	if got := read(audit.Query{Tenant: "beta", Event: gated.EventVerdict}); len(got) != 2 || !strings.HasSuffix(got[0], ":beta") || !strings.HasSuffix(got[1], ":beta") {
		t.Errorf("beta's verdicts: %v", got)
	}
	if got := read(audit.Query{Tenant: "beta", Event: gated.EventBudgetRefused}); len(got) != 0 {
		t.Errorf("beta's budget refusals: %v", got)
	}

	// Follow delivers what is written after it started, until cancelled.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		mu   sync.Mutex
		seen []uint64
		wg   sync.WaitGroup
		ferr error
	)
	wg.Go(func() {
		ferr = audit.Read(ctx, js, audit.Query{Tenant: "gamma", Follow: true}, func(e audit.Entry) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, e.Record.Chain.N)
			if len(seen) == 3 {
				cancel()
			}
			return nil
		})
	})
	for i := range 3 {
		if _, err := a.Trail().Seal(t.Context(), verdictEvent("gamma", fmt.Sprint("g", i))); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if ferr != nil || fmt.Sprint(seen) != "[1 2 3]" {
		t.Fatalf("followed %v, err %v", seen, ferr)
	}
}

func TestAuditFilter(t *testing.T) {
	rec := func(event, data string) *audit.Record {
		return audit.NewRecord(0, gated.AuditEvent{Event: event, Data: []byte(data)})
	}
	verdict := rec(gated.EventVerdict, `{"action":"db_drop_table","operator":"alice","outcome":"rejected"}`)
	received := rec(gated.EventReceived, `{"action":"db_drop_table","operator":"alice"}`)
	tests := []struct {
		note   string
		filter audit.Filter
		rec    *audit.Record
		want   bool
	}{
		{note: "empty filter", rec: received, want: true},
		{note: "outcome of a verdict", filter: audit.Filter{Outcome: "rejected"}, rec: verdict, want: true},
		{note: "another outcome", filter: audit.Filter{Outcome: "approved"}, rec: verdict},
		{note: "outcome keeps verdicts only", filter: audit.Filter{Outcome: "rejected"}, rec: rec(gated.EventReplayed, `{"outcome":"rejected"}`)},
		{note: "action", filter: audit.Filter{Action: "db_drop_table"}, rec: received, want: true},
		{note: "another action", filter: audit.Filter{Action: "db_backup"}, rec: received},
		{note: "operator and action", filter: audit.Filter{Action: "db_drop_table", Operator: "alice"}, rec: verdict, want: true},
		{note: "another operator", filter: audit.Filter{Operator: "bob"}, rec: verdict},
		{note: "no data", filter: audit.Filter{Operator: "bob"}, rec: rec(gated.EventPolicyReloaded, "")},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			if got := tc.filter.Match(tc.rec); got != tc.want {
				t.Fatalf("Match = %v, want %v", got, tc.want)
			}
		})
	}
}

// FuzzParseHeads feeds ParseHeads arbitrary anchors files (the
// user's --anchors): it must never panic; every head it accepts is valid
// and reads back the same from its JSON line and from a JSON array.
func FuzzParseHeads(f *testing.F) {
	h := `{"type":"head","tenant":"acme","n":3,"hash":"` + hexSHA256([]byte("x")) + `","seq":7}`
	f.Add([]byte(h + "\n" + `{"type":"summary","messages":4}` + "\n"))
	f.Add([]byte(`{"type":"summary","messages":4}` + "\n" + h + "\n" + `{"type":"note","note":"n"}`))
	f.Add([]byte(`[{"tenant":"_","n":1,"hash":"` + hexSHA256(nil) + `"}]`))
	f.Add([]byte(`{"tenant":"acme","n":0,"hash":"x"}`))
	f.Add([]byte(h + "]"))
	f.Add([]byte("}" + h))
	f.Add([]byte("null"))
	f.Add([]byte("  \n"))
	f.Add([]byte(`{"tYpe":"0"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		heads, err := audit.ParseHeads(data)
		if err != nil {
			return
		}
		var lines bytes.Buffer
		for _, h := range heads {
			if h.Tenant == "" || h.N == 0 || len(h.Hash) != 64 {
				t.Fatalf("accepted an invalid head %+v from %q", h, data)
			}
			line, err := json.Marshal(struct {
				Type string `json:"type"`
				audit.Head
			}{"head", h})
			if err != nil {
				t.Fatal(err)
			}
			lines.Write(append(line, '\n'))
		}
		same := func(a, b []audit.Head) bool { return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b)) }
		again, err := audit.ParseHeads(lines.Bytes())
		if err != nil || !same(again, heads) {
			t.Fatalf("heads %+v read back from JSON lines as %+v, %v", heads, again, err)
		}
		array, err := json.Marshal(append([]audit.Head{}, heads...))
		if err != nil {
			t.Fatal(err)
		}
		again, err = audit.ParseHeads(array)
		if err != nil || !same(again, heads) {
			t.Fatalf("heads %+v read back from a JSON array as %+v, %v", heads, again, err)
		}
		// Input that reads as no anchors must hold none: nothing but
		// white space, an empty array, or whole JSON items of other types.
		// (An anchors file that silently yields nothing defeats them.)
		if len(heads) == 0 && !noHeads(data) {
			t.Fatalf("%q reads as no anchors and no error", data)
		}
	})
}

// noHeads reports whether data is white space, an empty JSON array, or
// JSON items each of a type other than head, read to the end.
func noHeads(data []byte) bool {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || string(data) == "[]" {
		return true
	}
	if data[0] == '[' {
		var items []json.RawMessage
		return json.Unmarshal(data, &items) == nil && len(items) == 0
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		var item struct {
			Type string `json:"type"`
		}
		switch err := dec.Decode(&item); {
		case errors.Is(err, io.EOF):
			return true
		case err != nil, item.Type == "", item.Type == "head":
			return false
		}
	}
}
