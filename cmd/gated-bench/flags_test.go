package main

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// gated-bench refuses unusable settings before it starts anything, and
// exits 2.
func TestBenchRefusesBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-n", "0"}, "-n 0 must be at least 1"},
		{[]string{"--ramp", "-1s"}, "--ramp -1s must be from 0 to 1h"},
		{[]string{"--ramp", "2h"}, "--ramp 2h0m0s must be from 0 to 1h"},
		{[]string{"--probe-rate", "-5"}, "--probe-rate -5 must be from 0 to 100000"},
		{[]string{"--progress", "sometimes"}, `--progress "sometimes": want auto, on or off`},
		{[]string{"--mix", "denied=1,teleport=2"}, "--mix"},
		{[]string{"--pid", "42"}, "--pid and --llm-listen apply to a deployment given by --nats-url"},
		{[]string{"--serve-env", "GOMEMLIMIT"}, `--serve-env: "GOMEMLIMIT" is not KEY=VALUE`},
		{[]string{"--serve-env", "=1"}, `--serve-env: "=1" has no variable name before '='`},
		{[]string{"--serve-env", "GO GC=1"}, `--serve-env: "GO GC": variable names are letters, digits and '_'`},
		{[]string{"--serve-env", "9X=1"}, `--serve-env: "9X": variable names`},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--serve-env", "GOGC=200"}, "--serve-env applies to the embedded gated; it cannot change a deployment given by --nats-url"},
		{[]string{"--prefill", "-1"}, "--prefill -1 must be from 0 to 10000000"},
		{[]string{"--prefill", "10000001"}, "--prefill 10000001 must be from 0 to 10000000"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--prefill", "10"}, "--prefill and --prefill-curve write into the store of the embedded gated"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--prefill-curve", "0,10"}, "--prefill and --prefill-curve write into the store of the embedded gated"},
		{[]string{"--prefill", "10", "--prefill-curve", "0,10"}, "give --prefill or --prefill-curve, not both"},
		{[]string{"--prefill-curve", "0,10", "--json", "out.txt"}, `--json "out.txt": with --prefill-curve it must end in .json`},
		{[]string{"--prefill-curve", "0,x"}, `--prefill-curve: prefill size "x" is not a whole number`},
		{[]string{"--prefill-curve", "5,5"}, "--prefill-curve: prefill size 5 is given twice"},
		{[]string{"--nats-token", "t"}, "--nats-token apply to an external server: give --nats-url too"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--nats-user", "u"}, "needs a password: set GATED_NATS_PASSWORD"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--fair"}, "--fair configures the embedded gated's budgets"},
		{[]string{"--gated", "/bin/true", "--fair", "--fair-limit", "0"}, "--fair-flood 256 and --fair-limit 0 must be at least 1"},
		{[]string{"--no-such-flag"}, "unknown flag: --no-such-flag"},
		{[]string{"extra"}, `unknown command "extra"`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			clearGatedEnv(t)
			wantUsageError(t, run(t.Context(), tc.args), tc.want)
		})
	}
}

// With no gated next to it nor on PATH, and no --gated, an embedded run
// says how to name the binary instead of failing to start it.
func TestBenchAsksForGated(t *testing.T) {
	clearGatedEnv(t)
	t.Setenv("PATH", "")
	wantUsageError(t, run(t.Context(), []string{"-n", "10"}), "no gated binary to start: give --gated")
	wantUsageError(t, run(t.Context(), []string{"--fair", "-n", "10"}), "no gated binary to start: give --gated")
}

// A flag the command line leaves unset comes from GATED_<FLAG>, as with
// gated; a value that does not parse is a usage error naming the variable.
func TestBenchFlagsFromEnvironment(t *testing.T) {
	clearGatedEnv(t)
	t.Setenv("GATED_PROPOSALS", "0")
	wantUsageError(t, run(t.Context(), nil), "-n 0 must be at least 1")
	t.Setenv("GATED_PROPOSALS", "many")
	wantUsageError(t, run(t.Context(), nil), `GATED_PROPOSALS="many"`)
	// The command line wins over the environment.
	wantUsageError(t, run(t.Context(), []string{"-n", "5", "--ramp", "-1s"}), "--ramp -1s")
}

// clearGatedEnv unsets every GATED_ variable for the test, so the
// developer's environment cannot set a flag.
func clearGatedEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "GATED_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

// wantUsageError fails the test unless err is a usage error (exit status
// 2) whose message says want.
func wantUsageError(t *testing.T, err error, want string) {
	t.Helper()
	var ue *usageErr
	if !errors.As(err, &ue) {
		t.Fatalf("err = %v, want a usage error", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %q, want it to say %q", err, want)
	}
}
