package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/notify"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/server"
)

// hookServer is a webhook receiver that verifies every request as the
// docs tell receivers to, and keeps the notifications.
type hookServer struct {
	srv    *httptest.Server
	secret []byte
	mu     sync.Mutex
	got    []notify.Notification
	bad    []string
}

func newHookServer(t *testing.T, secret []byte) *hookServer {
	t.Helper()
	h := &hookServer{secret: secret}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		if err := notify.Verify(secret, r.Header.Get(wire.NotifyTimestampHeader), r.Header.Get(wire.NotifySignatureHeader), body, time.Now(), 5*time.Minute); err != nil {
			h.bad = append(h.bad, err.Error())
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var n notify.Notification
		if err := json.Unmarshal(body, &n); err != nil {
			h.bad = append(h.bad, err.Error())
		}
		h.got = append(h.got, n)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookServer) notifications() ([]notify.Notification, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]notify.Notification(nil), h.got...), append([]string(nil), h.bad...)
}

// TestServeNotifiesWithoutDelayingVerdicts runs serve with --notify: a
// sink that verifies signatures, one that hangs and one that answers 500.
// Verdicts arrive while the hanging sink holds its request; the good sink
// gets the decided notifications, an awaiting_operator one appended
// through the audit trail by another gated instance, and plugin_down when
// the reviewer plugin is killed, each signed; the
// failing sink is tried within its bounds; everything is audited and
// counted in /metrics.
func TestServeNotifiesWithoutDelayingVerdicts(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	good := newHookServer(t, []byte("good-sink-secret-0123456789abcdef"))
	var hangEntered, hangInFlight atomic.Int32
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		hangEntered.Add(1)
		hangInFlight.Add(1)
		defer hangInFlight.Add(-1)
		<-release
	}))
	defer hang.Close()
	defer close(release)
	var failHits atomic.Int32
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		failHits.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer failing.Close()
	writeFile(t, dir, "good.secret", "good-sink-secret-0123456789abcdef\n")
	t.Setenv("TEST_HOOK_SECRET", "another-secret-0123456789abcdef")
	notifyFile := writeFile(t, dir, "notify.yaml", `sinks:
  - name: good
    url: `+good.srv.URL+`/gated
    events: [awaiting_operator, decided, timeout, plugin_down]
    secret_file: good.secret
  - name: hang
    url: `+hang.URL+`
    events: [decided]
    secret_env: TEST_HOOK_SECRET
    timeout: 1m
    max_attempts: 1
  - name: failing
    url: `+failing.URL+`
    events: [decided]
    secret_env: TEST_HOOK_SECRET
    max_attempts: 3
    backoff: 10ms
`)
	auditKey := []byte("e2e-audit-key-0123456789abcdef-0123456789")
	keyFile := writeFile(t, dir, "audit.key", string(auditKey))

	s := bustest.Server(t)
	httpAddr, stop := startServe(t, s.ClientURL(), "--notify", notifyFile, "--audit-key-file", keyFile)
	defer stop()

	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	if v := propose(t, client, readProposal("p-first", "nginx")); v.Outcome != gated.OutcomeApproved {
		t.Fatalf("p-first: %s (%s)", v.Outcome, v.Reason)
	}
	waitUntil(t, "the hanging sink to hold a request", func() bool { return hangInFlight.Load() == 1 })
	start := time.Now()
	v := propose(t, client, readProposal("p-second", "redis"))
	took := time.Since(start)
	held := hangInFlight.Load()
	if v.Outcome != gated.OutcomeApproved {
		t.Fatalf("p-second: %s (%s)", v.Outcome, v.Reason)
	}
	if held != 1 {
		t.Fatalf("the hanging sink held %d requests when the verdict arrived, want 1: the test did not overlap them", held)
	}
	t.Logf("a verdict took %s while a sink hung", took)

	// Another gated instance holds a proposal for an operator: its record
	// reaches the notifier through the audit stream.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	other, err := audit.NewWriter(t.Context(), js, audit.Config{Key: auditKey, Instance: "other"})
	if err != nil {
		t.Fatal(err)
	}
	evData, _ := json.Marshal(map[string]any{"action": "db_drop_table", "deadline": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
		"reason": "tenant_wide destructive change", "rule": "route_operator"})
	if _, err := other.Trail().Seal(t.Context(), gated.AuditEvent{V: gated.SchemaVersion, Event: gated.EventOperatorAwaited,
		Tenant: "acme", ProposalID: "p-held", At: time.Now().UTC(), Data: evData}); err != nil {
		t.Fatal(err)
	}
	closeCtx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := other.Close(closeCtx); err != nil {
		t.Fatal(err)
	}

	// The reviewer plugin dies: the plugin host records its exit, and the
	// notifier tells the sink.
	pid := pluginPID(t, httpAddr, "sop")
	proc, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, httpAddr, `gated_notify_deliveries_total{kind="plugin_down",result="delivered",sink="good"} 1`)

	metrics := waitMetric(t, httpAddr, `gated_notify_deliveries_total{kind="decided",result="failed",sink="failing"} 2`)
	waitMetric(t, httpAddr, `gated_notify_deliveries_total{kind="awaiting_operator",result="delivered",sink="good"} 1`)
	metrics = waitMetric(t, httpAddr, `gated_notify_deliveries_total{kind="decided",result="delivered",sink="good"} 2`)
	for _, want := range []string{`gated_notify_retries_total{sink="failing"} 4`, `gated_notify_notifications_total{kind="decided"} 2`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	got, bad := good.notifications()
	if len(bad) > 0 {
		t.Errorf("the good sink refused requests: %v", bad)
	}
	byID := map[string]notify.Notification{}
	for _, n := range got {
		byID[n.ProposalID] = n
	}
	if n, ok := byID[""]; !ok || n.Kind != notify.KindPluginDown || n.Tenant != gated.UnknownTenant || n.Summary != "reviewer plugin sop exited" {
		t.Errorf("plugin notification %+v, want plugin_down for sop under tenant _", n)
	}
	for id, kind := range map[string]notify.Kind{"p-first": notify.KindDecided, "p-second": notify.KindDecided, "p-held": notify.KindAwaitingOperator} {
		if n, ok := byID[id]; !ok || n.Kind != kind || n.Tenant != "acme" {
			t.Errorf("%s: notification %+v, want %s for acme", id, n, kind)
		}
	}
	if n := byID["p-second"]; !strings.Contains(n.Summary, "approved") || n.AuditSeq != v.AuditSeq {
		t.Errorf("p-second's notification %+v does not name its verdict record %d", n, v.AuditSeq)
	}
	if n := failHits.Load(); n != 6 {
		t.Errorf("the failing sink got %d requests, want 3 for each of 2 notifications", n)
	}
	if n := hangEntered.Load(); n != 1 {
		t.Errorf("the hanging sink got %d requests, want 1: its queue waits behind the one it holds", n)
	}

	// The audit stream has every delivery and failure, and no
	// verification failure: gated's records verify.
	counts := map[string]int{}
	err = audit.Read(t.Context(), js, audit.Query{}, func(e audit.Entry) error {
		if e.Record == nil {
			t.Errorf("seq %d is not a record: %v", e.Seq, e.Err)
			return nil
		}
		for _, rec := range e.Record.Events() {
			if ev := rec.Event; strings.HasPrefix(ev, "notify.") || ev == gated.EventAuditVerificationFailed {
				var res notify.Result
				_ = json.Unmarshal(rec.Data, &res)
				counts[ev+" "+res.Sink]++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"notify.delivered good": 4, "notify.failed failing": 2}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("%d %q records, want %d (all: %v)", counts[k], k, n, counts)
		}
	}
	if len(counts) != len(want) {
		t.Errorf("audit records of the notifier: %v, want %v", counts, want)
	}
}

// pluginPID is the pid /readyz gives the named plugin.
func pluginPID(t *testing.T, httpAddr, name string) int {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body server.Readiness
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	for _, p := range body.Plugins {
		if p.Name == name && p.PID > 0 {
			return p.PID
		}
	}
	t.Fatalf("/readyz names no running plugin %s: %+v", name, body.Plugins)
	return 0
}

// waitUntil polls cond for up to 30 s (a bound, not a speed check).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeRefusesABadNotifyFile: serve does not start with a notify
// file it cannot use, and says where the problem is.
func TestServeRefusesABadNotifyFile(t *testing.T) {
	clearGatedEnv(t)
	cases := []struct {
		note, file, want string
	}{
		{note: "unknown kind", file: "sinks:\n  - name: a\n    url: https://a.example.com/\n    events: [approved]\n    secret_env: X\n",
			want: "notify.yaml:4: sinks[0]: events: line 4: \"approved\": want one of"},
		{note: "missing secret", file: "sinks:\n  - name: a\n    url: https://a.example.com/\n    events: [timeout]\n    secret_env: GATED_TEST_UNSET_SECRET\n",
			want: "GATED_TEST_UNSET_SECRET is empty or not set"},
		{note: "missing file", file: "", want: "--notify: invalid notify file"},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "notify.yaml")
			if tc.file != "" {
				path = writeFile(t, dir, "notify.yaml", tc.file)
			}
			err := run(t.Context(), []string{"serve", "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:0", "--notify", path})
			wantUsageError(t, err, tc.want)
		})
	}
}
