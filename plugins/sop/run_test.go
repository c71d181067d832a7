package sop

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/plugins/sdk"
)

// runReviewer is the built-in run-reviewer persona as far as Judge needs it.
var runReviewer = &engine.Persona{Name: "run-reviewer", RequiredGates: []string{GateCriteriaMet, GatePriorFindingsClosed}}

func line(n int) *int { return &n }

func runRequest(criteria []gated.Criterion, run *gated.RunContext) *sdk.Request {
	p := &gated.Proposal{V: 1, ID: "p1", Tenant: "acme", Kind: gated.KindRun, Action: "run_review",
		Criteria: criteria, Run: &gated.Run{RunID: "run-7", Status: gated.RunCompleted, Round: 2, Worker: "w"}}
	return sdk.NewRequest(sdk.Request{ReviewID: "rv", Proposal: p, Run: run}, nil)
}

var (
	testsCriterion   = gated.Criterion{ID: "tests", Description: "tests pass", Required: true, Kind: gated.CriterionCommandResult}
	readmeCriterion  = gated.Criterion{ID: "readme", Description: "README mentions it", Kind: gated.CriterionFileContains}
	styleCriterion   = gated.Criterion{ID: "style", Description: "reads well", Kind: gated.CriterionAIReview}
	designCriterion  = gated.Criterion{ID: "design", Description: "sound design", Required: true, Kind: gated.CriterionAIReview}
	signoffCriterion = gated.Criterion{ID: "signoff", Description: "an operator signs", Required: true, Kind: gated.CriterionManual}
)

func eval(c gated.Criterion, pass bool, reason string) gated.CriterionEval {
	return gated.CriterionEval{ID: c.ID, Pass: pass, Reason: reason, Kind: c.Kind, Required: c.Required, JudgedBy: gated.JudgedByPolicy}
}

