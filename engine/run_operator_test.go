package engine_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

func TestRunManualCriteriaHoldForAnOperator(t *testing.T) {
	conf := runPolicyConf{run: reviewedRun}
	conf.run.Manual = []string{"signoff"}
	manual := []any{
		map[string]any{"id": "design", "description": "minimal", "required": true, "kind": "ai_review"},
		map[string]any{"id": "signoff", "description": "release manager signs off", "required": true, "kind": "manual"},
	}
	decide := func(t *testing.T, round int) (*harness, *gated.Verdict) {
		h := runHarness(t, conf)
		v, _ := h.mustDecide(t, runSubject, runProposal(t, "p1", round, map[string]any{"criteria": manual}), "")
		if v.Outcome != gated.OutcomeBlocked || v.Approved || !slices.Equal(v.Run.AwaitingOperator, []string{"signoff"}) {
			t.Fatalf("verdict %s awaiting %q: %s", v.Outcome, v.Run.AwaitingOperator, v.Reason)
		}
		if !strings.Contains(v.Reason, "operator decision on manual criteria signoff") {
			t.Errorf("reason %q", v.Reason)
		}
		if rec, _ := h.store.RunRecord(t.Context(), "acme", "r-1"); rec != nil {
			t.Errorf("a held verdict was recorded: %+v", rec)
		}
		return h, v
	}
	decision := func(v *gated.Verdict, pass bool) engine.OperatorDecision {
		return engine.OperatorDecision{Tenant: "acme", ProposalID: "p1", ProposalSHA256: v.ProposalSHA256, Operator: "alice", Key: "UKEY",
			Criteria: []engine.OperatorFinding{{ID: "signoff", Pass: pass, Reason: "release notes missing"}}}
	}

	t.Run("pass approves", func(t *testing.T) {
		h, held := decide(t, 1)
		tr := h.stream.trail()
		v, err := h.eng.Resolve(t.Context(), decision(held, true), tr)
		if err != nil {
			t.Fatal(err)
		}
		if v.Outcome != gated.OutcomeApproved || !v.Approved || v.Stage != gated.StageOperator || len(v.Run.AwaitingOperator) != 0 {
			t.Fatalf("verdict %s at %s: %s", v.Outcome, v.Stage, v.Reason)
		}
		if got, want := tr.names(), []string{gated.EventOperatorDecided, gated.EventVerdict}; !slices.Equal(got, want) {
			t.Errorf("events %v, want %v", got, want)
		}
		checkDecidedOperator(t, tr.all(), "alice")
		if v.AuditSeq == 0 || v.AuditSeq == held.AuditSeq {
			t.Errorf("audit seq %d (held %d)", v.AuditSeq, held.AuditSeq)
		}
		if stored := h.store.stored(t, "acme", "p1"); stored.Outcome != gated.OutcomeApproved {
			t.Errorf("store holds %s", stored.Outcome)
		}
		last := v.Run.Criteria[len(v.Run.Criteria)-1]
		if last.ID != "signoff" || last.JudgedBy != "operator:alice" || !last.Pass {
			t.Errorf("operator's criterion %+v", last)
		}
		if rec, _ := h.store.RunRecord(t.Context(), "acme", "r-1"); rec == nil || rec.Closed != gated.RunAccepted {
			t.Errorf("run record %+v, want accepted", rec)
		}
		_, err = h.eng.Resolve(t.Context(), decision(held, false), h.stream.trail())
		if !errors.Is(err, gated.ErrNotAwaiting) {
			t.Errorf("second decision: %v, want ErrNotAwaiting", err)
		}
	})
	t.Run("fail continues", func(t *testing.T) {
		h, held := decide(t, 2)
		v, err := h.eng.Resolve(t.Context(), decision(held, false), h.stream.trail())
		if err != nil {
			t.Fatal(err)
		}
		if v.Outcome != gated.OutcomeRejected || v.Run.Next != gated.NextContinuation {
			t.Fatalf("verdict %s next %q: %s", v.Outcome, v.Run.Next, v.Reason)
		}
		if len(v.Run.MissingWork) != 1 || !strings.Contains(v.Run.MissingWork[0], "release notes missing") {
			t.Errorf("missing work %q", v.Run.MissingWork)
		}
		if len(v.Run.Findings) == 0 || v.Run.Findings[0].ID != "r2-f1" || v.Run.Findings[0].Criterion != "signoff" {
			t.Errorf("findings %+v", v.Run.Findings)
		}
		if _, _, _, ok := gated.FollowUp(v); !ok {
			t.Error("no continuation for an operator's rejection")
		}
	})
	t.Run("fail in the last round escalates", func(t *testing.T) {
		h, held := decide(t, 5)
		v, err := h.eng.Resolve(t.Context(), decision(held, false), h.stream.trail())
		if err != nil || v.Run.Next != gated.NextEscalation {
			t.Fatalf("verdict %+v, %v", v, err)
		}
	})
	t.Run("mismatches are refused", func(t *testing.T) {
		h, held := decide(t, 1)
		for _, tc := range []struct {
			note string
			edit func(*engine.OperatorDecision)
			want error
		}{
			{"another digest", func(d *engine.OperatorDecision) { d.ProposalSHA256 = strings.Repeat("0", 64) }, gated.ErrDecisionMismatch},
			{"missing criterion", func(d *engine.OperatorDecision) { d.Criteria = nil }, gated.ErrDecisionMismatch},
			{"extra criterion", func(d *engine.OperatorDecision) {
				d.Criteria = append(d.Criteria, engine.OperatorFinding{ID: "design", Pass: true})
			}, gated.ErrDecisionMismatch},
			{"criterion twice", func(d *engine.OperatorDecision) { d.Criteria = append(d.Criteria, d.Criteria[0]) }, gated.ErrDecisionMismatch},
			{"no operator", func(d *engine.OperatorDecision) { d.Operator = " " }, gated.ErrDecisionMismatch},
			{"unknown proposal", func(d *engine.OperatorDecision) { d.ProposalID = "p9" }, gated.ErrNotFound},
		} {
			d := decision(held, true)
			tc.edit(&d)
			tr := h.stream.trail()
			if _, err := h.eng.Resolve(t.Context(), d, tr); !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want %v", tc.note, err, tc.want)
			}
			if len(tr.names()) != 0 {
				t.Errorf("%s: a refused decision recorded %v", tc.note, tr.names())
			}
		}
		if stored := h.store.stored(t, "acme", "p1"); stored.Outcome != gated.OutcomeBlocked {
			t.Errorf("after refusals the store holds %s", stored.Outcome)
		}
	})
	t.Run("a held verdict without a digest is refused", func(t *testing.T) {
		// gated stores every verdict with its proposal's digest: one
		// without it names no proposal, and an operator decision without a
		// digest must not match it.
		h, held := decide(t, 1)
		held.ProposalSHA256 = ""
		raw, err := json.Marshal(held)
		if err != nil {
			t.Fatal(err)
		}
		h.store.mu.Lock()
		h.store.m["acme.p1"] = raw
		h.store.mu.Unlock()
		d := decision(held, true)
		if _, err := h.eng.Resolve(t.Context(), d, h.stream.trail()); !errors.Is(err, gated.ErrDecisionMismatch) {
			t.Errorf("Resolve: %v, want ErrDecisionMismatch", err)
		}
	})
	t.Run("a verdict not held is refused", func(t *testing.T) {
		h := runHarness(t, runPolicyConf{run: reviewedRun})
		v, _ := h.mustDecide(t, runSubject, runProposal(t, "p1", 1, nil), "")
		_, err := h.eng.Resolve(t.Context(), decision(v, true), h.stream.trail())
		if !errors.Is(err, gated.ErrNotAwaiting) {
			t.Errorf("Resolve on an approval: %v, want ErrNotAwaiting", err)
		}
	})
}

// TestRunFindingsCoverEveryMissingItem: each thing a rejection asks for is
// a finding once: a failed criterion by its id, a required criterion the
// reviewer never judged by the missing-work item that says so, and the
// reviewer's own items whatever words they start with.
