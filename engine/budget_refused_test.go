package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// recordedRefusals admits everything, gives the agent seven proposals in
// the window, and keeps the refusals counted.
type recordedRefusals struct {
	countingBudgets
	counted atomic.Int64
	kind    atomic.Value
}

func (b *recordedRefusals) Refused(_ context.Context, _, _ string, kind engine.RefusalKind, _ time.Time) error {
	b.kind.Store(kind)
	b.counted.Add(1)
	return nil
}

// TestRefusalCountedBeforeTheVerdictReturns: a rejection's refusal is
// counted, as a rejection, by the time its verdict is returned, so that
// stopping the budgets after the decisions (their last flush) loses none.
func TestRefusalCountedBeforeTheVerdictReturns(t *testing.T) {
	budgets := &recordedRefusals{}
	busy := compileWith(t, map[string]string{"busy.rego": busyAgent})
	h := newHarness(t, func(h *harness) {
		h.cfg.Policy, h.cfg.Budgets, h.cfg.PolicyReadsBudget = busy, budgets, busy.ReadsBudget
	})
	read := map[string]any{"class": "read", "blast_radius": nil, "action": "host_list_services"}
	v, _ := h.mustDecide(t, "gated.proposals.acme.host_list_services", proposalJSON(t, read), "")
	if n := budgets.counted.Load(); n != 1 {
		t.Fatalf("%d refusals counted when the verdict returned, want 1", n)
	}
	if v.Outcome != gated.OutcomeRejected {
		t.Fatalf("verdict %s at %s (%s), want rejected", v.Outcome, v.Stage, v.Reason)
	}
	if kind := budgets.kind.Load(); kind != engine.RefusedRejected {
		t.Fatalf("refusal counted as %q, want %q", kind, engine.RefusedRejected)
	}
}
