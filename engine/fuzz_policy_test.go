package engine_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// FuzzDecideWithPolicy feeds arbitrary proposal bytes through validation,
// the real default policy and an engine whose reviewer approves whatever
// it is asked: the worst reviewer there is. The engine must not panic,
// must answer every delivery, and must never approve a proposal that sets
// flags.skip_review or flags.force_approve, whatever the reviewer says.
func FuzzDecideWithPolicy(f *testing.F) {
	for _, name := range proposalFiles(f) {
		f.Add(readProposal(f, name))
	}
	examples, _ := filepath.Glob("../examples/proposals/*.json")
	for _, path := range examples {
		if data, err := os.ReadFile(path); err == nil {
			f.Add(data)
		}
	}
	f.Add(proposalJSON(f, map[string]any{"flags": map[string]any{"skip_review": true}}))
	f.Add(proposalJSON(f, map[string]any{"flags": map[string]any{"force_approve": true, "user_confirmed": true}}))
	f.Add(proposalJSON(f, map[string]any{"class": "read", "flags": map[string]any{"skip_review": true}}))
	f.Add(proposalJSON(f, map[string]any{"action": "db_vacuum_table", "flags": map[string]any{"force_approve_no_sop": true, "user_confirmed": true}}))
	manual := []any{map[string]any{"id": "signoff", "description": "a human agrees", "required": true, "kind": "manual"}}
	f.Add(runProposal(f, "run-1", 1, nil))
	f.Add(runProposal(f, "run-2", 2, map[string]any{"criteria": manual}))
	f.Add(runProposal(f, "run-3", 1, map[string]any{"flags": map[string]any{"skip_review": true}}))

	f.Fuzz(func(t *testing.T, data []byte) {
		h := newHarness(t, func(h *harness) {
			h.cfg.Personas = personaSet{"reviewer": reviewerPersona(), "run-reviewer": runPersona()}
			h.reviewer.answer = approveEverything
		})
		subject := wire.ProposalSubjectPrefix + "acme.host_restart_service"
		var head struct {
			Tenant string `json:"tenant"`
			Action string `json:"action"`
		}
		if json.Unmarshal(data, &head) == nil && gated.ValidTenant(head.Tenant) && gated.ValidAction(head.Action) {
			subject = wire.ProposalSubjectPrefix + head.Tenant + "." + head.Action
		}
		v, err := h.decideOn(t.Context(), h.stream.trail(), subject, data, "")
		if err != nil {
			t.Fatalf("Decide: %v", err)
		}
		if v == nil {
			t.Fatal("no verdict")
		}
		if v.Approved != (v.Outcome == gated.OutcomeApproved) {
			t.Fatalf("approved %v with outcome %s", v.Approved, v.Outcome)
		}
		if !v.Approved {
			return
		}
		tenant, action, _ := engine.ParseProposalSubject(subject)
		p, err := gated.DecodeProposal(data, tenant, action, gated.Limits{})
		if err != nil {
			t.Fatalf("approved a proposal that does not decode: %v", err)
		}
		if p.Flags.SkipReview || p.Flags.ForceApprove {
			t.Fatalf("approved a proposal with skip_review=%v force_approve=%v at stage %s: %s",
				p.Flags.SkipReview, p.Flags.ForceApprove, v.Stage, v.Reason)
		}
		if p.Kind != gated.KindRun || v.Stage == gated.StagePolicy {
			return // a run the review policy waived is approved as it is
		}
		for _, c := range p.Criteria {
			if c.Required && c.Kind == gated.CriterionManual {
				t.Fatalf("approved run %s at stage %s with manual criterion %s undecided: %s", p.ID, v.Stage, c.ID, v.Reason)
			}
		}
		for _, c := range v.Run.Criteria {
			if c.Required && !c.Pass {
				t.Fatalf("approved run %s with required criterion %s failed (%s)", p.ID, c.ID, c.JudgedBy)
			}
		}
	})
}

// approveEverything is the worst reviewer there is: it approves, passes
// every gate the persona requires and every criterion it is asked to
// judge.
func approveEverything(_ context.Context, req engine.ReviewRequest) (engine.ReviewResult, error) {
	res := engine.ReviewResult{Plugin: "sop", Text: "Decision: approve\nNotes: fine.", Decision: gated.DecisionApprove}
	for _, g := range req.Persona.RequiredGates {
		res.Gates = append(res.Gates, gated.GateResult{Name: g, Passed: true})
	}
	if req.Run != nil {
		for _, id := range req.Run.AIReview {
			res.Criteria = append(res.Criteria, gated.CriterionEval{ID: id, Pass: true, Confidence: 1})
		}
	}
	return res, nil
}
