package engine_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// TestVerdictNamesDecidingRules: the verdict's policy section names the
// rules that decided, the distinct deny rules and the routing rule, and
// bounds the list, saying how many rules it leaves out.
func TestVerdictNamesDecidingRules(t *testing.T) {
	manyDenies := make([]gated.Deny, 0, 2*(gated.MaxPolicyRules+5))
	for i := range gated.MaxPolicyRules + 5 {
		rule := fmt.Sprintf("rule_%02d", i)
		manyDenies = append(manyDenies, gated.Deny{Rule: rule, Message: "a"}, gated.Deny{Rule: rule, Message: "b"})
	}
	longName := strings.Repeat("r", 3*gated.MaxPolicyRuleLen)
	tests := []struct {
		name      string
		override  map[string]any
		policy    engine.Policy
		wantRules []string
		wantMore  int
		wantRoute string
	}{
		{name: "a write goes to review by its class", wantRoute: "route_class"},
		{name: "a catalogued read passes", override: map[string]any{"action": "host_list_services", "class": "read"},
			wantRoute: "route_read"},
		{name: "denied flags name each deny rule once",
			override:  map[string]any{"flags": map[string]any{"skip_review": true, "force_approve": true}},
			wantRules: []string{"no_skip_review", "unsupported_force_approve"}, wantRoute: "route_class"},
		{name: "many deny rules are capped",
			policy:    stubPolicy{d: engine.PolicyDecision{Denies: manyDenies, Review: gated.Route{Required: true, Quorum: 1, Rule: longName}, Revision: "rev-many"}},
			wantRules: rulesUpTo(gated.MaxPolicyRules), wantMore: 5, wantRoute: longName[:gated.MaxPolicyRuleLen]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(h *harness) {
				if tc.policy != nil {
					h.cfg.Policy = tc.policy
				}
			})
			subject := testSubject
			if action, ok := tc.override["action"].(string); ok {
				subject = "gated.proposals.acme." + action
			}
			v, _ := h.mustDecide(t, subject, proposalJSON(t, tc.override), "")
			if v.Policy == nil {
				t.Fatalf("verdict %s at %s has no policy section", v.Outcome, v.Stage)
			}
			if !slices.Equal(v.Policy.Rules, tc.wantRules) || v.Policy.RulesMore != tc.wantMore {
				t.Errorf("rules %v (+%d more), want %v (+%d more)", v.Policy.Rules, v.Policy.RulesMore, tc.wantRules, tc.wantMore)
			}
			if v.Policy.Route != tc.wantRoute {
				t.Errorf("route %q, want %q", v.Policy.Route, tc.wantRoute)
			}
		})
	}
}

func rulesUpTo(n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("rule_%02d", i)
	}
	return out
}
