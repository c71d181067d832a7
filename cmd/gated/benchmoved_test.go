package main

import (
	"testing"

	"github.com/gated/gated/internal/bench"
	"github.com/gated/gated/internal/server"
)

// gated bench, with or without its old flags, names the command the load
// generator went to and exits 2.
func TestBenchSaysWhereItWent(t *testing.T) {
	for _, args := range [][]string{{"bench"}, {"bench", "-n", "20000", "--mix", "denied=1,read=1", "-c", "256"}} {
		clearGatedEnv(t)
		wantUsageError(t, run(t.Context(), args), "run gated-bench with the same flags")
	}
}

// The embedded gated the bench starts gets at least serve's default llm
// concurrency; the bench keeps its own copy of the number, since gated's
// binary must not import the bench nor the bench gated's main.
func TestBenchKnowsServeLLMConcurrency(t *testing.T) {
	if bench.ServeLLMMaxConcurrency != server.DefaultLLMMaxConcurrency {
		t.Errorf("bench.ServeLLMMaxConcurrency = %d, serve's default --llm-max-concurrency = %d", bench.ServeLLMMaxConcurrency, server.DefaultLLMMaxConcurrency)
	}
}
