package policies

import (
	"context"
	"fmt"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// Settle is what the gate decides for p before any review, evaluated in
// this process: the policy evaluated with the default persona and, when
// it routes the review elsewhere, with that one (personas from reg), and
// the engine's own outcome function on the decision. settled is false
// when p would go on to review. It leaves out the reviewers a decision
// adds (review.also): they matter only to a proposal that goes on to
// review. It uses the plain evaluation, not Explain's, which costs
// milliseconds. gated mcp's precheck is Settle.
func (e *Evaluator) Settle(ctx context.Context, reg engine.Personas, p *gated.Proposal) (s gated.Settled, settled bool, err error) {
	in := engine.PolicyInput{Proposal: p, Now: time.Now()}
	d, routed, err := engine.EvaluateRouted(ctx, e.Evaluate, reg, in, engine.DefaultPersona, true)
	if err != nil {
		return gated.Settled{}, false, fmt.Errorf("evaluating the policy on %s: %w", p.Action, err)
	}
	s, settled = engine.PolicyOutcome(p, d, routed)
	return s, settled, nil
}
