package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gated/gated"
)

// maxTargetJoins bounds how often one approval tries to join its target's
// history while other approvals keep changing it. Each failed try means
// another approval joined, which the policy then denies against in the
// default bundle, so the bound is reached only by a policy that lets
// approvals on one target overlap; the delivery is then retried.
const maxTargetJoins = 8

// RuleTargetChanged names the denial of an approval whose target another
// approval changed while it was decided, when the policy, deciding again
// on the target's history as it then stood, asks for more than the
// approval had: a hold for an operator, a review, another persona, a
// larger quorum, fewer reviewer tools. The proposal is to be sent again,
// to be decided on that history.
const RuleTargetChanged = "target_changed"

// joinTarget adds v, when it approves a mutating action, to its target's
// history by compare-and-set against the history the policy decided on.
// When another approval joined in between, the policy decides again with
// the history as it now stands: the approval is kept only while the
// policy still denies nothing and asks for nothing more (recheck), and
// otherwise the verdict returned is a rejection (or an error verdict when
// the policy cannot evaluate).
// An error means the store failed: nothing is decided and the delivery is
// retried; the target may then hold this approval, which only closes it
// for the policy's window.
func (r *pass) joinTarget(ctx context.Context, v *gated.Verdict) (*gated.Verdict, error) {
	if v.Outcome != gated.OutcomeApproved || v.TargetKey == "" || r.p == nil {
		return v, nil
	}
	h := r.hist
	for range maxTargetJoins {
		fresh, err := r.e.cfg.Store.Join(ctx, v, h)
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, ErrTargetChanged) {
			return nil, fmt.Errorf("joining the history of target %s: %w", v.TargetKey, err)
		}
		h = fresh
		if out := r.recheck(ctx, v, h); out != nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("joining the history of target %s: it changed under %d concurrent approvals", v.TargetKey, maxTargetJoins)
}

// recheck evaluates the policy for v's proposal again on h, the target's
// history as it stands now, and returns the verdict that replaces v, or
// nil when v stands. v stands only while the fresh decision denies
// nothing and asks nothing v did not have (asksMore): otherwise it is
// rejected at stage policy, by the policy's denies when it denies, and
// else by RuleTargetChanged, naming the approvals that joined and what the
// policy now asks. An error verdict replaces v when the policy cannot
// evaluate.
//
// Asking for more rejects rather than deciding the proposal again here or
// on a redelivery: the answer is final and immediate, costs no second
// review, cannot loop while approvals keep joining the target, and its
// trail, policy.rechecked included, is sealed with the verdict. The
// rejection is not remembered for dedupe, so the proposal sent again is
// decided afresh on the history as it then stands (held, or reviewed as
// the policy now asks).
func (r *pass) recheck(ctx context.Context, v *gated.Verdict, h History) *gated.Verdict {
	in := r.policyIn
	in.History, in.Now = h.Verdicts, r.e.cfg.Clock.Now()
	pd, err := r.e.cfg.Policy.Evaluate(ctx, in)
	if err != nil {
		r.log.recordBestEffort(ctx, gated.EventPolicyRechecked, policyFailedData{Error: err.Error()})
		out := r.verdict(gated.OutcomeError, gated.StagePolicy, "policy evaluation failed on the target's changed history: "+err.Error())
		out.Reviews = v.Reviews
		return out
	}
	settled, _ := PolicyOutcome(r.p, pd, Routed{Persona: in.Persona})
	var asks []string
	if len(settled.Denies) == 0 {
		asks = r.asksMore(ctx, pd, in)
	}
	personaName := ""
	if in.Persona != nil {
		personaName = in.Persona.Name
	}
	r.log.recordBestEffort(ctx, gated.EventPolicyRechecked, gated.PolicyRecheckedData{
		PolicyDecidedData: gated.PolicyDecidedData{
			Denies: settled.Denies, Review: pd.Review, ReviewerTools: pd.ReviewerTools, DeniedTools: pd.DeniedTools,
			EvalUS: pd.Eval.Microseconds(), SOP: sopID(pd.SOP), Holds: pd.Holds,
			Input: &gated.ReplayInput{Proposal: r.d.Data, Persona: personaName, Now: in.Now.UTC(), History: h.Verdicts},
		},
		Changed: asks,
	})
	denies := settled.Denies
	switch {
	case len(denies) > 0:
	case len(asks) > 0:
		denies = []gated.Deny{{Rule: RuleTargetChanged, Message: fmt.Sprintf(
			"the target's history changed while this proposal was decided (%s joined it), and on it the policy %s; propose again to be decided on the history as it stands",
			joinedSince(r.id, r.hist, h), strings.Join(asks, "; "))}}
	default:
		return nil
	}
	out := r.verdict(gated.OutcomeRejected, gated.StagePolicy, denyReason(denies))
	out.Policy = newPolicyRef(denies, pd)
	// The reviews ran and stay on the record; the policy overrules them.
	out.Reviews = v.Reviews
	return out
}

