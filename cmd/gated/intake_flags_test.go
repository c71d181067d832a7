package main

import (
	"testing"
)

// The consumer settings of serve come from a flag, GATED_<FLAG> or the
// config file like every other, and bad values are refused before
// anything starts.
func TestServeRefusesBadIntakeSettings(t *testing.T) {
	cfg := writeFile(t, t.TempDir(), "gated.yaml", "max_ack_pending: -3\n")
	tests := []struct {
		note string
		env  map[string]string
		args []string
		want string
	}{
		{note: "ack wait below a second", args: []string{"--ack-wait", "500ms"}, want: "--ack-wait 500ms must be at least 1s"},
		{note: "max deliver from the environment", env: map[string]string{"GATED_MAX_DELIVER": "0"}, want: "--max-deliver 0 must be at least 1"},
		{note: "max ack pending from the config file", args: []string{"--config", cfg}, want: "--max-ack-pending -3 must not be negative"},
		{note: "profiles without a listener", args: []string{"--pprof"}, want: "--pprof serves the profiles on the --http listener"},
		{note: "llm reviews at once", args: []string{"--llm-max-concurrency", "0"}, want: "--llm-max-concurrency 0 must be from 1 to 65536"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			clearGatedEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			err := run(t.Context(), append([]string{"serve"}, tc.args...))
			wantUsageError(t, err, tc.want)
		})
	}
}
