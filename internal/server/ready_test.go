package server

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/internal/natstest"
)

// "gated is ready" says where every listener listens: NATS, --http, the
// web console, and /metrics on --http or on --metrics-listen, each at the
// address it is bound to (a port 0 in the flag is the port the kernel
// picked), and each URL answers.
func TestReadyLogNamesEveryListener(t *testing.T) {
	dir := t.TempDir()
	pub, err := operator.WriteSeed(filepath.Join(dir, "alice.seed"))
	if err != nil {
		t.Fatal(err)
	}
	ops := filepath.Join(dir, "operators.yaml")
	if err := os.WriteFile(ops, []byte("operators:\n  - id: alice\n    key: "+pub+"\n    tenants: [acme]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		note      string
		operators string
		metrics   string   // "free": /metrics on a listener of its own
		want      []string // the members that must name a URL, beside nats
		page      map[string]string
	}{
		{note: "http alone", want: []string{"http", "metrics"}, page: map[string]string{"metrics": "# HELP"}},
		{note: "the console, metrics apart", operators: ops, metrics: "free", want: []string{"http", "console", "metrics"},
			page: map[string]string{"console": `src="/assets/app.js"`, "metrics": "# HELP"}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			cfg := Defaults()
			cfg.DataDir, cfg.NATSListen, cfg.HTTPAddr = t.TempDir(), "127.0.0.1:0", "127.0.0.1:0"
			cfg.Operators = tc.operators
			if tc.metrics != "" {
				cfg.MetricsListen = natstest.FreeAddr(t)
			}
			core, logs := observer.New(zapcore.InfoLevel)
			s, err := New(cfg, WithLogger(zap.New(core)))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Build(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := s.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Stop(); err != nil {
					t.Error(err)
				}
			}()
			ready := logs.FilterMessage("gated is ready").All()
			if len(ready) != 1 {
				t.Fatalf("%d logs say gated is ready, want 1", len(ready))
			}
			fields := ready[0].ContextMap()
			if fields["nats"] != s.URL() || !strings.HasPrefix(s.URL(), "nats://127.0.0.1:") || strings.HasSuffix(s.URL(), ":0") {
				t.Errorf("nats %v, want the server's URL %s", fields["nats"], s.URL())
			}
			for _, k := range []string{"http", "console", "metrics"} {
				url, ok := fields[k].(string)
				if ok != slices.Contains(tc.want, k) {
					t.Errorf("%s: %v in the log, want it there: %v", k, fields[k], slices.Contains(tc.want, k))
					continue
				}
				if !ok {
					continue
				}
				if !strings.HasPrefix(url, "http://127.0.0.1:") || strings.Contains(url, ":0/") {
					t.Errorf("%s: %q, want the URL of the bound address", k, url)
				}
				if k == "http" {
					url += "/readyz"
				}
				res, err := http.Get(url)
				if err != nil {
					t.Fatalf("%s: %v", k, err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK || !strings.Contains(string(body), tc.page[k]) {
					t.Errorf("GET %s: %d, want 200 with %q:\n%.300s", url, res.StatusCode, tc.page[k], body)
				}
			}
		})
	}
}
