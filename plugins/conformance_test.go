package plugins

import (
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
)

func TestConformance(t *testing.T) {
	all := []string{"handshake", "describe", "approve", "reject", "run review", "refused tool", "deadline", "malformed request", "shutdown"}
	tests := []struct {
		mode   string
		failed []string // checks that must fail; every other one must pass
		// details holds a fragment that the detail of a check must hold.
		details map[string]string
	}{
		{mode: "sop"},
		// An approving reviewer that writes garbage is not conformant.
		{mode: "garbage", failed: []string{"describe", "approve", "reject", "run review", "refused tool"}},
		{mode: "crash", failed: []string{"describe", "approve", "reject", "run review", "refused tool", "deadline", "malformed request"}},
		{mode: "noise-start", failed: []string{"handshake"}},
		// A plugin that fails every review with an error is safe but
		// useless; only where an error is an acceptable answer does it
		// pass (a run review it refuses, a malformed request).
		{mode: "panic", failed: []string{"describe", "approve", "reject", "refused tool", "deadline"}},
		// A reviewer that approves everything, with every gate asked for.
		{mode: "yes", failed: []string{"reject", "run review"}},
		// A reviewer of actions only rejects a run without saying what is
		// missing: safe, so the check passes, and says so.
		{mode: "action-only", details: map[string]string{"run review": "route runs to another plugin"}},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			spec := helperSpec(t, tc.mode)
			spec.StartTimeout = 2e9
			checks := Conformance(t.Context(), zaptest.NewLogger(t), spec, ConformanceOptions{})
			got := map[string]bool{}
			for _, c := range checks {
				got[c.Name] = c.Passed
				if want, ok := tc.details[c.Name]; ok && !strings.Contains(c.Detail, want) {
					t.Errorf("check %q detail %q does not say %q", c.Name, c.Detail, want)
				}
				t.Logf("%-18s %v  %s", c.Name, c.Passed, c.Detail)
			}
			for _, name := range all {
				pass, ran := got[name]
				wantFail := false
				for _, f := range tc.failed {
					wantFail = wantFail || f == name
				}
				switch {
				case !ran && tc.mode == "noise-start" && name != "handshake":
					// Nothing runs after a failed handshake.
				case !ran:
					t.Errorf("check %q did not run", name)
				case pass == wantFail:
					t.Errorf("check %q passed = %v, want %v", name, pass, !wantFail)
				}
			}
			if strings.Contains(tc.mode, "start") && len(checks) != 1 {
				t.Errorf("%d checks after a failed handshake, want 1", len(checks))
			}
		})
	}
}
