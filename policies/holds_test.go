package policies

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// TestHoldsOnBothEvaluators decides the operator holds of the default
// bundle, configured, with the planned evaluator and with topdown: both
// hold the same actions, and a denied action is denied whatever holds it.
func TestHoldsOnBothEvaluators(t *testing.T) {
	b := mustDefault(t)
	config := b.Data["gated"].(map[string]any)["config"].(map[string]any)
	config["operator_holds"] = map[string]any{
		"tenant_wide_destructive": true,
		"actions":                 map[string]any{"acme": []any{"dns_*"}},
		"deadline":                "15m",
	}
	planned, err := Compile(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	if st := planned.Plan(); st.Evaluator != EvaluatorPlanned {
		t.Fatalf("the bundle with holds is not planned: %+v", st)
	}
	topdown, err := Compile(t.Context(), b, Topdown())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		note      string
		mutate    func(*gated.Proposal)
		wantHolds []string
		wantDeny  string
	}{
		{note: "single device write", mutate: func(*gated.Proposal) {}},
		{note: "tenant wide destructive", mutate: func(p *gated.Proposal) {
			p.Action, p.Class, p.BlastRadius = "db_drop_table", gated.ClassDestructive, gated.BlastTenantWide
		}, wantHolds: []string{"hold_tenant_wide_destructive"}},
		{note: "listed action", mutate: func(p *gated.Proposal) { p.Action = "dns_delete_zone" }, wantHolds: []string{"hold_listed_action"}},
		{note: "listed action denied by a hard rule", mutate: func(p *gated.Proposal) {
			p.Action = "dns_delete_zone"
			p.Flags.SkipReview = true
		}, wantHolds: []string{"hold_listed_action"}, wantDeny: "no_skip_review"},
	}
	for _, ev := range []struct {
		name string
		e    *Evaluator
	}{{"planned", planned}, {"topdown", topdown}} {
		for _, tc := range tests {
			t.Run(ev.name+"/"+tc.note, func(t *testing.T) {
				p := writeProposal()
				tc.mutate(p)
				d, err := ev.e.Evaluate(t.Context(), engine.PolicyInput{Proposal: p, Persona: reviewerPersona, Now: time.Now()})
				if err != nil {
					t.Fatal(err)
				}
				var rules []string
				for _, h := range d.Holds {
					rules = append(rules, h.Rule)
					if h.Deadline != 15*time.Minute || h.Why == "" {
						t.Errorf("hold %+v, want deadline 15m and a why", h)
					}
				}
				if len(rules) != len(tc.wantHolds) || (len(rules) > 0 && rules[0] != tc.wantHolds[0]) {
					t.Errorf("holds %v, want %v", rules, tc.wantHolds)
				}
				denied := false
				for _, deny := range d.Denies {
					denied = denied || deny.Rule == tc.wantDeny
				}
				if tc.wantDeny != "" && !denied {
					t.Errorf("denies %+v, want %s", d.Denies, tc.wantDeny)
				}
				// The gate's reading: a deny rejects, a hold without one
				// blocks awaiting an operator, never approves.
				s, done := engine.PolicyOutcome(p, d, engine.Routed{Name: "reviewer", Persona: reviewerPersona})
				switch {
				case tc.wantDeny != "":
					if !done || s.Outcome != gated.OutcomeRejected {
						t.Errorf("outcome %s (settled %v), want rejected", s.Outcome, done)
					}
				case len(tc.wantHolds) > 0:
					if !done || s.Outcome != gated.OutcomeBlocked || s.Stage != gated.StagePolicy {
						t.Errorf("outcome %s at %s (settled %v), want blocked at policy", s.Outcome, s.Stage, done)
					}
				}
			})
		}
	}
}

func TestMalformedHoldsAreErrors(t *testing.T) {
	for _, tc := range []struct {
		note string
		hold any
		kind gated.Kind
	}{
		{note: "not a list", hold: "yes"},
		{note: "entry not an object", hold: []any{"x"}},
		{note: "no rule", hold: []any{map[string]any{"why": "x"}}},
		{note: "unknown key", hold: []any{map[string]any{"rule": "r", "approve": true}}},
		{note: "deadline not a duration", hold: []any{map[string]any{"rule": "r", "deadline": "soon"}}},
		{note: "deadline negative", hold: []any{map[string]any{"rule": "r", "deadline": "-1m"}}},
		{note: "deadline too long", hold: []any{map[string]any{"rule": "r", "deadline": "9000h"}}},
		{note: "hold on a run", hold: []any{map[string]any{"rule": "r"}}, kind: gated.KindRun},
	} {
		t.Run(tc.note, func(t *testing.T) {
			obj := map[string]any{"deny": []any{}, "review": map[string]any{"required": false}, "hold": tc.hold}
			kind := gated.KindAction
			if tc.kind != "" {
				kind = tc.kind
				obj["review"] = map[string]any{"required": true}
				obj["run"] = map[string]any{"reviewed": true}
			}
			if _, err := parseDecision(astOf(t, obj), kind); err == nil {
				t.Fatalf("hold %v accepted", tc.hold)
			}
		})
	}
}

// FuzzParseHolds: whatever decision.hold a policy returns is read as
// holds that each name a rule and a deadline within bounds, or refused
// with an error; never a panic.
func FuzzParseHolds(f *testing.F) {
	f.Add(`[{"rule": "hold_listed_action", "why": "x", "deadline": "15m"}]`)
	f.Add(`[{"rule": "r"}, {"rule": "s", "deadline": ""}]`)
	f.Add(`[{"rule": "", "why": 1}]`)
	f.Add(`[{"rule": "r", "deadline": "720h0m1s"}]`)
	f.Add(`null`)
	f.Add(`{"rule": "r"}`)
	f.Fuzz(func(t *testing.T, doc string) {
		var v any
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			return
		}
		val, err := ast.InterfaceToValue(v)
		if err != nil {
			return
		}
		holds, err := parseHolds(ast.NewTerm(val))
		if err != nil {
			return
		}
		for _, h := range holds {
			if h.Rule == "" || h.Deadline < 0 || h.Deadline > maxHoldDeadline {
				t.Fatalf("accepted hold %+v from %s", h, doc)
			}
		}
	})
}
