package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus"
)

// TestServeJoinsItsGoroutines runs serve in this process with every
// watcher on (policy and persona directories), stops it, and checks that
// no goroutine serve started outlives it: none of its watchers is left the
// moment serve returns, and the process's goroutine count comes back to
// what it was before serve started.
func TestServeJoinsItsGoroutines(t *testing.T) {
	clearGatedEnv(t)
	httpAddr := freeTCPAddr(t)
	policyDir := t.TempDir()
	for _, name := range []string{"data.yaml", "skills.rego", "skills_test.rego", "weekend_freeze.rego", "weekend_freeze_test.rego"} {
		data, err := os.ReadFile(filepath.Join("../../examples/policies", name))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, policyDir, name, string(data))
	}
	// With a notifier: serve joins its consumer and its sink workers too.
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer hang.Close()
	defer close(release)
	notifyDir := t.TempDir()
	writeFile(t, notifyDir, "hook.secret", "goroutine-test-secret-0123456789")
	notifyFile := writeFile(t, notifyDir, "notify.yaml", "sinks:\n  - name: hang\n    url: "+hang.URL+
		"\n    events: [decided, plugin_down]\n    secret_file: hook.secret\n    timeout: 1m\n")
	before := runtime.NumGoroutine()

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:0",
			"--http", httpAddr, "--policies", policyDir, "--personas", "../../examples/personas",
			"--policy-poll", "50ms", "--log-level", "error", "--log-format", "json", "--notify", notifyFile})
	}()
	waitReady(t, "http://"+httpAddr+"/readyz", done)

	// A policy change just before the stop keeps the policy watcher busy
	// reloading (compiling and testing the bundle) while serve shuts down.
	writeFile(t, policyDir, "extra.rego", "package gated\n\nextra_rule := true\n")
	time.Sleep(1500 * time.Millisecond)
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not stop within 60s")
	}
	// Serve has returned: whatever it started and joined is gone now, not
	// soon.
	stacks := allStacks()
	for _, frame := range []string{"policies.(*Live).Watch", "personas.(*Registry).Watch", "intake.(*Worker)", "cmd/gated.(*gateServer)", "notify.(*Notifier)"} {
		if strings.Contains(stacks, frame) {
			t.Errorf("a goroutine in %s outlives serve:\n%s", frame, stacks)
		}
	}
	// Libraries (the NATS client, the HTTP client of this test) may take a
	// moment to wind down their own goroutines: measure, bounded.
	var now int
	for range 100 {
		if now = runtime.NumGoroutine(); now <= before {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("%d goroutines before serve, %d after it returned:\n%s", before, now, allStacks())
}

func allStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

func freeTCPAddr(t testing.TB) string {
	t.Helper()
	return natstest.FreeAddr(t)
}

// startServe runs serve on the NATS server at natsURL with --http on a
// free local address, the JSON error log and args, and waits until it is
// ready. It returns the --http address and a stop function that cancels
// serve and waits for it to return, failing the test on an error or
// after a minute.
func startServe(t testing.TB, natsURL string, args ...string) (string, func()) {
	t.Helper()
	httpAddr := freeTCPAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	argv := append([]string{"serve", "--nats-url", natsURL, "--data-dir", t.TempDir(), "--http", httpAddr, "--log-level", "error", "--log-format", "json"}, args...)
	go func() { done <- run(ctx, argv) }()
	waitReady(t, "http://"+httpAddr+"/readyz", done)
	return httpAddr, func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("serve did not stop within a minute")
		}
	}
}

// waitReady polls url until it answers 200, failing when serve returns
// first or after a minute.
func waitReady(t testing.TB, url string, done chan error) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-done:
			t.Fatalf("serve returned before it was ready: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("serve not ready after a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeDuplicateWindow checks that --duplicate-window sets how long
// the proposal stream remembers a Nats-Msg-Id: the embedded server keeps
// every id of the window in memory, so at a high rate it is the knob that
// bounds that memory. Within it a republished proposal is still dropped.
func TestServeDuplicateWindow(t *testing.T) {
	for _, tc := range []struct {
		note string
		args []string
		want time.Duration
	}{
		{note: "default", want: 2 * time.Minute},
		{note: "flag", args: []string{"--duplicate-window", "30s"}, want: 30 * time.Second},
	} {
		t.Run(tc.note, func(t *testing.T) {
			srv := natstest.Server(t)
			_, stop := startServe(t, srv.ClientURL(), tc.args...)
			defer stop()
			_, js := natstest.Connect(t, srv)
			s, err := js.Stream(t.Context(), bus.ProposalsStream)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.CachedInfo().Config.Duplicates; got != tc.want {
				t.Fatalf("%s remembers message ids for %s, want %s", bus.ProposalsStream, got, tc.want)
			}
			msg := &nats.Msg{Subject: "gated.proposals.acme.host_list_services", Header: nats.Header{"Nats-Msg-Id": []string{"acme.dup-1"}},
				Data: []byte(`{"v":1,"id":"dup-1","tenant":"acme","action":"host_list_services","class":"read"}`)}
			var acks []*jetstream.PubAck
			for range 2 {
				ack, err := js.PublishMsg(t.Context(), msg)
				if err != nil {
					t.Fatal(err)
				}
				acks = append(acks, ack)
			}
			if acks[0].Duplicate || !acks[1].Duplicate {
				t.Fatalf("publishing twice at once: duplicate %v then %v, want false then true", acks[0].Duplicate, acks[1].Duplicate)
			}
		})
	}
}
