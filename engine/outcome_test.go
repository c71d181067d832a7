package engine

import (
	"errors"
	"testing"

	"github.com/gated/gated"
)

func TestPolicyOutcome(t *testing.T) {
	action := &gated.Proposal{Kind: gated.KindAction}
	run := &gated.Proposal{Kind: gated.KindRun}
	loaded := Routed{Name: "reviewer", Persona: &Persona{Name: "reviewer"}}
	review := gated.Route{Required: true, Quorum: 1}
	tests := []struct {
		note    string
		p       *gated.Proposal
		pd      PolicyDecision
		routed  Routed
		settled bool
		outcome gated.Outcome
		stage   gated.Stage
		reason  string
	}{
		{note: "deny rejects at policy, denies sorted", p: action, routed: loaded,
			pd:      PolicyDecision{Denies: []gated.Deny{{Rule: "z", Message: "last"}, {Rule: "a", Message: "first"}}, Review: review},
			settled: true, outcome: gated.OutcomeRejected, stage: gated.StagePolicy, reason: "policy denied: a: first; z: last"},
		{note: "no review approves at policy", p: action, routed: loaded, pd: PolicyDecision{Review: gated.Route{Why: "reads pass"}},
			settled: true, outcome: gated.OutcomeApproved, stage: gated.StagePolicy, reason: "reads pass"},
		{note: "no review and no why", p: action, routed: loaded,
			settled: true, outcome: gated.OutcomeApproved, stage: gated.StagePolicy, reason: "policy requires no review"},
		{note: "a blocked review blocks", p: action, routed: loaded, pd: PolicyDecision{Review: gated.Route{Required: true, Blocked: "no reviewer may take it"}},
			settled: true, outcome: gated.OutcomeBlocked, stage: gated.StageReview, reason: "no reviewer may take it"},
		{note: "an unloaded routed persona blocks", p: action, routed: Routed{Name: "ghost"}, pd: PolicyDecision{Review: review},
			settled: true, outcome: gated.OutcomeBlocked, stage: gated.StageReview, reason: `no persona named "ghost" is loaded`},
		{note: "a run decision without a run section is an error", p: run, routed: loaded, pd: PolicyDecision{Review: review},
			settled: true, outcome: gated.OutcomeError, stage: gated.StagePolicy},
		{note: "a required review goes on", p: action, routed: loaded, pd: PolicyDecision{Review: review}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			s, ok := PolicyOutcome(tc.p, tc.pd, tc.routed)
			if ok != tc.settled {
				t.Fatalf("settled %v (%+v), want %v", ok, s, tc.settled)
			}
			if !ok {
				return
			}
			if s.Outcome != tc.outcome || s.Stage != tc.stage {
				t.Errorf("%s at %s, want %s at %s", s.Outcome, s.Stage, tc.outcome, tc.stage)
			}
			if tc.reason != "" && s.Reason != tc.reason {
				t.Errorf("reason %q, want %q", s.Reason, tc.reason)
			}
			if s.Reason == "" || s.Denies == nil {
				t.Errorf("reason %q, denies %v: want a reason and non-nil denies", s.Reason, s.Denies)
			}
			if len(s.Denies) == 2 && s.Denies[0].Rule != "a" {
				t.Errorf("denies %v not sorted by rule", s.Denies)
			}
		})
	}
}

func TestAddedOutcome(t *testing.T) {
	pd := PolicyDecision{Revision: "r1", Review: gated.Route{Required: true}}
	tests := []struct {
		note    string
		loaded  bool
		d       PolicyDecision
		err     error
		settled bool
		outcome gated.Outcome
		reason  string
	}{
		{note: "not loaded blocks", d: pd, settled: true, outcome: gated.OutcomeBlocked,
			reason: `the proposal asks persona "x" to review as well, and it cannot: not loaded`},
		{note: "a deny in its name rejects", loaded: true, d: PolicyDecision{Revision: "r1", Denies: []gated.Deny{{Rule: "reviewer_tool_denied", Message: "writes"}}},
			settled: true, outcome: gated.OutcomeRejected, reason: `the proposal asks persona "x" to review as well, and the policy refuses it: policy denied: reviewer_tool_denied: writes`},
		{note: "a failed evaluation blocks", loaded: true, err: errors.New("boom"), settled: true, outcome: gated.OutcomeBlocked},
		{note: "another revision blocks", loaded: true, d: PolicyDecision{Revision: "r2", Review: gated.Route{Required: true}}, settled: true, outcome: gated.OutcomeBlocked},
		{note: "no review in its name blocks", loaded: true, d: PolicyDecision{Revision: "r1"}, settled: true, outcome: gated.OutcomeBlocked},
		{note: "it may review", loaded: true, d: pd},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			s, ok := AddedOutcome("x", tc.loaded, pd, tc.d, tc.err)
			if ok != tc.settled {
				t.Fatalf("settled %v (%+v), want %v", ok, s, tc.settled)
			}
			if ok && s.Outcome != tc.outcome {
				t.Errorf("outcome %s (%s), want %s", s.Outcome, s.Reason, tc.outcome)
			}
			if tc.reason != "" && s.Reason != tc.reason {
				t.Errorf("reason %q, want %q", s.Reason, tc.reason)
			}
		})
	}
}
