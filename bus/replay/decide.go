package replay

import (
	"context"
	"slices"
	"strings"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/policies"
)

// outcomeReview is the new outcome of a proposal the candidate sends to a
// review that was never asked: the recorded decision settled it at policy.
const outcomeReview gated.Outcome = "review"

// verdict counts the verdict record r and decides its proposal again
// from its policy.decided record p (nil when the range holds none). r is
// a record audit.DecodeRecord returned: its data is valid JSON.
func (rep *Report) verdict(ctx context.Context, ev *policies.Evaluator, reg engine.Personas,
	r *replayEvent, p *recordedPolicy, show int) {
	rep.Verdicts++
	old, err := gated.DecodeAuditData[gated.Verdict](r.Event)
	if err != nil {
		rep.missing(r, "the verdict record does not decode: "+err.Error())
		return
	}
	rep.replay(ctx, ev, reg, r, p, &old, show)
}

// replay decides the proposal of verdict record r again, from its
// policy.decided record p (nil when the range holds none).
func (rep *Report) replay(ctx context.Context, ev *policies.Evaluator, reg engine.Personas,
	r *replayEvent, p *recordedPolicy, old *gated.Verdict, show int) {
	if p == nil {
		if old.Stage == gated.StageValidation || old.Stage == gated.StageDedupe {
			rep.NotPolicy[string(old.Stage)]++
			return
		}
		rep.missing(r, "no policy.decided record of the proposal in the range")
		return
	}
	switch {
	case p.Input == nil && p.Error != "":
		rep.missing(r, "the recorded evaluation failed and kept no input: "+p.Error)
		return
	case p.Input == nil:
		rep.missing(r, "the policy.decided record keeps no input (recorded by an older gated)")
		return
	}
	prop, err := gated.DecodeProposal(p.Input.Proposal, r.Event.Tenant, p.Action, gated.Limits{})
	if err != nil {
		rep.missing(r, "the recorded proposal does not decode: "+err.Error())
		return
	}
	rep.Replayed++
	in := engine.PolicyInput{Proposal: prop, History: p.Input.History, RunRecord: p.Input.RunRecord, Budget: p.Input.Budget, Session: p.Input.Session, Now: p.Input.Now}
	oldSide := Decision{Outcome: old.Outcome, Stage: old.Stage, Reason: old.Reason, Denies: sortedDenies(p.Denies)}
	var newSide Decision
	pd, routed, err := engine.EvaluateRouted(ctx, ev.Evaluate, reg, in, p.Input.Persona, true)
	cmp := compareRecorded(prop, reg, p, pd, routed, err)
	switch settled, done := engine.PolicyOutcome(prop, pd, routed); {
	case err != nil:
		newSide = Decision{Outcome: gated.OutcomeError, Stage: gated.StagePolicy, Reason: "policy evaluation failed: " + err.Error(), Denies: []gated.Deny{}}
	case done:
		newSide = Decision{Outcome: settled.Outcome, Stage: settled.Stage, Reason: settled.Reason, Denies: settled.Denies}
	case !p.settledAtPolicy() && cmp.ReviewChanged():
		// Not reused: the recorded review is not the candidate's reviewers'.
		newSide = oldSide
		newSide.Denies = settled.Denies
		rep.reviewChanged(r, prop.Action, cmp, show)
	case !p.settledAtPolicy():
		rep.keepReview(ctx, r, p, routed.Name, pd.Review.Quorum, rep.reviewers)
		newSide = oldSide
		newSide.Denies = settled.Denies
	default:
		newSide = Decision{Outcome: outcomeReview, Stage: gated.StageReview, Reason: "the candidate sends it to a review the recorded decision never asked", Denies: settled.Denies}
	}
	rep.Outcomes[rep.outcomeKey(oldSide.Outcome, newSide.Outcome)]++
	for _, k := range cmp.Kinds {
		rep.Differences[k]++
	}
	if !cmp.Flipped() {
		return
	}
	rep.Flips++
	for _, rule := range flipRules(oldSide.Denies, newSide.Denies) {
		rep.FlipsByRule[rule]++
	}
	rep.FlipsByTenant[r.Event.Tenant]++
	rep.FlipsByAction[prop.Action]++
	if listed(len(rep.Shown), show) {
		rep.Shown = append(rep.Shown, Flip{Tenant: r.Event.Tenant, ID: r.Event.ProposalID, Action: prop.Action, Seq: r.Seq,
			Old: oldSide, New: newSide, Kinds: cmp.Kinds, Rules: nonNil(cmp.Rules)})
	}
}

func sortedDenies(d []gated.Deny) []gated.Deny {
	out := slices.Clone(d)
	if out == nil {
		out = []gated.Deny{}
	}
	slices.SortStableFunc(out, func(a, b gated.Deny) int { return strings.Compare(a.Rule, b.Rule) })
	return out
}

// flipRules names the rules that made a flip: those that deny on one side
// only, or "(routing)" when the denies are the same and the routing or
// the review changed the outcome.
func flipRules(old, cur []gated.Deny) []string {
	if rules := engine.RulesDeniedOnOneSide(old, cur); len(rules) > 0 {
		return rules
	}
	return []string{"(routing)"}
}

// compareRecorded compares the recorded policy decision p with the
// candidate's (pd, routed, err) as the gate compares the live policy with
// a shadow, so that replay and shadow mode judge a difference alike.
func compareRecorded(prop *gated.Proposal, reg engine.Personas, p *recordedPolicy, pd engine.PolicyDecision,
	routed engine.Routed, err error) gated.ShadowComparison {
	rec := engine.Routed{Name: p.Input.Persona}
	rec.Persona, _ = reg.Persona(rec.Name)
	recorded := engine.PolicySide(prop, reg, rec, engine.PolicyDecision{Denies: p.Denies, Review: p.Review, Run: p.Run}, nil)
	return engine.CompareShadow(recorded, engine.PolicySide(prop, reg, routed, pd, err))
}

// reviewChanged counts, and names while fewer than show are, a proposal
// whose reviewers the candidate changes.
func (rep *Report) reviewChanged(r *replayEvent, action string, c gated.ShadowComparison, show int) {
	rep.ReviewChanged++
	if listed(len(rep.ReviewChanges), show) {
		rep.ReviewChanges = append(rep.ReviewChanges, ReviewChange{Tenant: r.Event.Tenant, ID: r.Event.ProposalID, Action: action,
			Seq: r.Seq, Old: c.Live.Route, New: c.Shadow.Route, Kinds: c.Kinds})
	}
}

// listed says whether a list of n items takes one more under Config.Show: a
// negative show lists all.
func listed(n, show int) bool { return show < 0 || n < show }

// nonNil is s, or an empty list for nil: the report's JSON holds [] for
// no rules, never null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
