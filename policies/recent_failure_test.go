package policies

import (
	"slices"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// TestRecentFailureOnBothEvaluators: the history the engine hands the
// policy, executions included, decides recent_failure alike on the
// planned evaluator and topdown, and as the rule says.
func TestRecentFailureOnBothEvaluators(t *testing.T) {
	e := mustPlanned(t, mustDefault(t))
	p := writeProposal()
	ran := func(id, status string, decided, reported time.Duration) gated.Verdict {
		v := gated.Verdict{
			ProposalID: id, Tenant: p.Tenant, Action: p.Action, Outcome: gated.OutcomeApproved, Approved: true,
			Stage: gated.StageReview, Agent: "other-agent", DecidedAt: planNow.Add(-decided),
		}
		if status != "" {
			v.Execution = &gated.Execution{Status: status, At: planNow.Add(-reported), Error: "unit failed"}
		}
		return v
	}
	for _, tc := range []struct {
		note    string
		history []gated.Verdict
		denied  bool
	}{
		{note: "failed 35m ago", history: []gated.Verdict{ran("a", gated.ExecutionFailed, 40*time.Minute, 35*time.Minute)}, denied: true},
		{note: "failed 61m ago", history: []gated.Verdict{ran("a", gated.ExecutionFailed, 70*time.Minute, 61*time.Minute)}},
		{note: "succeeded", history: []gated.Verdict{ran("a", gated.ExecutionSucceeded, 40*time.Minute, 35*time.Minute)}},
		{note: "failed then succeeded", history: []gated.Verdict{
			ran("a", gated.ExecutionFailed, 50*time.Minute, 45*time.Minute), ran("b", gated.ExecutionSucceeded, 40*time.Minute, 30*time.Minute)}},
		{note: "failed then only started", denied: true, history: []gated.Verdict{
			ran("a", gated.ExecutionFailed, 50*time.Minute, 45*time.Minute), ran("b", gated.ExecutionStarted, 40*time.Minute, 39*time.Minute)}},
		{note: "never reported", history: []gated.Verdict{ran("a", "", 40*time.Minute, 0)}},
	} {
		t.Run(tc.note, func(t *testing.T) {
			in := engine.PolicyInput{Proposal: p, Persona: reviewerPersona, History: tc.history, Now: planNow}
			agree(t, e, in, tc.note)
			d, err := e.Evaluate(t.Context(), in)
			if err != nil {
				t.Fatal(err)
			}
			denied := slices.ContainsFunc(d.Denies, func(d gated.Deny) bool { return d.Rule == "recent_failure" })
			if denied != tc.denied {
				t.Fatalf("recent_failure denied %v, want %v (denies %+v)", denied, tc.denied, d.Denies)
			}
		})
	}
}