func TestReviewRun(t *testing.T) {
	tests := []struct {
		note     string
		criteria []gated.Criterion
		run      gated.RunContext
		approved bool
		// gates that must fail, the missing work wanted (substrings, in
		// order) and warnings wanted (substrings).
		failed   []string
		missing  []string
		warnings []string
	}{
		{
			note:     "required criteria passed, nothing before",
			criteria: []gated.Criterion{testsCriterion, readmeCriterion},
			run:      gated.RunContext{Round: 1, MaxRounds: 5, Criteria: []gated.CriterionEval{eval(testsCriterion, true, "exited 0"), eval(readmeCriterion, true, "")}},
			approved: true,
		},
		{
			note:     "no criteria at all",
			run:      gated.RunContext{Round: 1, MaxRounds: 5},
			approved: true,
		},
		{
			note:     "an optional criterion failed",
			criteria: []gated.Criterion{testsCriterion, readmeCriterion},
			run:      gated.RunContext{Round: 1, Criteria: []gated.CriterionEval{eval(testsCriterion, true, ""), eval(readmeCriterion, false, "no match")}},
			approved: true,
		},
		{
			note:     "prior findings all resolved",
			criteria: []gated.Criterion{testsCriterion},
			run: gated.RunContext{Round: 2, Criteria: []gated.CriterionEval{eval(testsCriterion, true, "")},
				PriorFindings: []gated.Finding{{ID: "r1-f1", Body: "add a test", Status: gated.FindingResolved, Resolution: "added"}}},
			approved: true,
		},
		{
			note:     "a required criterion failed",
			criteria: []gated.Criterion{testsCriterion},
			run:      gated.RunContext{Round: 1, Criteria: []gated.CriterionEval{eval(testsCriterion, false, `"go test ./..." exited 1, expected 0`)}},
			failed:   []string{GateCriteriaMet},
			missing:  []string{`criterion tests (command_result) is not met: "go test ./..." exited 1, expected 0`},
		},
		{
			note:     "a required criterion the policy did not judge",
			criteria: []gated.Criterion{testsCriterion},
			run:      gated.RunContext{Round: 1},
			failed:   []string{GateCriteriaMet},
			missing:  []string{"criterion tests (command_result) was not judged by the policy"},
		},
		{
			note:     "prior findings still open",
			criteria: []gated.Criterion{testsCriterion},
			run: gated.RunContext{Round: 3, Criteria: []gated.CriterionEval{eval(testsCriterion, true, "")},
				PriorFindings: []gated.Finding{
					{ID: "r1-f1", Body: "add a test", Status: gated.FindingResolved},
					{ID: "r1-f2", Body: "handle the nil case", Path: "engine/run.go", Line: line(42)},
					{ID: "r2-f1", Body: "document the flag", Path: "README.md", Status: gated.FindingOpen},
				}},
			failed: []string{GatePriorFindingsClosed},
			missing: []string{
				"prior finding r1-f2 is still open: handle the nil case (engine/run.go:42)",
				"prior finding r2-f1 is still open: document the flag (README.md)",
			},
		},
		{
			note:     "both gates fail",
			criteria: []gated.Criterion{testsCriterion},
			run: gated.RunContext{Round: 2, Criteria: []gated.CriterionEval{eval(testsCriterion, false, "exited 2")},
				PriorFindings: []gated.Finding{{ID: "r1-f1", Body: "add a test"}}},
			failed:  []string{GateCriteriaMet, GatePriorFindingsClosed},
			missing: []string{"criterion tests (command_result) is not met: exited 2", "prior finding r1-f1 is still open: add a test"},
		},
		{
			note:     "an optional ai_review criterion is left with a warning",
			criteria: []gated.Criterion{testsCriterion, styleCriterion},
			run:      gated.RunContext{Round: 1, Criteria: []gated.CriterionEval{eval(testsCriterion, true, "")}, AIReview: []string{"style"}},
			approved: true,
			warnings: []string{"criterion style (ai_review, optional) was not judged"},
		},
		{
			note:     "manual criteria are the operator's",
			criteria: []gated.Criterion{signoffCriterion},
			run:      gated.RunContext{Round: 1, Manual: []string{"signoff"}},
			approved: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			res, err := Reviewer{}.Review(t.Context(), runRequest(tc.criteria, &tc.run))
			if err != nil {
				t.Fatal(err)
			}
			_, approved, why := engine.Judge(engine.ReviewResult{Plugin: Name, Text: res.Text, Decision: res.Decision, Gates: res.Gates}, runReviewer)
			if approved != tc.approved {
				t.Fatalf("approved = %v (%s), want %v; text:\n%s", approved, why, tc.approved, res.Text)
			}
			var failed []string
			for _, g := range res.Gates {
				if !g.Passed {
					failed = append(failed, g.Name)
				}
				if g.Detail == "" {
					t.Errorf("gate %s has no detail", g.Name)
				}
			}
			if !slices.Equal(failed, tc.failed) {
				t.Errorf("failed gates %q, want %q", failed, tc.failed)
			}
			if len(res.MissingWork) != len(tc.missing) {
				t.Fatalf("missing work %q, want %d items like %q", res.MissingWork, len(tc.missing), tc.missing)
			}
			for i, want := range tc.missing {
				if !strings.Contains(res.MissingWork[i], want) {
					t.Errorf("missing work %d = %q, want it to contain %q", i, res.MissingWork[i], want)
				}
			}
			// An approval sends nothing back; a rejection says what to do.
			if tc.approved && (res.NextRoundGuidance != "" || len(res.MissingWork) != 0) {
				t.Errorf("an approval with guidance %q and missing work %q", res.NextRoundGuidance, res.MissingWork)
			}
			if !tc.approved && res.NextRoundGuidance == "" {
				t.Error("a rejection without next_round_guidance")
			}
			if len(res.Warnings) != len(tc.warnings) {
				t.Errorf("warnings %q, want %d", res.Warnings, len(tc.warnings))
			}
			for _, want := range tc.warnings {
				if !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, want) }) {
					t.Errorf("warnings %q lack %q", res.Warnings, want)
				}
			}
			if len(res.Criteria) != 0 {
				t.Errorf("the deterministic reviewer judged criteria %v", res.Criteria)
			}
			// The text carries the answer as a run review's JSON block.
			answer := jsonBlock(t, res.Text)
			if !slices.Equal(answer.MissingWork, res.MissingWork) || answer.NextRoundGuidance != res.NextRoundGuidance ||
				!slices.Equal(answer.Warnings, res.Warnings) {
				t.Errorf("the JSON block %+v does not match the response", answer)
			}
		})
	}
}

