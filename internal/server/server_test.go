package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"go.uber.org/zap"
)

// TestServeJoinsItsGoroutinesWhenStartFails starts every part of serve
// (persona and policy watchers, plugins, NATS, worker, review service,
// HTTP listener) and then fails the start with one more step: serve
// returns that error, and nothing it started outlives it.
func TestServeJoinsItsGoroutinesWhenStartFails(t *testing.T) {
	policyDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(policyDir, "extra.rego"), []byte("package gated\n\nextra_rule := true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	cfg.DataDir, cfg.NATSListen, cfg.HTTPAddr = t.TempDir(), "127.0.0.1:0", natstest.FreeAddr(t)
	cfg.Policy.Dir, cfg.PersonasDir, cfg.PolicyPoll = policyDir, "../../examples/personas", 50*time.Millisecond
	before := runtime.NumGoroutine()

	s, err := New(cfg, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Build(t.Context()); err != nil {
		t.Fatal(err)
	}
	var started []string
	late := errors.New("a step after the last one failed")
	steps := append(s.startSteps(), func(context.Context) error {
		// A goroutine just started may not have run into its function
		// yet: look again for a while before calling a part not started.
		for range 200 {
			started = started[:0]
			stacks := allStacks()
			for _, frame := range []string{"policies.(*Live).Watch", "personas.(*Registry).Watch", "intake.(*Worker)"} {
				if strings.Contains(stacks, frame) {
					started = append(started, frame)
				}
			}
			if len(started) == 3 {
				break
			}
			time.Sleep(25 * time.Millisecond)
		}
		return late
	})
	if err := s.runSteps(t.Context(), steps); !errors.Is(err, late) {
		t.Fatalf("run: got %v, want the failing step's error", err)
	}
	if len(started) != 3 {
		t.Fatalf("before the failing step only %v were running: the test did not start every part", started)
	}
	stacks := allStacks()
	for _, frame := range []string{"policies.(*Live).Watch", "personas.(*Registry).Watch", "intake.(*Worker)", "internal/server.(*Server)"} {
		if strings.Contains(stacks, frame) {
			t.Errorf("a goroutine in %s outlives a serve that failed to start:\n%s", frame, stacks)
		}
	}
	var now int
	for range 100 {
		if now = runtime.NumGoroutine(); now <= before {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("%d goroutines before serve, %d after it failed:\n%s", before, now, allStacks())
}

// allStacks is the stack of every goroutine.
func allStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
