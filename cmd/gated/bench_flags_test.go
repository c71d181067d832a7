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
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			clearGatedEnv(t)
			err := run(t.Context(), append([]string{"bench"}, tc.args...))
			wantUsageError(t, err, tc.want)
		})
	}
}
