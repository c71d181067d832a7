package engine_test

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

const runSubject = "gated.proposals.acme.code_change"

// runPersona reviews runs; its gates are those of the built-in one.
func runPersona() *engine.Persona {
	return &engine.Persona{
		Name: "run-reviewer", PermissionMode: "read-only", Plugin: "sop",
		RequiredGates: []string{"criteria_met", "prior_findings_closed"},
	}
}

// runPolicy is a policy for run proposals whose run section a test sets;
// it reviews with persona run-reviewer unless the section says otherwise,
// and denies criterion_failed for every failed required criterion.
type runPolicyConf struct {
	run     gated.RunPolicy
	blocked string
	other   []gated.Deny
	quorum  int
	noRun   bool
	// inputs are the run records the policy saw, one per evaluation.
	inputs *[]*gated.RunRecord
}

func (c runPolicyConf) policy() policyFunc {
	return policyFunc{revision: "rev-run", eval: func(in engine.PolicyInput) engine.PolicyDecision {
		if c.inputs != nil {
			*c.inputs = append(*c.inputs, in.RunRecord)
		}
		rp := c.run
		rp.Criteria = slices.Clone(rp.Criteria)
		d := engine.PolicyDecision{Run: &rp, Denies: slices.Clone(c.other)}
		if c.noRun {
			d.Run = nil
		}
		for _, cr := range rp.Criteria {
			if cr.Required && !cr.Pass {
				d.Denies = append(d.Denies, gated.Deny{Rule: "criterion_failed", Message: cr.ID + " failed"})
			}
		}
		if !rp.Reviewed {
			d.Review = gated.Route{Why: rp.Why}
			return d
		}
		d.Review = gated.Route{Required: true, Persona: "run-reviewer", Quorum: max(c.quorum, 1), Why: "runs are reviewed", Blocked: c.blocked}
		return d
	}}
}

func runHarness(t *testing.T, conf runPolicyConf, opts ...func(*harness)) *harness {
	t.Helper()
	return newHarness(t, append([]func(*harness){func(h *harness) {
		h.cfg.Policy = conf.policy()
		h.cfg.Personas = personaSet{"run-reviewer": runPersona(), "reviewer": reviewerPersona()}
		h.reviewer.answer = answer(runApproval(), nil)
	}}, opts...)...)
}

