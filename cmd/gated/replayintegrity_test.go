package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/replay/replaytest"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/server"
)

// newAuditKey writes a fresh audit key to a file and returns the key and
// the file.
func newAuditKey(t *testing.T) ([]byte, string) {
	t.Helper()
	key := make([]byte, audit.MinKeyLen)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return key, writeFile(t, t.TempDir(), "audit.key", hex.EncodeToString(key)+"\n")
}

// TestReplayChecksMACs: replay given the audit key checks every record's
// MAC as audit verify does; a record written without the key fails the
// range. Without a key it says the MACs were not checked.
func TestReplayChecksMACs(t *testing.T) {
	js := replaytest.Server(t)
	key, keyFile := newAuditKey(t)
	replaytest.WriteScriptedHistory(t, bustest.AuditWriter(t, js, audit.Config{Key: key}), 20)
	url, cand := natsURL(t, js), mustCandidateDir(t)

	code, out, err := runGated(t, "policy", "replay", "--policies", cand, "--nats-url", url, "--audit-key-file", keyFile)
	if code != 0 || !strings.Contains(out, "MACs checked with key "+audit.KeyID(key)) {
		t.Fatalf("an intact keyed history: exit %d (err %v), want 0 saying the MACs were checked\n%s", code, err, out)
	}
	// One more proposal, written by a gated without the key.
	replaytest.WriteScriptedHistory(t, bustest.AuditWriter(t, js, audit.Config{}), 1)
	tests := []struct {
		note string
		args []string
		code int
		want []string
	}{
		{note: "with the key", args: []string{"--audit-key-file", keyFile}, code: exitFailure,
			want: []string{"RANGE NOT INTACT", "forged: no MAC, yet records are MACed", "MACs checked with key " + audit.KeyID(key)}},
		{note: "json with the key", args: []string{"--audit-key-file", keyFile, "--format", "json"}, code: exitFailure,
			want: []string{`"macs_checked": true`, `"kind": "forged"`}},
		{note: "without a key", args: nil, code: 0, want: []string{"MACs not checked"}},
		{note: "a key file that is not a key", args: []string{"--audit-key-file", writeFile(t, t.TempDir(), "k", "short")}, code: exitUsage, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			args := append([]string{"policy", "replay", "--policies", cand, "--nats-url", url}, tc.args...)
			code, out, err := runGated(t, args...)
			if code != tc.code {
				t.Fatalf("exit %d (err %v), want %d\n%s", code, err, tc.code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q\n%s", w, out)
				}
			}
		})
	}
}

// TestReplayDataDirUsesItsKey: replaying the embedded server's data dir
// checks the MACs with <data-dir>/audit.key, as serve wrote them.
func TestReplayDataDirUsesItsKey(t *testing.T) {
	dataDir := t.TempDir()
	key, _ := newAuditKey(t)
	writeFile(t, dataDir, server.AuditKeyName, hex.EncodeToString(key)+"\n")
	writeDataDirHistory(t, dataDir, audit.Config{Key: key})
	code, out, err := runGated(t, "policy", "replay", "--policies", mustCandidateDir(t), "--data-dir", dataDir)
	if code != 0 || !strings.Contains(out, "MACs checked with key "+audit.KeyID(key)) {
		t.Fatalf("exit %d (err %v), want 0 with the data dir's key checked\n%s", code, err, out)
	}
}

