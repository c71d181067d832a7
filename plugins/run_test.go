package plugins

import (
	"context"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/plugins/pluginv1"
	"github.com/gated/gated/plugins/sdk"
	"github.com/gated/gated/plugins/sop"
)

// runEchoReviewer reports the run context it received, as JSON in its
// notes ("null" for none), and answers a rejection that uses every field
// of a run review: a criterion, comments with and without a line,
// missing work, guidance and warnings.
type runEchoReviewer struct{ sop.Reviewer }

func (runEchoReviewer) Review(_ context.Context, req *sdk.Request) (*sdk.Response, error) {
	notes, err := json.Marshal(req.Run)
	if err != nil {
		return nil, err
	}
	line := func(n int) *int { return &n }
	res := &sdk.Response{
		Text: "Decision: reject\nGates:\n- criteria_met: fail — style\n", Decision: gated.DecisionReject,
		Notes: string(notes),
		Comments: []gated.Comment{
			{Path: "engine/run.go", Line: line(42), Body: "check for nil"},
			{Path: "README.md", Body: "the whole file needs a section on runs"},
			{Path: "zero.go", Line: line(0), Body: "line 0 is no line"},
			{Path: "neg.go", Line: line(-3), Body: "nor is a negative one"},
		},
		MissingWork:       []string{"handle a nil run"},
		NextRoundGuidance: "start with the nil case",
		Warnings:          []string{"the diff was long", "caf\xe9 is not UTF-8"},
	}
	if req.Run != nil && len(req.Run.AIReview) > 0 {
		res.Criteria = []gated.CriterionEval{{ID: req.Run.AIReview[0], Pass: false, Confidence: 0.75, Reason: "hard to read", Refs: []string{"engine/run.go:40"}}}
	}
	return res, nil
}

// yesReviewer approves everything, reporting every gate the persona
// requires as passed.
type yesReviewer struct{ sop.Reviewer }

func (yesReviewer) Describe(context.Context) (sdk.Description, error) {
	return sdk.Description{Name: "yes", Version: "test"}, nil
}

func (yesReviewer) Review(_ context.Context, req *sdk.Request) (*sdk.Response, error) {
	res := &sdk.Response{Text: "Decision: approve\nNotes: fine by me", Decision: gated.DecisionApprove}
	for _, g := range req.Persona.RequiredGates {
		res.Gates = append(res.Gates, gated.GateResult{Name: g, Passed: true})
	}
	return res, nil
}

// actionOnlyReviewer is a reviewer written before run reviews: it reviews
// every proposal as an action.
type actionOnlyReviewer struct{ sop.Reviewer }

func (actionOnlyReviewer) Describe(context.Context) (sdk.Description, error) {
	return sdk.Description{Name: "action-only", Version: "test"}, nil
}

func (actionOnlyReviewer) Review(ctx context.Context, req *sdk.Request) (*sdk.Response, error) {
	req.Run, req.Proposal.Kind = nil, gated.KindAction
	return sop.Reviewer{}.Review(ctx, req)
}

var runReviewer = &engine.Persona{
	Name: "run-reviewer", PermissionMode: "read-only", Prompt: "Review the run.",
	RequiredGates: []string{sop.GateCriteriaMet, sop.GatePriorFindingsClosed},
}

// runReviewRequest is the review of round 2 of a run, with the context
// the engine would send.
func runReviewRequest(t testing.TB, criteria []gated.Criterion, run *gated.RunContext) engine.ReviewRequest {
	t.Helper()
	p := &gated.Proposal{V: 1, ID: "run-p2", Tenant: "acme", Kind: gated.KindRun, Action: "run_review",
		Class: gated.ClassRead, Criteria: criteria, RequestedBy: &gated.RequestedBy{Agent: "orchestrator"},
		Run: &gated.Run{RunID: "run-7", Status: gated.RunCompleted, Round: run.Round, Worker: "worker-1",
			Summary: "added run reviews", Diff: "--- a/engine/run.go\n+++ b/engine/run.go\n"}}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return engine.ReviewRequest{ReviewID: "rv-run", Proposal: p, ProposalJSON: raw, Persona: runReviewer,
		Deadline: time.Now().Add(time.Minute), Run: run}
}

func intp(n int) *int { return &n }