// runProposal is a completed run r-1, round 1, by worker w-1, with a
// required ai_review criterion "design" and the fields in override.
func runProposal(t testing.TB, id string, round int, override map[string]any) []byte {
	t.Helper()
	m := map[string]any{
		"v": 1, "id": id, "tenant": "acme", "kind": "run", "action": "code_change",
		"class": "write", "blast_radius": "single_device",
		"requested_by": map[string]any{"agent": "orchestrator"},
		"run": map[string]any{
			"run_id": "r-1", "task_id": "t-1", "status": "completed", "summary": "fixed the flaky test",
			"diff": "--- a/x_test.go\n+++ b/x_test.go\n", "test_output": "ok", "round": round, "worker": "w-1",
		},
		"criteria": []any{
			map[string]any{"id": "tests", "description": "tests pass", "required": true, "kind": "command_result",
				"evidence": map[string]any{"command": "go test ./...", "exit_code": 0}},
			map[string]any{"id": "design", "description": "the fix is minimal", "required": true, "kind": "ai_review"},
			map[string]any{"id": "style", "description": "idiomatic", "required": false, "kind": "ai_review"},
		},
	}
	for k, v := range override {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func runApproval() engine.ReviewResult {
	return engine.ReviewResult{
		Plugin: "sop", PluginVersion: "1.0.0",
		Text:     "Decision: approve\nGates:\n- criteria_met: pass\n- prior_findings_closed: pass\nNotes: done.",
		Decision: gated.DecisionApprove,
		Gates:    []gated.GateResult{{Name: "criteria_met", Passed: true}, {Name: "prior_findings_closed", Passed: true}},
		Criteria: []gated.CriterionEval{{ID: "design", Pass: true, Confidence: 0.9, Reason: "one line changed"}},
	}
}

func runRejection(missing ...string) engine.ReviewResult {
	line := 12
	return engine.ReviewResult{
		Plugin: "sop", PluginVersion: "1.0.0",
		Text:        "Decision: reject\nGates:\n- criteria_met: fail\nNotes: the fix hides the race.",
		Decision:    gated.DecisionReject,
		Gates:       []gated.GateResult{{Name: "criteria_met", Passed: false}},
		Criteria:    []gated.CriterionEval{{ID: "design", Pass: false, Confidence: 0.8, Reason: "sleeps instead of syncing"}},
		MissingWork: missing,
		Comments: []gated.Comment{
			{Path: "x_test.go", Line: &line, Body: "use a channel, not a sleep"},
			{Path: "README.md", Body: "document the flag"},
		},
		NextRoundGuidance: "synchronise on the done channel",
	}
}

var reviewedRun = gated.RunPolicy{
	Reviewed: true, Why: "always", ReviewPolicy: "always", MaxRounds: 5, Continuable: true,
	Criteria: []gated.CriterionEval{{ID: "tests", Pass: true, Reason: "exit 0"}},
}

func TestRunNotReviewedIsApprovedAtPolicy(t *testing.T) {
	h := runHarness(t, runPolicyConf{run: gated.RunPolicy{Reviewed: false, Why: "run review policy on_success does not review failed runs", MaxRounds: 5}})
	v, _ := h.mustDecide(t, runSubject, runProposal(t, "p1", 1, nil), "")
	if v.Outcome != gated.OutcomeApproved || v.Stage != gated.StagePolicy || v.Reason != "run review policy on_success does not review failed runs" {
		t.Fatalf("verdict %s at %s: %s", v.Outcome, v.Stage, v.Reason)
	}
	if v.Run == nil || v.Run.RunID != "r-1" || v.Run.Round != 1 || v.Run.Next != "" || v.Kind != gated.KindRun {
		t.Errorf("run section %+v", v.Run)
	}
	if h.reviewer.calls() != 0 {
		t.Errorf("reviewer called %d times", h.reviewer.calls())
	}
	if v.TargetKey != "" {
		t.Errorf("a run verdict has target key %q", v.TargetKey)
	}
}

func TestRunApprovedByReviewer(t *testing.T) {
	h := runHarness(t, runPolicyConf{run: reviewedRun})
	v, _ := h.mustDecide(t, runSubject, runProposal(t, "p1", 1, nil), "")
	if v.Outcome != gated.OutcomeApproved || v.Stage != gated.StageReview {
		t.Fatalf("verdict %s at %s: %s", v.Outcome, v.Stage, v.Reason)
	}
	got := map[string]string{}
	for _, c := range v.Run.Criteria {
		got[c.ID] = c.JudgedBy
	}
	if got["tests"] != gated.JudgedByPolicy || got["design"] != "reviewer:run-reviewer" {
		t.Errorf("criteria judges %v", got)
	}
	req := h.reviewer.requests()[0]
	if req.Run == nil || req.Run.Round != 1 || req.Run.MaxRounds != 5 || !slices.Equal(req.Run.AIReview, []string{"design", "style"}) {
		t.Errorf("run context %+v", req.Run)
	}
	rec, _ := h.store.RunRecord(t.Context(), "acme", "r-1")
	if rec == nil || rec.Closed != gated.RunAccepted || len(rec.Rounds) != 1 {
		t.Errorf("run record %+v, want accepted", rec)
	}
	if _, _, _, ok := gated.FollowUp(v); ok {
		t.Error("an approval sends a follow-up")
	}
}

func TestRunRejectedByReviewerContinues(t *testing.T) {
	h := runHarness(t, runPolicyConf{run: reviewedRun})
	h.reviewer.answer = answer(runRejection("replace the sleep with a channel"), nil)
	v, tr := h.mustDecide(t, runSubject, runProposal(t, "p1", 2, nil), "")
	if v.Outcome != gated.OutcomeRejected || v.Stage != gated.StageReview {
		t.Fatalf("verdict %s at %s: %s", v.Outcome, v.Stage, v.Reason)
	}
	rv := v.Run
	if rv.Next != gated.NextContinuation || rv.FollowUpSubject != "gated.continuations.acme.r-1" {
		t.Fatalf("next %q on %q", rv.Next, rv.FollowUpSubject)
	}
	if !slices.Equal(rv.MissingWork, []string{"replace the sleep with a channel"}) || rv.NextRoundGuidance != "synchronise on the done channel" {
		t.Errorf("missing work %q, guidance %q", rv.MissingWork, rv.NextRoundGuidance)
	}
	// design (failed, required), the missing-work item, two comments.
	if len(rv.Findings) != 4 {
		t.Fatalf("findings %+v", rv.Findings)
	}
	if f := rv.Findings[0]; f.ID != "r2-f1" || f.Criterion != "design" || !f.Open() {
		t.Errorf("first finding %+v", f)
	}
	if f := rv.Findings[2]; f.Path != "x_test.go" || f.Line == nil || *f.Line != 12 {
		t.Errorf("comment finding %+v", f)
	}
	if f := rv.Findings[3]; f.Path != "README.md" || f.Line != nil {
		t.Errorf("file comment finding %+v, want a null line", f)
	}

	subject, msgID, body, ok := gated.FollowUp(v)
	if !ok || subject != "gated.continuations.acme.r-1" || msgID != "acme.r-1.r2.continuation" {
		t.Fatalf("follow-up %v %q %q", ok, subject, msgID)
	}
	var c gated.Continuation
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatal(err)
	}
	if c.Round != 3 || c.RunID != "r-1" || c.TaskID != "t-1" || c.Worker != "w-1" || c.Review.ProposalID != "p1" ||
		c.Review.AuditSeq != v.AuditSeq || c.Review.Verdict != "gated.verdicts.acme.p1" || len(c.Findings) != 4 || c.MaxRounds != 5 {
		t.Errorf("continuation %+v", c)
	}
	if len(c.Criteria) != 1 || c.Criteria[0].ID != "design" {
		t.Errorf("continuation carries failed criteria %+v, want design", c.Criteria)
	}
	_, _, again, _ := gated.FollowUp(v)
	if string(again) != string(body) {
		t.Error("FollowUp is not deterministic: a replay would publish other bytes")
	}
	// The verdict event records the follow-up.
	var sealed gated.Verdict
	if err := json.Unmarshal(tr.all()[len(tr.all())-1].Data, &sealed); err != nil || sealed.Run == nil || sealed.Run.Next != gated.NextContinuation {
		t.Errorf("sealed verdict event %+v (%v)", sealed.Run, err)
	}
	rec, _ := h.store.RunRecord(t.Context(), "acme", "r-1")
	if r := rec.Round(2); r == nil || r.ProposalID != "p1" || r.Next != gated.NextContinuation || len(r.Findings) != 4 || rec.Closed != "" {
		t.Errorf("run record %+v", rec)
	}
}

func TestRunRejectedInLastRoundEscalates(t *testing.T) {
	h := runHarness(t, runPolicyConf{run: reviewedRun})
	h.reviewer.answer = answer(runRejection("replace the sleep"), nil)
	v, _ := h.mustDecide(t, runSubject, runProposal(t, "p5", 5, nil), "")
	if v.Run.Next != gated.NextEscalation || v.Run.FollowUpSubject != "gated.escalations.acme" {
		t.Fatalf("next %q on %q", v.Run.Next, v.Run.FollowUpSubject)
	}
	subject, msgID, body, ok := gated.FollowUp(v)
	var e gated.Escalation
	if !ok || subject != "gated.escalations.acme" || msgID != "acme.r-1.escalation" || json.Unmarshal(body, &e) != nil {
		t.Fatalf("follow-up %v %q %q", ok, subject, msgID)
	}
	if e.Rounds != 5 || e.MaxRounds != 5 || len(e.MissingWork) != 1 || !strings.Contains(e.Reason, "round 5 of 5") {
		t.Errorf("escalation %+v", e)
	}
	rec, _ := h.store.RunRecord(t.Context(), "acme", "r-1")
	if rec.Closed != gated.RunEscalated {
		t.Errorf("run record closed %q, want escalated", rec.Closed)
	}
}

func TestRunPolicyRejection(t *testing.T) {
	failed := reviewedRun
	failed.Criteria = []gated.CriterionEval{{ID: "tests", Pass: false, Required: true, Reason: `"go test ./..." exited 1, expected 0`}}
	failed.MissingWork = []string{`criterion tests (command_result): "go test ./..." exited 1, expected 0`}

	t.Run("failed criterion continues", func(t *testing.T) {
		h := runHarness(t, runPolicyConf{run: failed})
		v, _ := h.mustDecide(t, runSubject, runProposal(t, "p1", 1, nil), "")
		if v.Outcome != gated.OutcomeRejected || v.Stage != gated.StagePolicy || v.Run.Next != gated.NextContinuation {
			t.Fatalf("verdict %s at %s, next %q: %s", v.Outcome, v.Stage, v.Run.Next, v.Reason)
		}
		if len(v.Run.Findings) != 1 || v.Run.Findings[0].Criterion != "tests" || !slices.Equal(v.Run.MissingWork, failed.MissingWork) {
			t.Errorf("findings %+v, missing work %q", v.Run.Findings, v.Run.MissingWork)
		}
		if h.reviewer.calls() != 0 {
			t.Error("a run the policy rejected was reviewed")
		}
	})
	t.Run("other denies send nothing", func(t *testing.T) {
		closed := failed
		closed.Continuable = false
		h := runHarness(t, runPolicyConf{run: closed, other: []gated.Deny{{Rule: "run_closed", Message: "run r-1 was accepted"}}})
		v, _ := h.mustDecide(t, runSubject, runProposal(t, "p1", 1, nil), "")
		if v.Outcome != gated.OutcomeRejected || v.Run.Next != "" {
			t.Fatalf("verdict %s, next %q", v.Outcome, v.Run.Next)
		}
		if rec, _ := h.store.RunRecord(t.Context(), "acme", "r-1"); rec != nil {
			t.Errorf("a rejection without follow-up was recorded: %+v", rec)
		}
	})
	t.Run("no run section is an error", func(t *testing.T) {
		h := runHarness(t, runPolicyConf{run: reviewedRun, noRun: true})
		v, _ := h.mustDecide(t, runSubject, runProposal(t, "p1", 1, nil), "")
		if v.Outcome != gated.OutcomeError || !strings.Contains(v.Reason, "no run section") {
			t.Fatalf("verdict %s: %s", v.Outcome, v.Reason)
		}
	})
}

func TestRunBlockedWhenOnlyTheWorkerCouldReview(t *testing.T) {
	h := runHarness(t, runPolicyConf{run: reviewedRun, blocked: `no reviewer other than the run's worker "w-1" can be routed`})
	v, _ := h.mustDecide(t, runSubject, runProposal(t, "p1", 1, nil), "")
	if v.Outcome != gated.OutcomeBlocked || v.Stage != gated.StageReview || !strings.Contains(v.Reason, "worker") {
		t.Fatalf("verdict %s at %s: %s", v.Outcome, v.Stage, v.Reason)
	}
	if h.reviewer.calls() != 0 || v.Run.Next != "" {
		t.Errorf("reviewer called %d times, next %q", h.reviewer.calls(), v.Run.Next)
	}
}

// TestRunReviewerOutputRules: what a reviewer says about a run is held to
// the run rules, and every breach ends short of an approval with a reason.
func TestRunReviewerOutputRules(t *testing.T) {
	for _, tc := range []struct {
		note    string
		edit    func(*engine.ReviewResult)
		want    gated.Outcome
		reason  string
		next    string
		warning string
	}{
		{note: "required ai criterion not judged", edit: func(r *engine.ReviewResult) { r.Criteria = nil },
			want: gated.OutcomeRejected, reason: "without passing required criteria design", next: gated.NextContinuation},
		{note: "required ai criterion failed in an approval", edit: func(r *engine.ReviewResult) { r.Criteria[0].Pass = false },
			want: gated.OutcomeRejected, reason: "without passing required criteria design", next: gated.NextContinuation},
		{note: "approval with missing work", edit: func(r *engine.ReviewResult) { r.MissingWork = []string{"add a test"} },
			want: gated.OutcomeRejected, reason: "approval requires none", next: gated.NextContinuation},
		{note: "confidence above one", edit: func(r *engine.ReviewResult) { r.Criteria[0].Confidence = 1.5 },
			want: gated.OutcomeError, reason: "outside [0, 1]"},
		{note: "confidence NaN", edit: func(r *engine.ReviewResult) { r.Criteria[0].Confidence = math.NaN() },
			want: gated.OutcomeError, reason: "outside [0, 1]"},
		{note: "unknown criterion", edit: func(r *engine.ReviewResult) {
			r.Criteria = append(r.Criteria, gated.CriterionEval{ID: "speed", Pass: true})
		}, want: gated.OutcomeError, reason: `criterion "speed" is not one of the proposal's`},
		{note: "criterion judged twice", edit: func(r *engine.ReviewResult) { r.Criteria = append(r.Criteria, r.Criteria[0]) },
			want: gated.OutcomeError, reason: "judged twice"},
		{note: "a deterministic criterion is the policy's", edit: func(r *engine.ReviewResult) {
			r.Criteria = append(r.Criteria, gated.CriterionEval{ID: "tests", Pass: false})
		}, want: gated.OutcomeApproved, warning: `ignored the reviewer's judgement of command_result criterion "tests"`},
		{note: "warnings never change the verdict", edit: func(r *engine.ReviewResult) { r.Warnings = []string{"the diff touches vendored code"} },
			want: gated.OutcomeApproved, warning: "persona run-reviewer: the diff touches vendored code"},
		{note: "rejection without missing work or guidance", edit: func(r *engine.ReviewResult) {
			*r = runRejection()
			r.NextRoundGuidance, r.Comments = "", nil
		}, want: gated.OutcomeError, reason: "without missing work or guidance"},
		{note: "rejection with guidance only", edit: func(r *engine.ReviewResult) {
			*r = runRejection()
			r.Comments = nil
		}, want: gated.OutcomeRejected, next: gated.NextContinuation},
		{note: "garbled text", edit: func(r *engine.ReviewResult) { r.Text = "looks fine to me" },
			want: gated.OutcomeError, reason: "without missing work or guidance"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			h := runHarness(t, runPolicyConf{run: reviewedRun})
			h.reviewer.answer = approvalWithRun(tc.edit)
			v, _ := h.mustDecide(t, runSubject, runProposal(t, "p1", 1, nil), "")
			if v.Outcome != tc.want || !strings.Contains(v.Reason, tc.reason) {
				t.Fatalf("verdict %s: %s\nwant %s containing %q", v.Outcome, v.Reason, tc.want, tc.reason)
			}
			if v.Approved != (tc.want == gated.OutcomeApproved) {
				t.Errorf("approved = %v", v.Approved)
			}
			if v.Run.Next != tc.next {
				t.Errorf("next %q, want %q", v.Run.Next, tc.next)
			}
			if tc.warning != "" && !slices.ContainsFunc(v.Run.Warnings, func(w string) bool { return strings.Contains(w, tc.warning) }) {
				t.Errorf("warnings %q, want one containing %q", v.Run.Warnings, tc.warning)
			}
			if len(v.Reviews) != 1 {
				t.Errorf("%d reviews listed, want the one that answered", len(v.Reviews))
			}
		})
	}
}

