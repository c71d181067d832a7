package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/operator"
)

// get answers a GET of url without credentials: no cookie, no session.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := (&http.Client{Timeout: 20 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body)
}

// serveForMetrics runs serve on an external test server with args, waits
// until it is ready on --http, and has it admit one read of tenant acme
// (counted by the budget metrics). It returns the --http address; serve
// stops when the test ends.
func serveForMetrics(t *testing.T, args ...string) string {
	t.Helper()
	s := natstest.Server(t)
	httpAddr := freeTCPAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	argv := append([]string{"serve", "--nats-url", s.ClientURL(), "--data-dir", t.TempDir(), "--http", httpAddr,
		"--log-level", "error", "--log-format", "json"}, args...)
	go func() { done <- run(ctx, argv) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("serve did not stop within a minute")
		}
	})
	waitReady(t, "http://"+httpAddr+"/readyz", done)
	if v := propose(t, fleetClient(t, s.ClientURL()), readProposal("m1", "nginx")); v.Outcome != gated.OutcomeApproved {
		t.Fatalf("the read of tenant acme: %s (%s), want approved", v.Outcome, v.Reason)
	}
	return httpAddr
}

// TestConsoleListenerServesNoMetrics: with the web console on --http
// (--operators), /metrics is not served on that listener: a request
// without a session gets a 404 and no figure, let alone a tenant's name.
// A Prometheus scraper cannot sign in, so /metrics goes on a listener of
// its own (--metrics-listen) instead.
func TestConsoleListenerServesNoMetrics(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	pub, err := operator.WriteSeed(filepath.Join(dir, "alice.seed"))
	if err != nil {
		t.Fatal(err)
	}
	ops := writeFile(t, dir, "operators.yaml", "operators:\n  - id: alice\n    key: "+pub+"\n    tenants: [acme]\n")
	addr := serveForMetrics(t, "--operators", ops)
	code, body := get(t, "http://"+addr+"/metrics")
	if strings.Contains(body, "acme") {
		t.Errorf("/metrics on the console listener names tenant acme to a request without a session:\n%s", grepLines(body, "acme"))
	}
	if code != http.StatusNotFound || strings.Contains(body, "gated_") {
		t.Errorf("/metrics on the console listener without a session: %d, want 404 and no metric", code)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestMetricsListeners: where /metrics is served and whether it names
// tenants. Without --metrics-listen it is on --http when no console is
// there; with it, it is there alone and no longer on --http. Either way a
// request without credentials reads no tenant's name unless the operator
// asked for tenant labels with --metrics-tenant-labels.
func TestMetricsListeners(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	pub, err := operator.WriteSeed(filepath.Join(dir, "alice.seed"))
	if err != nil {
		t.Fatal(err)
	}
	ops := writeFile(t, dir, "operators.yaml", "operators:\n  - id: alice\n    key: "+pub+"\n    tenants: [acme]\n")
	const folded = `gated_budget_admitted_total{use="read"} 1`
	const named = `gated_budget_admitted_total{tenant="acme",use="read"} 1`
	for _, tc := range []struct {
		note    string
		console bool
		own     bool // --metrics-listen
		// settings has --metrics-listen come from GATED_METRICS_LISTEN and
		// the tenant labels from a --config file, as any flag may.
		settings bool
		args     []string
		want     string
	}{
		{note: "on --http without the console", want: folded},
		{note: "on --http, tenant labels asked for", args: []string{"--metrics-tenant-labels"}, want: named},
		{note: "on --metrics-listen, not on --http", own: true, want: folded},
		{note: "on --metrics-listen beside the console", console: true, own: true, want: folded},
		{note: "on --metrics-listen beside the console, tenant labels asked for", console: true, own: true, args: []string{"--metrics-tenant-labels"}, want: named},
		{note: "from the environment and the config file", console: true, own: true, settings: true, want: named},
	} {
		t.Run(tc.note, func(t *testing.T) {
			args := tc.args
			if tc.console {
				args = append(args, "--operators", ops)
			}
			metricsAddr := ""
			if tc.own {
				metricsAddr = freeTCPAddr(t)
				args = append(args, "--metrics-listen", metricsAddr)
			}
			if tc.settings {
				args = args[:len(args)-2]
				t.Setenv("GATED_METRICS_LISTEN", metricsAddr)
				args = append(args, "--config", writeFile(t, t.TempDir(), "gated.yaml", "metrics_tenant_labels: true\n"))
			}
			httpAddr := serveForMetrics(t, args...)
			at := httpAddr
			if tc.own {
				at = metricsAddr
				if code, body := get(t, "http://"+httpAddr+"/metrics"); code != http.StatusNotFound || strings.Contains(body, "gated_") {
					t.Errorf("/metrics on --http beside --metrics-listen: %d, want 404", code)
				}
				// The metrics listener serves /metrics and nothing else.
				for _, path := range []string{"/readyz", "/healthz", "/"} {
					if code, _ := get(t, "http://"+metricsAddr+path); code != http.StatusNotFound {
						t.Errorf("%s on --metrics-listen: %d, want 404", path, code)
					}
				}
			}
			code, body := get(t, "http://"+at+"/metrics")
			if code != http.StatusOK || !strings.Contains(body, tc.want) {
				t.Fatalf("/metrics: %d, want 200 with %q; the budget lines:\n%s", code, tc.want, grepLines(body, "gated_budget_admitted_total"))
			}
			if tc.want == folded && strings.Contains(body, "acme") {
				t.Errorf("/metrics names tenant acme without --metrics-tenant-labels:\n%s", grepLines(body, "acme"))
			}
		})
	}
}

// TestMetricsFlagsRefused: flags about /metrics that cannot do what they
// say stop serve before it starts.
func TestMetricsFlagsRefused(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	pub, err := operator.WriteSeed(filepath.Join(dir, "alice.seed"))
	if err != nil {
		t.Fatal(err)
	}
	ops := writeFile(t, dir, "operators.yaml", "operators:\n  - id: alice\n    key: "+pub+"\n    tenants: [acme]\n")
	addr := freeTCPAddr(t)
	for _, tc := range []struct {
		note string
		args []string
		want string
	}{
		{"tenant labels with no /metrics", []string{"--metrics-tenant-labels"}, "--metrics-tenant-labels names tenants on /metrics, which is not served"},
		{"tenant labels with the console alone", []string{"--metrics-tenant-labels", "--http", addr, "--operators", ops}, "give --metrics-listen"},
		{"one address for both", []string{"--http", addr, "--metrics-listen", addr}, "is the --http address"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			code, out, err := runGated(t, append([]string{"serve", "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:0"}, tc.args...)...)
			if code != exitUsage || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("serve %q: exit %d, %v, want exit %d saying %q\n%s", tc.args, code, err, exitUsage, tc.want, out)
			}
		})
	}
}
