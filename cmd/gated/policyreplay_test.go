package main

import (
	"context"
	"strings"
	"testing"

	"github.com/gated/gated"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/replay/replaytest"
	"github.com/gated/gated/engine/wire"
)

func mustCandidateDir(t *testing.T) string {
	_, dir := replaytest.Candidate(t)
	return dir
}

func natsURL(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	return js.Conn().ConnectedUrl()
}

// TestPolicyReplayRefusesAForgedRecord: a forged message in the range
// fails the command with exit 1, naming the broken range.
func TestPolicyReplayRefusesAForgedRecord(t *testing.T) {
	js := replaytest.Server(t)
	replaytest.WriteScriptedHistory(t, bustest.AuditWriter(t, js, audit.Config{}), 20)
	if _, err := js.Publish(t.Context(), wire.AuditSubject("acme", gated.EventVerdict), []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	code, out, err := runGated(t, "policy", "replay", "--policies", mustCandidateDir(t), "--nats-url", natsURL(t, js))
	if code != exitFailure || !strings.Contains(out, "RANGE NOT INTACT") {
		t.Fatalf("exit %d, err %v; want exit %d naming the broken range\n%s", code, err, exitFailure, out)
	}
}

// TestPolicyReplayCommand runs the command on a deployment and on the
// embedded server's data dir.
func TestPolicyReplayCommand(t *testing.T) {
	js := replaytest.Server(t)
	replaytest.WriteScriptedHistory(t, bustest.AuditWriter(t, js, audit.Config{}), 40)
	dir := mustCandidateDir(t)
	url := natsURL(t, js)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{name: "text", args: []string{"--nats-url", url}, code: 0, want: "flipped: 12"},
		{name: "json", args: []string{"--nats-url", url, "--format", "json"}, code: 0, want: `"flips": 12`},
		{name: "one tenant", args: []string{"--nats-url", url, "--tenant", "acme"}, code: 0, want: "flipped: 8"},
		{name: "fail on flip", args: []string{"--nats-url", url, "--fail-on-flip"}, code: exitFlipped, want: "no_cache_purge"},
		{name: "both ranges", args: []string{"--nats-url", url, "--since", "1h", "--from-seq", "3"}, code: exitUsage, want: ""},
		{name: "no candidate", args: []string{"--nats-url", url, "--policies", ""}, code: exitUsage, want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"policy", "replay", "--policies", dir}, tc.args...)
			code, out, err := runGated(t, args...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d (err %v), want %d with %q\n%s", code, err, tc.code, tc.want, out)
			}
		})
	}
}

// TestPolicyReplayDataDir replays the files of a stopped embedded server.
func TestPolicyReplayDataDir(t *testing.T) {
	dataDir := t.TempDir()
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
	w, err := audit.NewWriter(ctx, js, audit.Config{Log: zap.NewNop()})
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
	code, out, err := runGated(t, "policy", "replay", "--policies", mustCandidateDir(t), "--data-dir", dataDir)
	if code != 0 || !strings.Contains(out, "flipped: 6") {
		t.Fatalf("exit %d (err %v), want 0 with 6 flips\n%s", code, err, out)
	}
	lock, err := bus.LockDataDir(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	code, out, err = runGated(t, "policy", "replay", "--policies", mustCandidateDir(t), "--data-dir", dataDir)
	if code != exitFailure || err == nil || !strings.Contains(err.Error(), "stop the gated that holds it") {
		t.Fatalf("exit %d (err %v), want the held data dir refused\n%s", code, err, out)
	}
}

// TestPolicyReplayWorkersFlag: --workers takes 1 or more and the summary
// names how many decided.
func TestPolicyReplayWorkersFlag(t *testing.T) {
	js := replaytest.Server(t)
	replaytest.WriteTrailHistory(t, bustest.AuditWriter(t, js, audit.Config{}), 40)
	dir := mustCandidateDir(t)
	tests := []struct {
		note    string
		workers string
		code    int
		want    string
	}{
		{note: "one worker", workers: "1", code: 0, want: "on 1 worker(s)"},
		{note: "three workers", workers: "3", code: 0, want: "on 3 worker(s)"},
		{note: "none", workers: "0", code: exitUsage, want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			code, out, err := runGated(t, "policy", "replay", "--policies", dir, "--nats-url", natsURL(t, js), "--workers", tc.workers)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d (err %v), want %d with %q\n%s", code, err, tc.code, tc.want, out)
			}
			if tc.code == 0 && !strings.Contains(out, "flipped: 12") {
				t.Fatalf("want 12 flips whatever the workers\n%s", out)
			}
		})
	}
}