func approvalWithRun(edit func(*engine.ReviewResult)) answerFunc {
	res := runApproval()
	edit(&res)
	return answer(res, nil)
}

func TestRunReviewerOutputIsBounded(t *testing.T) {
	conf := runPolicyConf{run: reviewedRun}
	conf.run.Limits = gated.RunLimits{MaxItems: 3, MaxItemBytes: 16, MaxGuidanceBytes: 32}
	h := runHarness(t, conf)
	res := runRejection()
	for i := range 10 {
		res.MissingWork = append(res.MissingWork, fmt.Sprintf("item %d %s", i, strings.Repeat("é", 20)))
	}
	res.NextRoundGuidance = strings.Repeat("g", 100)
	h.reviewer.answer = answer(res, nil)
	v, _ := h.mustDecide(t, runSubject, runProposal(t, "p1", 1, nil), "")
	if v.Outcome != gated.OutcomeRejected || v.Run.Next != gated.NextContinuation {
		t.Fatalf("verdict %s next %q: %s", v.Outcome, v.Run.Next, v.Reason)
	}
	if len(v.Run.MissingWork) != 3 {
		t.Errorf("%d missing-work items, want 3", len(v.Run.MissingWork))
	}
	for _, m := range v.Run.MissingWork {
		if len(m) > 16 || !strings.HasSuffix(m, "…") {
			t.Errorf("item %q not cut to 16 bytes", m)
		}
	}
	if len(v.Run.NextRoundGuidance) > 32 {
		t.Errorf("guidance %d bytes", len(v.Run.NextRoundGuidance))
	}
	var cuts int
	for _, w := range v.Run.Warnings {
		if strings.Contains(w, "max_") {
			cuts++
		}
	}
	if cuts < 3 {
		t.Errorf("warnings %q, want the cuts reported", v.Run.Warnings)
	}
}

