package engine_test

import (
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// TestComparisonFlipsAndReviewChanges: a flip is a difference of outcome
// and nothing else; a review change is a difference of route, which only
// two decisions that both go to review can have.
func TestComparisonFlipsAndReviewChanges(t *testing.T) {
	deny := []gated.Deny{{Rule: "nginx_frozen", Message: "frozen"}}
	review := func(persona string, also ...string) gated.ShadowDecision {
		return gated.ShadowDecision{Outcome: gated.ShadowOutcomeReview, Denies: []gated.Deny{},
			Route: &gated.Route{Required: true, Persona: persona, Quorum: 1, Also: also}}
	}
	settled := func(o gated.Outcome, d []gated.Deny) gated.ShadowDecision {
		if d == nil {
			d = []gated.Deny{}
		}
		return gated.ShadowDecision{Outcome: string(o), Denies: d, Route: &gated.Route{}}
	}
	cases := []struct {
		note                  string
		a, b                  gated.ShadowDecision
		flipped, reviewChange bool
	}{
		{note: "alike", a: settled(gated.OutcomeApproved, nil), b: settled(gated.OutcomeApproved, nil)},
		{note: "approved then rejected", a: settled(gated.OutcomeApproved, nil), b: settled(gated.OutcomeRejected, deny), flipped: true},
		{note: "review then rejected", a: review("reviewer"), b: settled(gated.OutcomeRejected, deny), flipped: true},
		{note: "rejected by other rules", a: settled(gated.OutcomeRejected, deny),
			b: settled(gated.OutcomeRejected, []gated.Deny{{Rule: "target_cooldown"}})},
		{note: "another persona", a: review("reviewer"), b: review("dba"), reviewChange: true},
		{note: "another also", a: review("reviewer", "dba"), b: review("reviewer"), reviewChange: true},
		{note: "the same review", a: review("reviewer", "dba"), b: review("reviewer", "dba")},
		{note: "an error", a: review("reviewer"), b: gated.ShadowDecision{Outcome: string(gated.OutcomeError), Denies: []gated.Deny{}, Error: "boom"}, flipped: true},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			c := engine.CompareShadow(tc.a, tc.b)
			if c.Flipped() != tc.flipped || c.ReviewChanged() != tc.reviewChange {
				t.Fatalf("kinds %v: flipped %v, review changed %v; want %v, %v", c.Kinds, c.Flipped(), c.ReviewChanged(), tc.flipped, tc.reviewChange)
			}
		})
	}
}