// asksMore lists what pd, the policy's decision that denies nothing on the
// target's changed history (input in, made in the routed persona's name
// as the first one was), asks for that the approval did not have. The
// approval had r.decided, the decision on the history the policy first
// read, and the reviews of r.reviewers, all of which approved. The policy
// asks for more when it:
//
//   - holds the action for an operator;
//   - requires a review where r.decided waived it (the policy alone
//     approved), or blocks the review;
//   - routes the review to another persona;
//   - asks for a quorum above the number of reviewers that approved, or
//     adds (review.also) a reviewer that did not review;
//   - refuses, in its own name, a reviewer that approved (denies, or
//     requires no review or blocks it in that name), or takes from a
//     reviewer's tool bag a tool its review was given.
//
// A decision that asks for less (no review where reviewers approved, a
// smaller quorum, more tools) leaves the approval standing: it had more
// than the policy now asks. The policy's preferred further personas
// (review.personas) are a preference, not a requirement, and are not
// compared.
func (r *pass) asksMore(ctx context.Context, pd PolicyDecision, in PolicyInput) []string {
	var asks []string
	if len(pd.Holds) > 0 {
		asks = append(asks, "holds it for an operator: "+holdWhy(pd.Holds))
	}
	switch {
	case !pd.Review.Required:
		return asks
	case !r.decided.Review.Required:
		why := pd.Review.Why
		if why == "" {
			why = "no reason given"
		}
		return append(asks, fmt.Sprintf("requires a review (%s), where the policy alone approved it", why))
	case pd.Review.Blocked != "":
		return append(asks, "blocks its review: "+pd.Review.Blocked)
	}
	reviewed := make([]string, len(r.reviewers))
	for i, c := range r.reviewers {
		reviewed[i] = c.persona.Name
	}
	if in.Persona != nil && pd.Review.Persona != "" && pd.Review.Persona != in.Persona.Name {
		asks = append(asks, fmt.Sprintf("routes its review to persona %q, where %q reviewed it", pd.Review.Persona, in.Persona.Name))
	}
	if pd.Review.Quorum > len(reviewed) {
		asks = append(asks, fmt.Sprintf("asks for a quorum of %d, where %d reviewed it", pd.Review.Quorum, len(reviewed)))
	}
	for _, name := range pd.Review.Also {
		if name != "" && !slices.Contains(reviewed, name) {
			asks = append(asks, fmt.Sprintf("asks persona %q to review as well", name))
		}
	}
	for i, c := range r.reviewers {
		d := pd
		if i > 0 {
			fresh, routed, err := EvaluateRouted(ctx, r.e.cfg.Policy.Evaluate, r.e.cfg.Personas, in, c.persona.Name, false)
			if _, why := candidateRefusal(routed.Persona != nil, pd, fresh, err); why != "" {
				asks = append(asks, fmt.Sprintf("no longer lets persona %q review: %s", c.persona.Name, why))
				continue
			}
			d = fresh
		}
		var taken []string
		for _, tool := range c.pd.ReviewerTools {
			if !slices.Contains(d.ReviewerTools, tool) {
				taken = append(taken, tool)
			}
		}
		if len(taken) > 0 {
			asks = append(asks, fmt.Sprintf("takes %s from the tool bag of persona %q, whose review had them", strings.Join(taken, ", "), c.persona.Name))
		}
	}
	return asks
}

// joinedSince names the approvals of other proposals than id in now, the
// target's history, that were not in before.
func joinedSince(id string, before, now History) string {
	var ids []string
	for _, o := range now.Verdicts {
		if o.ProposalID == id || slices.ContainsFunc(before.Verdicts, func(b gated.Verdict) bool {
			return b.ProposalID == o.ProposalID && b.DecidedAt.Equal(o.DecidedAt)
		}) {
			continue
		}
		ids = append(ids, o.ProposalID)
	}
	switch len(ids) {
	case 0:
		return "another approval"
	case 1:
		return "the approval of proposal " + ids[0]
	}
	return "the approvals of proposals " + strings.Join(ids, ", ")
}

// joinHeld adds next, an operator's approval of the held action held, to
// the target's history, unless another approval joined the target while
// the action was held: then it returns that approval as a
// parallel_operation denial, and nothing joins. The proposal itself is
// not at hand to evaluate the policy again, so any approval of another
// proposal that joined since the policy held the action denies, whatever
// its age: the safe side. An error means the store failed.
func (e *Engine) joinHeld(ctx context.Context, held, next *gated.Verdict, now time.Time) (*gated.Deny, error) {
	h, err := e.cfg.Store.Recent(ctx, held.Tenant, held.TargetKey)
	for range maxTargetJoins {
		if err != nil {
			return nil, fmt.Errorf("reading the history of target %s: %w", held.TargetKey, err)
		}
		if d := joinedWhileHeld(held, h, now); d != nil {
			return d, nil
		}
		h, err = e.cfg.Store.Join(ctx, next, h)
		if err == nil {
			return nil, nil
		}
		if !errors.Is(err, ErrTargetChanged) {
			return nil, fmt.Errorf("joining the history of target %s: %w", held.TargetKey, err)
		}
		err = nil // h is the history as it now stands
	}
	return nil, fmt.Errorf("joining the history of target %s: it changed under %d concurrent approvals", held.TargetKey, maxTargetJoins)
}

// joinedWhileHeld returns the denial of an operator's approval of held
// when h, the target's history now, is not the one the policy held the
// action on and holds an approval of another proposal: the newest such.
func joinedWhileHeld(held *gated.Verdict, h History, now time.Time) *gated.Deny {
	if held.AwaitingOperator != nil && h.Revision == held.AwaitingOperator.TargetRevision {
		return nil
	}
	for i := len(h.Verdicts) - 1; i >= 0; i-- {
		o := h.Verdicts[i]
		if !o.Approved || o.ProposalID == held.ProposalID {
			continue
		}
		who := "an unnamed agent"
		if o.Agent != "" {
			who = "agent " + o.Agent
		}
		return &gated.Deny{Rule: "parallel_operation", Message: fmt.Sprintf(
			"%s on the same target was approved %ds ago for %s (proposal %s) while this action was held for an operator; no parallel operation",
			o.Action, int(now.Sub(o.DecidedAt).Round(time.Second)/time.Second), who, o.ProposalID)}
	}
	return nil
}