// TestRunPriorFindingsComeFromTheRecord: the reviewer of round 2 learns
// round 1's findings from gated's record, with the worker's status on each;
// a finding the worker leaves out is open.
func TestRunPriorFindingsComeFromTheRecord(t *testing.T) {
	var seen []*gated.RunRecord
	h := runHarness(t, runPolicyConf{run: reviewedRun, inputs: &seen})
	h.reviewer.answer = answer(runRejection("replace the sleep"), nil)
	first, _ := h.mustDecide(t, runSubject, runProposal(t, "p1", 1, nil), "")
	if len(first.Run.Findings) != 4 {
		t.Fatalf("round 1 findings %+v", first.Run.Findings)
	}
	h.reviewer.answer = answer(runApproval(), nil)
	prior := []any{map[string]any{"proposal_id": "p1", "round": 1, "findings": []any{
		map[string]any{"id": "r1-f1", "body": "x", "status": "resolved", "resolution": "synced on a channel"},
		map[string]any{"id": "r1-f9", "body": "made up", "status": "resolved"},
	}}}
	run := map[string]any{"run_id": "r-1", "status": "completed", "round": 2, "worker": "w-1", "prior_reviews": prior}
	h.mustDecide(t, runSubject, runProposal(t, "p2", 2, map[string]any{"run": run}), "")

	// Each decision evaluates twice: as the default persona, then as the
	// persona the policy routes to.
	if len(seen) != 4 || seen[0] != nil || seen[3] == nil || seen[3].Round(1) == nil {
		t.Fatalf("run records the policy saw: %+v", seen)
	}
	reqs := h.reviewer.requests()
	got := reqs[len(reqs)-1].Run.PriorFindings
	if len(got) != 4 {
		t.Fatalf("prior findings %+v, want round 1's four", got)
	}
	if got[0].ID != "r1-f1" || got[0].Open() || got[0].Resolution != "synced on a channel" {
		t.Errorf("first finding %+v, want resolved by the worker", got[0])
	}
	for _, f := range got[1:] {
		if !f.Open() {
			t.Errorf("finding %s is %q; the worker did not report on it, so it is open", f.ID, f.Status)
		}
		if f.ID == "r1-f9" {
			t.Error("a finding the record does not hold reached the reviewer")
		}
	}
}

