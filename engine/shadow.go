package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/gated/gated"
)

// PolicySide is what a policy decision pd on p (or its failure err)
// settles before any review, in the name of the persona routed: one side
// of CompareShadow. The gate builds the live side and the shadow's with
// it, and a replay the recorded side and the candidate's, so the two
// cannot disagree on what a decision settles.
func PolicySide(p *gated.Proposal, personas Personas, routed Routed, pd PolicyDecision, err error) gated.ShadowDecision {
	if err != nil {
		return gated.ShadowDecision{Revision: pd.Revision, Outcome: string(gated.OutcomeError), Denies: []gated.Deny{}, Error: err.Error()}
	}
	// A decision that routes elsewhere is settled in the name of the
	// persona it routes to, as the gate would.
	if pd.Review.Required && pd.Review.Persona != "" && pd.Review.Persona != routed.Name {
		routed = Routed{Name: pd.Review.Persona}
		routed.Persona, _ = personas.Persona(routed.Name)
	}
	route := pd.Review
	s, done := PolicyOutcome(p, pd, routed)
	d := gated.ShadowDecision{Revision: pd.Revision, Outcome: gated.ShadowOutcomeReview, Denies: s.Denies, Route: &route}
	if done {
		d.Outcome = string(s.Outcome)
	}
	return d
}

// CompareShadow compares the live decision with the shadow's. The gate
// compares with it, and so can a replay, so the two cannot disagree on
// what a difference is.
func CompareShadow(live, shadow gated.ShadowDecision) gated.ShadowComparison {
	c := gated.ShadowComparison{Live: live, Shadow: shadow, Kinds: []string{}}
	if (live.Error != "") != (shadow.Error != "") || shadow.Error != "" {
		c.Kinds = append(c.Kinds, gated.ShadowDiffError)
	}
	if live.Outcome != shadow.Outcome {
		c.Kinds = append(c.Kinds, gated.ShadowDiffOutcome)
	}
	c.Rules = RulesDeniedOnOneSide(live.Denies, shadow.Denies)
	if len(c.Rules) > 0 && live.Outcome == shadow.Outcome {
		c.Kinds = append(c.Kinds, gated.ShadowDiffDenies)
	}
	if live.Outcome == gated.ShadowOutcomeReview && shadow.Outcome == gated.ShadowOutcomeReview && !sameRoute(live.Route, shadow.Route) {
		c.Kinds = append(c.Kinds, gated.ShadowDiffRoute)
	}
	return c
}

// RulesDeniedOnOneSide is the sorted set of rules that deny in a or in
// b but not in both: what made two decisions on the same input differ,
// for shadow mode and for replay alike.
func RulesDeniedOnOneSide(a, b []gated.Deny) []string {
	in := func(ds []gated.Deny, rule string) bool {
		return slices.ContainsFunc(ds, func(d gated.Deny) bool { return d.Rule == rule })
	}
	var out []string
	for _, d := range a {
		if !in(b, d.Rule) && !slices.Contains(out, d.Rule) {
			out = append(out, d.Rule)
		}
	}
	for _, d := range b {
		if !in(a, d.Rule) && !slices.Contains(out, d.Rule) {
			out = append(out, d.Rule)
		}
	}
	slices.Sort(out)
	return out
}

func sameRoute(a, b *gated.Route) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Persona == b.Persona && a.Quorum == b.Quorum && slices.Equal(a.Also, b.Also)
}

// evaluateShadow evaluates the shadow policy; a panic in it is an error,
// so that a broken candidate cannot take the live path down.
func evaluateShadow(ctx context.Context, shadow Policy, in PolicyInput) (pd PolicyDecision, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("shadow policy panicked: %v", v)
		}
	}()
	pd, err = shadow.Evaluate(ctx, in)
	if err != nil && pd.Revision == "" {
		pd.Revision = shadow.Revision()
	}
	return pd, err
}

// shadow evaluates the shadow policy, when there is one with a good
// build, on the input the live policy decided last (in, in the name of
// the routed persona), after the live decision pd (or its failure
// liveErr). It returns the shadow's revision, empty when nothing was
// compared, and the comparison. Nothing it finds changes the verdict.
func (r *pass) shadow(ctx context.Context, in PolicyInput, routed Routed, pd PolicyDecision, liveErr error) (string, gated.ShadowComparison) {
	shadow := r.e.cfg.Shadow
	if shadow == nil || shadow.Revision() == "" {
		return "", gated.ShadowComparison{}
	}
	in.Persona = routed.Persona
	sd, err := evaluateShadow(ctx, shadow, in)
	for range 2 {
		// A shadow swapped in since the engine asked reads the counters
		// or the flow state.
		read, rerr := r.readUnread(ctx, &in, err)
		if rerr != nil {
			err = rerr
		}
		if !read || rerr != nil {
			break
		}
		sd, err = evaluateShadow(ctx, shadow, in)
	}
	live := PolicySide(r.p, r.e.cfg.Personas, routed, pd, liveErr)
	if live.Revision == "" {
		live.Revision = r.revision
	}
	c := CompareShadow(live, PolicySide(r.p, r.e.cfg.Personas, routed, sd, err))
	if r.e.cfg.OnShadow != nil {
		r.e.cfg.OnShadow(r.p, c)
	}
	return c.Shadow.Revision, c
}

// recordShadow records a comparison that differs on the proposal's trail.
func (r *pass) recordShadow(ctx context.Context, c gated.ShadowComparison) {
	if c.Differs() {
		r.log.recordBestEffort(ctx, gated.EventPolicyShadowDiffers, c)
	}
}