func TestRunReviewRoundTrip(t *testing.T) {
	h := startHost(t, helperSpec(t, "run-echo"))
	r, err := h.Route(runReviewer)
	if err != nil {
		t.Fatal(err)
	}
	run := &gated.RunContext{
		Round: 2, MaxRounds: 5,
		Criteria: []gated.CriterionEval{{ID: "tests", Pass: true, Reason: "exited 0", Kind: gated.CriterionCommandResult,
			Required: true, JudgedBy: gated.JudgedByPolicy}},
		AIReview: []string{"style"}, Manual: []string{"signoff"},
		PriorFindings: []gated.Finding{
			{ID: "r1-f1", Body: "add a test", Status: gated.FindingResolved, Resolution: "added run_test.go"},
			{ID: "r1-f2", Body: "nil check", Path: "engine/run.go", Line: intp(42), Criterion: "style"},
			{ID: "r1-f3", Body: "docs", Path: "README.md"},
		},
		Limits: gated.RunLimits{}.WithDefaults(),
	}
	criteria := []gated.Criterion{
		{ID: "tests", Description: "tests pass", Required: true, Kind: gated.CriterionCommandResult},
		{ID: "style", Description: "reads well", Required: true, Kind: gated.CriterionAIReview},
		{ID: "signoff", Description: "an operator signs", Required: true, Kind: gated.CriterionManual},
	}
	res, err := r.Review(t.Context(), runReviewRequest(t, criteria, run))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("the plugin gets the run context", func(t *testing.T) {
		var got *gated.RunContext
		if err := json.Unmarshal([]byte(res.Notes), &got); err != nil {
			t.Fatalf("notes %q: %v", res.Notes, err)
		}
		if !reflect.DeepEqual(got, run) {
			t.Fatalf("the plugin got\n%+v\nwant\n%+v", got, run)
		}
		// A finding without a line stays without one.
		if got.PriorFindings[2].Line != nil || *got.PriorFindings[1].Line != 42 {
			t.Errorf("finding lines %v, %v; want null and 42", got.PriorFindings[2].Line, got.PriorFindings[1].Line)
		}
	})
	t.Run("comment lines, present and null", func(t *testing.T) {
		want := []gated.Comment{
			{Path: "engine/run.go", Line: intp(42), Body: "check for nil"},
			{Path: "README.md", Body: "the whole file needs a section on runs"},
			{Path: "zero.go", Body: "line 0 is no line"},
			{Path: "neg.go", Body: "nor is a negative one"},
		}
		if !reflect.DeepEqual(res.Comments, want) {
			t.Fatalf("comments %s, want %s", mustJSON(t, res.Comments), mustJSON(t, want))
		}
	})
	t.Run("warnings and the rest of the answer", func(t *testing.T) {
		if want := []string{"the diff was long", "caf\uFFFD is not UTF-8"}; !reflect.DeepEqual(res.Warnings, want) {
			t.Errorf("warnings %q, want %q", res.Warnings, want)
		}
		if !reflect.DeepEqual(res.MissingWork, []string{"handle a nil run"}) || res.NextRoundGuidance != "start with the nil case" {
			t.Errorf("missing work %q, guidance %q", res.MissingWork, res.NextRoundGuidance)
		}
		want := []gated.CriterionEval{{ID: "style", Confidence: 0.75, Reason: "hard to read", Refs: []string{"engine/run.go:40"}}}
		if !reflect.DeepEqual(res.Criteria, want) {
			t.Errorf("criteria %+v, want %+v", res.Criteria, want)
		}
		if res.Decision != gated.DecisionReject {
			t.Errorf("decision %q", res.Decision)
		}
	})
	t.Run("an action review has no run context", func(t *testing.T) {
		ar, err := r.Review(t.Context(), reviewRequest(t, "host_restart_service", nil))
		if err != nil {
			t.Fatal(err)
		}
		if ar.Notes != "null" {
			t.Fatalf("the plugin got run context %s for an action review", ar.Notes)
		}
	})
}

