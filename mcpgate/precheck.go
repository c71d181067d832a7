package mcpgate

import (
	"context"
	"fmt"
	"time"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/policies"
)

// PolicyPrecheck is the precheck of evaluator ev with the personas of
// reg: the policy evaluated with the default persona and, when it routes
// the review elsewhere, with that one, and the engine's own outcome
// function on the decision, as the engine decides before any review. It
// leaves out the reviewers a decision adds (review.also): they matter
// only to a proposal that goes on to review, which the precheck reports
// as not settled. It uses the evaluator's plain path, not policy eval's
// explaining one, which costs milliseconds.
func PolicyPrecheck(ev *policies.Evaluator, reg engine.Personas) Precheck {
	return func(ctx context.Context, p *engine.Proposal) (engine.Settled, bool, error) {
		in := engine.PolicyInput{Proposal: p, Now: time.Now()}
		d, routed, err := engine.EvaluateRouted(ctx, ev.Evaluate, reg, in, engine.DefaultPersona, true)
		if err != nil {
			return engine.Settled{}, false, fmt.Errorf("evaluating the policy on %s: %w", p.Action, err)
		}
		s, settled := engine.PolicyOutcome(p, d, routed)
		return s, settled, nil
	}
}
