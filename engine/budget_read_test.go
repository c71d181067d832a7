package engine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/policies"
)

// countingBudgets admits everything and counts the reads of the counters,
// which it gives as seven proposals of the agent in the window.
type countingBudgets struct{ states atomic.Int64 }

func (b *countingBudgets) State(context.Context, string, string, time.Time) (gated.BudgetState, error) {
	b.states.Add(1)
	return gated.BudgetState{Agent: gated.BudgetCounters{Proposals: 7}}, nil
}

func (b *countingBudgets) Admit(context.Context, engine.BudgetRequest) (*gated.BudgetRefusal, error) {
	return nil, nil
}
func (b *countingBudgets) Release(context.Context, engine.BudgetRelease) error { return nil }
func (b *countingBudgets) Refused(context.Context, string, string, engine.RefusalKind, time.Time) error {
	return nil
}

// busyAgent denies a proposal of an agent with more than five proposals
// in the window.
const busyAgent = `package gated

deny contains {"rule": "busy_agent", "message": "too many proposals"} if input.budget.agent.proposals > 5
`

// TestBudgetReadOnlyWhenAPolicyCanReadIt: the counters are not read for a
// policy that cannot read input.budget, and a policy or a shadow that can
// sees them even when the engine was told otherwise (a bundle swapped in
// after the engine asked).
func TestBudgetReadOnlyWhenAPolicyCanReadIt(t *testing.T) {
	read := map[string]any{"class": "read", "blast_radius": nil, "action": "host_list_services"}
	no := func() bool { return false }
	plain, busy := compileWith(t, nil), compileWith(t, map[string]string{"busy.rego": busyAgent})
	for _, tc := range []struct {
		note         string
		live, shadow *policies.Evaluator
		reads        func() bool
		want         gated.Outcome
		states       int64
		wantShadow   string
	}{
		{note: "a policy that cannot read it", live: plain, reads: plain.ReadsBudget, want: gated.OutcomeApproved},
		{note: "a policy that can", live: busy, reads: busy.ReadsBudget, want: gated.OutcomeRejected, states: 1},
		{note: "a policy that can, the engine told it cannot", live: busy, reads: no, want: gated.OutcomeRejected, states: 1},
		{note: "a shadow that can, the engine told it cannot", live: plain, shadow: busy, reads: no,
			want: gated.OutcomeApproved, states: 1, wantShadow: "rejected"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			budgets := &countingBudgets{}
			var mu sync.Mutex
			var heard []gated.ShadowComparison
			h := newHarness(t, func(h *harness) {
				h.cfg.Policy, h.cfg.Budgets, h.cfg.PolicyReadsBudget = tc.live, budgets, tc.reads
				if tc.shadow != nil {
					h.cfg.Shadow = tc.shadow
					h.cfg.OnShadow = func(_ *gated.Proposal, c gated.ShadowComparison) {
						mu.Lock()
						heard = append(heard, c)
						mu.Unlock()
					}
				}
			})
			v, _ := h.mustDecide(t, "gated.proposals.acme.host_list_services", proposalJSON(t, read), "")
			if v.Outcome != tc.want {
				t.Fatalf("verdict %s at %s (%s), want %s", v.Outcome, v.Stage, v.Reason, tc.want)
			}
			if got := budgets.states.Load(); got != tc.states {
				t.Errorf("the counters were read %d times, want %d", got, tc.states)
			}
			if tc.shadow != nil && (len(heard) != 1 || heard[0].Shadow.Outcome != tc.wantShadow) {
				t.Errorf("shadow comparisons %+v, want the shadow %s", heard, tc.wantShadow)
			}
		})
	}
}