func TestRunQuorumMergesRejections(t *testing.T) {
	second := runPersona()
	second.Name = "run-reviewer-2"
	reviewers := map[string]engine.Reviewer{}
	h := runHarness(t, runPolicyConf{run: reviewedRun, quorum: 2}, func(h *harness) {
		h.cfg.Personas = listedPersonas{"run-reviewer": runPersona(), "run-reviewer-2": second}
		reviewers["run-reviewer-2"] = &fakeReviewer{answer: answer(runRejection("split the commit"), nil)}
		h.router.byPersona = reviewers
	})
	v, _ := h.mustDecide(t, runSubject, runProposal(t, "p1", 1, nil), "")
	if v.Outcome != gated.OutcomeRejected || len(v.Reviews) != 2 || v.Run.Next != gated.NextContinuation {
		t.Fatalf("verdict %s with %d reviews, next %q: %s", v.Outcome, len(v.Reviews), v.Run.Next, v.Reason)
	}
	if !slices.Equal(v.Run.MissingWork, []string{"split the commit"}) {
		t.Errorf("missing work %q, want the rejecting reviewer's", v.Run.MissingWork)
	}
}

func TestRunFindingsCoverEveryMissingItem(t *testing.T) {
	h := runHarness(t, runPolicyConf{run: reviewedRun})
	h.reviewer.answer = approvalWithRun(func(r *engine.ReviewResult) {
		r.Criteria = nil // design is required and not judged
	})
	v, _ := h.mustDecide(t, runSubject, runProposal(t, "p1", 1, nil), "")
	if v.Outcome != gated.OutcomeRejected || len(v.Run.Findings) != 1 || !strings.Contains(v.Run.Findings[0].Body, "design") {
		t.Fatalf("verdict %s, findings %+v, want one on the unjudged criterion design", v.Outcome, v.Run.Findings)
	}

	h = runHarness(t, runPolicyConf{run: reviewedRun})
	h.reviewer.answer = answer(runRejection("criterion coverage: add a test for the empty queue"), nil)
	v, _ = h.mustDecide(t, runSubject, runProposal(t, "p2", 1, nil), "")
	var bodies []string
	for _, f := range v.Run.Findings {
		bodies = append(bodies, f.Body)
	}
	if !slices.Contains(bodies, "criterion coverage: add a test for the empty queue") {
		t.Errorf("findings %q lack the reviewer's own item", bodies)
	}
	if n := len(slices.DeleteFunc(slices.Clone(v.Run.Findings), func(f gated.Finding) bool { return f.Criterion != "design" })); n != 1 {
		t.Errorf("%d findings on criterion design, want 1", n)
	}
}

