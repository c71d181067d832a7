package main

import (
	"strings"
	"testing"
)

// gated bench refuses unusable settings before it starts anything.
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
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			clearGatedEnv(t)
			err := run(t.Context(), append([]string{"bench"}, tc.args...))
			wantUsageError(t, err, tc.want)
		})
	}
}
