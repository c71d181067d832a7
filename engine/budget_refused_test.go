package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// blockedRefusals admits everything, gives the agent seven proposals in
// the window, and blocks a refusal's count until the decision it counts
// has returned (or, under a decision that waits on the count, until
// giveUp passes): it then says whether the decision had returned first.
type blockedRefusals struct {
	countingBudgets
	decided chan struct{}
	counted chan bool
	kind    chan engine.RefusalKind
}

const giveUp = 10 * time.Second

func (b *blockedRefusals) Refused(_ context.Context, _, _ string, kind engine.RefusalKind, _ time.Time) error {
	b.kind <- kind
	select {
	case <-b.decided:
		b.counted <- true
	case <-time.After(giveUp):
		b.counted <- false
	}
	return nil
}

// TestRefusalCountOffTheDecisionPath: a rejection's verdict is returned
// while the count of its refusal is still blocked; the refusal is counted
// all the same, as a rejection.
func TestRefusalCountOffTheDecisionPath(t *testing.T) {
	budgets := &blockedRefusals{decided: make(chan struct{}), counted: make(chan bool, 1), kind: make(chan engine.RefusalKind, 1)}
	busy := compileWith(t, map[string]string{"busy.rego": busyAgent})
	h := newHarness(t, func(h *harness) {
		h.cfg.Policy, h.cfg.Budgets, h.cfg.PolicyReadsBudget = busy, budgets, busy.ReadsBudget
	})
	read := map[string]any{"class": "read", "blast_radius": nil, "action": "host_list_services"}
	v, _ := h.mustDecide(t, "gated.proposals.acme.host_list_services", proposalJSON(t, read), "")
	close(budgets.decided)
	if v.Outcome != gated.OutcomeRejected {
		t.Fatalf("verdict %s at %s (%s), want rejected", v.Outcome, v.Stage, v.Reason)
	}
	if first := <-budgets.counted; !first {
		t.Fatal("the verdict waited for the count of its refusal")
	}
	if kind := <-budgets.kind; kind != engine.RefusedRejected {
		t.Fatalf("refusal counted as %q, want %q", kind, engine.RefusedRejected)
	}
}
