package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gated/gated"
)

// PolicyOutcome says what the gate decides for proposal p from the policy
// decision pd, made in the name of the routed persona, before any review:
// rejected at policy for a deny, blocked at policy when the policy holds
// an action for an operator (the verdict then awaits one), approved at policy when no review is
// required, blocked at review when the policy blocks the review or the
// persona it routes to is not loaded, error at policy when a run's
// decision has no run section. ok is false when the proposal goes on to
// review. The gate decides with it, and so does a dry run, so the two
// cannot disagree.
func PolicyOutcome(p *gated.Proposal, pd PolicyDecision, routed Routed) (s gated.Settled, ok bool) {
	s.Denies = slices.Clone(pd.Denies)
	slices.SortStableFunc(s.Denies, func(a, b gated.Deny) int { return strings.Compare(a.Rule, b.Rule) })
	if s.Denies == nil {
		s.Denies = []gated.Deny{}
	}
	settle := func(o gated.Outcome, st gated.Stage, reason string) (gated.Settled, bool) {
		s.Outcome, s.Stage, s.Reason = o, st, reason
		return s, true
	}
	switch {
	case p.Kind == gated.KindRun && pd.Run == nil:
		return settle(gated.OutcomeError, gated.StagePolicy, "policy evaluation failed: the decision has no run section for a proposal of kind run")
	case len(s.Denies) > 0:
		return settle(gated.OutcomeRejected, gated.StagePolicy, denyReason(s.Denies))
	case len(pd.Holds) > 0 && p.Kind != gated.KindRun:
		// The hard rules ran and denied nothing: a person decides.
		return settle(gated.OutcomeBlocked, gated.StagePolicy, holdReason(pd.Holds))
	case !pd.Review.Required:
		why := pd.Review.Why
		if why == "" {
			why = "policy requires no review"
		}
		return settle(gated.OutcomeApproved, gated.StagePolicy, why)
	case pd.Review.Blocked != "":
		return settle(gated.OutcomeBlocked, gated.StageReview, pd.Review.Blocked)
	case routed.Persona == nil:
		return settle(gated.OutcomeBlocked, gated.StageReview, fmt.Sprintf("no persona named %q is loaded", routed.Name))
	}
	return s, false
}

// AddedOutcome says what the gate decides, before any review, for a
// proposal that asks persona name to review beside the routed persona,
// from pd, the decision in the routed persona's name, and d and err, the
// policy's evaluation in name's name (loaded is false when no persona
// name is loaded): rejected at policy when the policy denies in its name,
// blocked at review when it cannot review. ok is false when it may review
// as far as the policy can tell; the gate still needs a reviewer plugin
// that serves it.
func AddedOutcome(name string, loaded bool, pd, d PolicyDecision, err error) (s gated.Settled, ok bool) {
	denies, why := candidateRefusal(loaded, pd, d, err)
	switch {
	case len(denies) > 0:
		return addedRefused(name, denies), true
	case why != "":
		return addedCannot(name, why), true
	}
	return s, false
}

// candidateRefusal says why the persona in whose name the policy decided
// d (or failed with err) cannot review beside the decision pd: the
// policy's denies in its name, sorted by rule, and a few words. why is
// empty when it may review.
func candidateRefusal(loaded bool, pd, d PolicyDecision, err error) (denies []gated.Deny, why string) {
	switch {
	case err != nil:
		return nil, "policy evaluation failed: " + err.Error()
	case !loaded:
		return nil, "not loaded"
	case d.Revision != pd.Revision:
		// One verdict names one policy revision; a reload in between
		// must not mix the tool bags of two policies.
		return nil, "the policy changed while reviewers were chosen"
	case len(d.Denies) > 0:
		denies = slices.Clone(d.Denies)
		slices.SortStableFunc(denies, func(a, b gated.Deny) int { return strings.Compare(a.Rule, b.Rule) })
		rules := make([]string, 0, len(denies))
		for _, deny := range denies {
			rules = append(rules, deny.Rule)
		}
		return denies, "policy denies " + strings.Join(slices.Compact(rules), ", ")
	case !d.Review.Required:
		return nil, "policy requires no review in its name"
	case d.Review.Blocked != "":
		return nil, d.Review.Blocked
	}
	return nil, ""
}

func addedRefused(name string, denies []gated.Deny) gated.Settled {
	return gated.Settled{Outcome: gated.OutcomeRejected, Stage: gated.StagePolicy, Denies: denies,
		Reason: fmt.Sprintf("the proposal asks persona %q to review as well, and the policy refuses it: %s", name, denyReason(denies))}
}

func addedCannot(name, why string) gated.Settled {
	return gated.Settled{Outcome: gated.OutcomeBlocked, Stage: gated.StageReview, Denies: []gated.Deny{},
		Reason: fmt.Sprintf("the proposal asks persona %q to review as well, and it cannot: %s", name, why)}
}