// TestRunThatDidNotCompleteIsApprovedOnlyWhenAccepted: whoever approves a
// failed or canceled run (a reviewer's answer, such as a model's, or a
// policy that does not review it), gated approves it only when the
// policy's decision.run.accepted_status names its status, and the verdict
// then says which status it accepted. A rejected review goes back to the
// worker with what is missing.
func TestRunThatDidNotCompleteIsApprovedOnlyWhenAccepted(t *testing.T) {
	unreviewed := gated.RunPolicy{Reviewed: false, Why: "run review policy none does not review these runs", MaxRounds: 5}
	tests := []struct {
		note        string
		run         gated.RunPolicy
		status      string
		accepted    string
		wantOutcome gated.Outcome
		wantStage   gated.Stage
		wantReason  string
		wantNext    string
	}{
		{note: "reviewer approves a failed run", run: reviewedRun, status: "failed",
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StageReview, wantNext: gated.NextContinuation,
			wantReason: "approved a run that ended failed, which the policy does not accept for its task"},
		{note: "reviewer approves a canceled run", run: reviewedRun, status: "canceled",
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StageReview, wantNext: gated.NextContinuation,
			wantReason: "approved a run that ended canceled"},
		{note: "reviewer approves a failed run whose canceling is accepted", run: reviewedRun, status: "failed", accepted: "canceled",
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StageReview, wantNext: gated.NextContinuation,
			wantReason: "approved a run that ended failed"},
		{note: "reviewer approves an accepted failure", run: reviewedRun, status: "failed", accepted: "failed",
			wantOutcome: gated.OutcomeApproved, wantStage: gated.StageReview, wantReason: "; accepted terminal status failed"},
		{note: "reviewer approves a completed run", run: reviewedRun, status: "completed",
			wantOutcome: gated.OutcomeApproved, wantStage: gated.StageReview, wantReason: "approved with all 2 required gates passed"},
		{note: "unreviewed failed run", run: unreviewed, status: "failed",
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StagePolicy,
			wantReason: `run r-1 ended failed, and the policy does not accept that status for its task (decision.run.accepted_status is "")`},
		{note: "unreviewed accepted cancel", run: unreviewed, status: "canceled", accepted: "canceled",
			wantOutcome: gated.OutcomeApproved, wantStage: gated.StagePolicy, wantReason: "; accepted terminal status canceled"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			rp := tc.run
			rp.AcceptedStatus = tc.accepted
			h := runHarness(t, runPolicyConf{run: rp})
			run := map[string]any{"run_id": "r-1", "task_id": "t-1", "status": tc.status, "round": 1, "worker": "w-1"}
			v, _ := h.mustDecide(t, runSubject, runProposal(t, "p1", 1, map[string]any{"run": run}), "")
			if v.Outcome != tc.wantOutcome || v.Stage != tc.wantStage || !strings.Contains(v.Reason, tc.wantReason) {
				t.Fatalf("verdict %s at %s: %s; want %s at %s saying %q", v.Outcome, v.Stage, v.Reason, tc.wantOutcome, tc.wantStage, tc.wantReason)
			}
			if v.Run.Next != tc.wantNext {
				t.Errorf("follow-up %q, want %q", v.Run.Next, tc.wantNext)
			}
			if v.Outcome == gated.OutcomeRejected && !slices.ContainsFunc(v.Run.MissingWork, func(m string) bool {
				return strings.HasPrefix(m, "the run ended "+tc.status+": complete the task")
			}) {
				t.Errorf("missing work %q does not ask for a completed run", v.Run.MissingWork)
			}
			if reqs := h.reviewer.requests(); len(reqs) > 0 && reqs[0].Run.AcceptedStatus != tc.accepted {
				t.Errorf("the reviewer was told accepted status %q, want %q", reqs[0].Run.AcceptedStatus, tc.accepted)
			}
		})
	}
}