// jsonBlock decodes the fenced JSON block of a run review's text, and
// checks that it has every field of the format.
func jsonBlock(t *testing.T, text string) runAnswer {
	t.Helper()
	_, rest, ok := strings.Cut(text, "```json\n")
	body, _, closed := strings.Cut(rest, "\n```")
	if !ok || !closed {
		t.Fatalf("no fenced json block in:\n%s", text)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &fields); err != nil {
		t.Fatalf("json block: %v\n%s", err, body)
	}
	for _, k := range []string{"criteria", "comments", "missing_work", "next_round_guidance", "warnings"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("json block lacks %q", k)
		}
	}
	var a runAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestReviewRunRefusesAIReview(t *testing.T) {
	tests := []struct {
		note     string
		criteria []gated.Criterion
		aiReview []string
		want     string
	}{
		{note: "required ai_review named by gated", criteria: []gated.Criterion{testsCriterion, designCriterion}, aiReview: []string{"design"}, want: "design"},
		// The proposal is enough: gated's list is not needed to refuse.
		{note: "required ai_review in the proposal only", criteria: []gated.Criterion{designCriterion}, want: "design"},
		// An id the proposal does not describe might be required.
		{note: "ai_review id the proposal lacks", criteria: []gated.Criterion{styleCriterion}, aiReview: []string{"style", "ghost"}, want: "ghost"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			run := &gated.RunContext{Round: 1, AIReview: tc.aiReview, Criteria: []gated.CriterionEval{eval(testsCriterion, true, "")}}
			res, err := Reviewer{}.Review(t.Context(), runRequest(tc.criteria, run))
			if !errors.Is(err, ErrCannotJudge) || res != nil {
				t.Fatalf("res %+v, err %v; want no answer and ErrCannotJudge", res, err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || !strings.Contains(msg, "route the run to an LLM persona") {
				t.Errorf("error %q does not name %q and say where to route the run", msg, tc.want)
			}
			if strings.Contains(err.Error(), "style") {
				t.Errorf("error %q names the optional criterion", err)
			}
		})
	}
}

func TestReviewRunWithoutContextIsAnError(t *testing.T) {
	req := runRequest([]gated.Criterion{testsCriterion}, nil)
	res, err := Reviewer{}.Review(t.Context(), req)
	if err == nil || res != nil {
		t.Fatalf("res %+v, err %v: a run proposal without its run context must fail the review", res, err)
	}
}

// TestActionReviewIgnoresRunGates checks that an action review still gets
// the SOP gates: a run's gates never approve an action.
func TestActionReviewIgnoresRunGates(t *testing.T) {
	p := &gated.Proposal{V: 1, ID: "p1", Tenant: "acme", Kind: gated.KindAction, Action: "host_restart_service"}
	res, err := Reviewer{}.Review(t.Context(), sdk.NewRequest(sdk.Request{Proposal: p}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := engine.Judge(engine.ReviewResult{Text: res.Text, Decision: res.Decision, Gates: res.Gates}, runReviewer); ok {
		t.Fatal("an action review passed the run gates")
	}
	if strings.Contains(res.Text, "```json") {
		t.Errorf("an action review carries a run's JSON block:\n%s", res.Text)
	}
}

// TestReviewRunThatDidNotComplete: the deterministic reviewer approves a
// failed or canceled run only when the policy accepts that status for its
// task, and its notes then say which status it accepted.
func TestReviewRunThatDidNotComplete(t *testing.T) {
	tests := []struct {
		note, status, accepted string
		approved               bool
		notes                  string
	}{
		{note: "failed", status: gated.RunFailed},
		{note: "canceled", status: gated.RunCanceled},
		{note: "failed, canceling accepted", status: gated.RunFailed, accepted: gated.RunCanceled},
		{note: "failed and accepted", status: gated.RunFailed, accepted: gated.RunFailed, approved: true,
			notes: "It ended failed: accepted terminal status failed"},
		{note: "completed", status: gated.RunCompleted, approved: true},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			req := runRequest(nil, &gated.RunContext{Round: 1, MaxRounds: 5, AcceptedStatus: tc.accepted})
			req.Proposal.Run.Status, req.Proposal.Run.TaskID = tc.status, "T-9"
			res, err := Reviewer{}.Review(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if approved := res.Decision == gated.DecisionApprove; approved != tc.approved {
				t.Fatalf("decision %s, want approved %v:\n%s", res.Decision, tc.approved, res.Text)
			}
			gate := res.Gates[slices.IndexFunc(res.Gates, func(g gated.GateResult) bool { return g.Name == GateRunCompleted })]
			if gate.Passed != tc.approved {
				t.Errorf("gate %+v", gate)
			}
			if !tc.approved && !slices.ContainsFunc(res.MissingWork, func(m string) bool { return strings.Contains(m, "the run ended \""+tc.status+"\"") }) {
				t.Errorf("missing work %q does not say how the run ended", res.MissingWork)
			}
			if !strings.Contains(res.Notes, tc.notes) {
				t.Errorf("notes %q do not say %q", res.Notes, tc.notes)
			}
		})
	}
}
