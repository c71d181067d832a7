package policies

import (
	"slices"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// TestPolicyReadsArguments: a rule of the policy author's reads a call's
// arguments (input.proposal.arguments), alike on the planned evaluator and
// topdown, so a member the target does not name can still be refused.
func TestPolicyReadsArguments(t *testing.T) {
	b := mustDefault(t)
	b.Modules["arguments.rego"] = `package gated

deny contains {"rule": "no_force_kill", "message": "a restart may not kill with SIGKILL"} if {
	input.proposal.arguments.opts.signal == "KILL"
}
`
	e := mustPlanned(t, b)
	for _, tc := range []struct {
		note      string
		arguments map[string]any
		denied    bool
	}{
		{note: "no arguments"},
		{note: "a gentle restart", arguments: map[string]any{"service": "nginx", "opts": map[string]any{"signal": "TERM"}}},
		{note: "a member the target does not name", arguments: map[string]any{"service": "nginx", "opts": map[string]any{"signal": "KILL"}}, denied: true},
	} {
		t.Run(tc.note, func(t *testing.T) {
			p := writeProposal()
			p.Arguments = tc.arguments
			in := engine.PolicyInput{Proposal: p, Persona: reviewerPersona, Now: planNow}
			agree(t, e, in, tc.note)
			d, err := e.Evaluate(t.Context(), in)
			if err != nil {
				t.Fatal(err)
			}
			denied := slices.ContainsFunc(d.Denies, func(d gated.Deny) bool { return d.Rule == "no_force_kill" })
			if denied != tc.denied {
				t.Fatalf("no_force_kill denied %v, want %v (denies %+v)", denied, tc.denied, d.Denies)
			}
		})
	}
}
