package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestPolicyEvalExplain: --explain prints topdown's full trace and the
// rules the planned evaluator evaluated, on either evaluator, and the
// routing rule that decided.
func TestPolicyEvalExplain(t *testing.T) {
	const proposal = "../../examples/proposals/rejected-skip-review.json"
	tests := []struct {
		name     string
		args     []string
		patterns []string
	}{
		{name: "planned", args: nil, patterns: []string{
			`(?m)^routing rule: +route_class$`,
			`(?m)^rules the planned evaluator evaluated \(it decides this bundle\), in order:\n  .*data\.gated\.deny`,
			`(?m)^topdown trace:$`,
			`(?m)^.*hard_rules\.rego:\d+ +[| ]*Enter data\.gated\.deny`,
		}},
		{name: "topdown", args: []string{"--policy-evaluator", "topdown"}, patterns: []string{
			`(?m)^routing rule: +route_class$`,
			`(?m)^planned evaluator: not used, topdown decides this bundle$`,
			`(?m)^.*hard_rules\.rego:\d+ +[| ]*Enter data\.gated\.deny`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, err := runGated(t, append([]string{"policy", "eval", "--explain", "-f", proposal}, tc.args...)...)
			if code != exitNotApproved {
				t.Fatalf("exit %d, want %d: %v\n%s", code, exitNotApproved, err, out)
			}
			wantOutput(t, out, tc.patterns...)
		})
	}
	t.Run("json", func(t *testing.T) {
		code, out, err := runGated(t, "policy", "eval", "--explain", "--format", "json", "-f", proposal)
		if code != exitNotApproved {
			t.Fatalf("exit %d: %v\n%s", code, err, out)
		}
		var doc struct {
			Decision struct {
				Review struct {
					Rule string `json:"rule"`
				} `json:"review"`
			} `json:"decision"`
			Explain *struct {
				Evaluator string   `json:"evaluator"`
				Planned   []string `json:"planned"`
				Trace     []string `json:"trace"`
			} `json:"explain"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if doc.Decision.Review.Rule != "route_class" || doc.Explain == nil || doc.Explain.Evaluator != "planned" ||
			len(doc.Explain.Planned) == 0 || !strings.Contains(strings.Join(doc.Explain.Trace, "\n"), "Enter data.gated.decision") {
			t.Fatalf("json document lacks the explanation:\n%.3000s", out)
		}
	})
}