// TestMalformedRunContextFailsTheReview sends the plugin process a
// run_json it cannot read: the review must fail, not go ahead without the
// run context.
func TestMalformedRunContextFailsTheReview(t *testing.T) {
	h := startHost(t, helperSpec(t, "sop"))
	proc := h.procs["sop"]
	proc.mu.Lock()
	rpc := proc.rpc
	proc.mu.Unlock()
	req := runReviewRequest(t, nil, &gated.RunContext{Round: 1})
	for _, bad := range []string{`{"round":`, `[1]`, `null`, `{"round":"one"}`, `{"round":1} {}`} {
		t.Run(bad, func(t *testing.T) {
			out, err := rpc.Review(t.Context(), &pluginv1.ReviewRequest{
				ReviewId: "rv-bad", ProposalJson: req.ProposalJSON, Persona: &pluginv1.Persona{Name: "run-reviewer"},
				DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli(),
				Policy:         &pluginv1.PolicyContext{RunJson: []byte(bad)},
			})
			if err == nil {
				t.Fatalf("the review went ahead: %q", out.GetText())
			}
			if !strings.Contains(err.Error(), sdk.ErrMalformedRun.Error()) {
				t.Errorf("error %q does not say the run context is malformed", err)
			}
		})
	}
	if !h.Plugins()[0].Running {
		t.Fatal("a malformed run context took the plugin down")
	}
}

// TestSOPReviewsRunsOutOfProcess runs the bundled deterministic reviewer
// on run reviews through a real plugin process, judged as the engine
// judges them for the run-reviewer persona.
func TestSOPReviewsRunsOutOfProcess(t *testing.T) {
	h := startHost(t, helperSpec(t, "sop"))
	r, err := h.Route(runReviewer)
	if err != nil {
		t.Fatal(err)
	}
	tests := gated.Criterion{ID: "tests", Description: "tests pass", Required: true, Kind: gated.CriterionCommandResult}
	passed := gated.CriterionEval{ID: "tests", Pass: true, Reason: "exited 0", Kind: tests.Kind, Required: true, JudgedBy: gated.JudgedByPolicy}
	cases := []struct {
		note     string
		criteria []gated.Criterion
		run      gated.RunContext
		approved bool
		missing  []string
		err      string
	}{
		{note: "done", criteria: []gated.Criterion{tests}, approved: true,
			run: gated.RunContext{Round: 2, Criteria: []gated.CriterionEval{passed},
				PriorFindings: []gated.Finding{{ID: "r1-f1", Body: "add a test", Status: gated.FindingResolved}}}},
		{note: "a finding still open", criteria: []gated.Criterion{tests},
			run: gated.RunContext{Round: 2, Criteria: []gated.CriterionEval{passed},
				PriorFindings: []gated.Finding{{ID: "r1-f2", Body: "nil check", Path: "engine/run.go", Line: intp(42)}}},
			missing: []string{"prior finding r1-f2 is still open: nil check (engine/run.go:42)"}},
		{note: "an ai_review criterion", criteria: []gated.Criterion{tests, {ID: "design", Required: true, Kind: gated.CriterionAIReview}},
			run: gated.RunContext{Round: 1, Criteria: []gated.CriterionEval{passed}, AIReview: []string{"design"}},
			err: "cannot judge ai_review criteria (required: design); route the run to an LLM persona"},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			res, err := r.Review(t.Context(), runReviewRequest(t, tc.criteria, &tc.run))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, approved, why := engine.Judge(res, runReviewer)
			if approved != tc.approved {
				t.Fatalf("approved = %v (%s), want %v; text:\n%s", approved, why, tc.approved, res.Text)
			}
			if !reflect.DeepEqual(res.MissingWork, tc.missing) {
				t.Errorf("missing work %q, want %q", res.MissingWork, tc.missing)
			}
			if approved == (res.NextRoundGuidance != "") {
				t.Errorf("approved %v with next_round_guidance %q", approved, res.NextRoundGuidance)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestCommentLine checks how the host reads a comment's optional line: an
// absent line, and line 0 (lines count from 1), are the file as a whole.
func TestCommentLine(t *testing.T) {
	u := func(n uint32) *uint32 { return &n }
	tests := []struct {
		note string
		line *uint32
		want *int
	}{
		{note: "absent", line: nil, want: nil},
		{note: "zero", line: u(0), want: nil},
		{note: "first line", line: u(1), want: intp(1)},
	}
	if strconv.IntSize == 64 {
		largest := uint64(math.MaxUint32)
		tests = append(tests, struct {
			note string
			line *uint32
			want *int
		}{note: "largest", line: u(math.MaxUint32), want: intp(int(largest))})
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			got := commentLine(&pluginv1.Comment{Path: "a.go", Line: tc.line})
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("line %v, want %v", got, tc.want)
			}
		})
	}
}