// storeHeadVerdicts stores in the verdict bucket the verdict of each
// head's record, with its audit_seq, as gated stores a verdict once its
// record is in the stream, oldest first.
func storeHeadVerdicts(t *testing.T, js jetstream.JetStream, stream jetstream.Stream, heads []audit.Head) {
	t.Helper()
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: wire.VerdictBucket})
	if err != nil {
		t.Fatal(err)
	}
	heads = slices.SortedFunc(slices.Values(heads), func(a, b audit.Head) int { return cmp.Compare(a.Seq, b.Seq) })
	for _, h := range heads {
		m, err := stream.GetMsg(t.Context(), h.Seq)
		if err != nil {
			t.Fatal(err)
		}
		r, err := audit.DecodeRecord(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		ev, ok := r.Find(gated.EventVerdict)
		if !ok {
			t.Fatalf("seq %d holds no verdict", h.Seq)
		}
		var v gated.Verdict
		if err := json.Unmarshal(ev.Data, &v); err != nil {
			t.Fatal(err)
		}
		v.AuditSeq = h.Seq
		data, err := json.Marshal(&v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(t.Context(), wire.VerdictKey(v.Tenant, v.ProposalID), data); err != nil {
			t.Fatal(err)
		}
	}
}

// tailStream is an audit stream that lets records be deleted, with a
// scripted history of n proposals, and the heads of its chains then.
func tailStream(t *testing.T, n int) (jetstream.JetStream, jetstream.Stream, []byte) {
	t.Helper()
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	stream, err := js.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: audit.Stream, Subjects: []string{wire.AuditSubjectPrefix + ">"}, AllowAtomicPublish: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	replaytest.WriteScriptedHistory(t, bustest.AuditWriter(t, js, audit.Config{}), n)
	rep, err := audit.Verify(t.Context(), js, audit.VerifyOptions{SkipVerdicts: true})
	if err != nil {
		t.Fatal(err)
	}
	var heads bytes.Buffer
	for _, h := range rep.Heads {
		if err := json.NewEncoder(&heads).Encode(h); err != nil {
			t.Fatal(err)
		}
	}
	return js, stream, heads.Bytes()
}

// TestReplayDetectsACutEnd deletes the newest records of the stream:
// the chain alone shows nothing, the anchors (and, reading every tenant,
// the stream's own last sequence) show the cut, and replay exits 1.
func TestReplayDetectsACutEnd(t *testing.T) {
	js, stream, heads := tailStream(t, 20)
	anchors := writeFile(t, t.TempDir(), "heads.jsonl", string(heads))
	info, err := stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	last := info.State.LastSeq
	hs, err := audit.ParseHeads(heads)
	if err != nil {
		t.Fatal(err)
	}
	// The cut starts at the older of the two tenants' last records, so
	// that both chains lose their end.
	cutFrom := last
	for _, h := range hs {
		cutFrom = min(cutFrom, h.Seq)
	}
	storeHeadVerdicts(t, js, stream, hs)
	url, cand := natsURL(t, js), mustCandidateDir(t)
	// Before the cut, the anchors and the latest verdict hold.
	code, out, err := runGated(t, "policy", "replay", "--policies", cand, "--nats-url", url, "--anchors", anchors)
	if code != 0 || !strings.Contains(out, "checked against 2 anchor(s)") || !strings.Contains(out, "checked against the latest stored verdict") {
		t.Fatalf("intact: exit %d (err %v), want 0 with the anchors and the latest verdict checked\n%s", code, err, out)
	}
	for seq := cutFrom; seq <= last; seq++ {
		if err := stream.DeleteMsg(t.Context(), seq); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		note string
		args []string
		code int
		want []string
	}{
		{note: "one tenant with anchors", args: []string{"--tenant", "acme", "--anchors", anchors}, code: exitFailure,
			want: []string{"RANGE NOT INTACT", "anchored record", "cut short"}},
		{note: "an anchors file that does not exist", args: []string{"--anchors", filepath.Join(t.TempDir(), "none")}, code: exitUsage},
		{note: "every tenant, no anchors", args: nil, code: exitFailure,
			want: []string{"RANGE NOT INTACT", "missing at the end of the stream", "end of the range checked against the stream's last sequence"}},
		{note: "one tenant, no anchors", args: []string{"--tenant", "acme"}, code: exitFailure,
			want: []string{"RANGE NOT INTACT", "the latest stored verdict acme.", "which is not in the stream: removed"}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			args := append([]string{"policy", "replay", "--policies", cand, "--nats-url", url}, tc.args...)
			code, out, err := runGated(t, args...)
			if code != tc.code {
				t.Fatalf("exit %d (err %v), want %d\n%s", code, err, tc.code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q\n%s", w, out)
				}
			}
		})
	}
	// Without the verdict store, one tenant's cut end goes unseen, and the
	// report says so.
	if err := js.DeleteKeyValue(t.Context(), wire.VerdictBucket); err != nil {
		t.Fatal(err)
	}
	code, out, err = runGated(t, "policy", "replay", "--policies", cand, "--nats-url", url, "--tenant", "acme")
	if code != 0 || !strings.Contains(out, "end of the range not checked") {
		t.Fatalf("one tenant, no anchors, no verdict store: exit %d (err %v), want 0 saying the end was not checked\n%s", code, err, out)
	}
}

// TestReplayAnchorsBeforeTheRange: an anchor older than the range replayed
// cannot be checked by it and is not a cut.
func TestReplayAnchorsBeforeTheRange(t *testing.T) {
	js, _, heads := tailStream(t, 4)
	replaytest.WriteScriptedHistory(t, bustest.AuditWriter(t, js, audit.Config{}), 4)
	anchors := writeFile(t, t.TempDir(), "heads.jsonl", string(heads))
	code, out, err := runGated(t, "policy", "replay", "--policies", mustCandidateDir(t), "--nats-url", natsURL(t, js),
		"--anchors", anchors, "--from-seq", "12")
	if code != 0 || !strings.Contains(out, "2 anchor(s) before the range") {
		t.Fatalf("exit %d (err %v), want 0 with the anchors before the range noted\n%s", code, err, out)
	}
}

// writeDataDirHistory writes a scripted history of 20 proposals into the
// embedded server's files in dataDir and stops the server.
func writeDataDirHistory(t *testing.T, dataDir string, cfg audit.Config) {
	t.Helper()
	s, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: dataDir}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	_, js := bustest.Connect(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if _, err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	cfg.Log = zap.NewNop()
	w, err := audit.NewWriter(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	replaytest.WriteScriptedHistory(t, w, 20)
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	js.Conn().Close()
	s.Shutdown()
	s.WaitForShutdown()
}
