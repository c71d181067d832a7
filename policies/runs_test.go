package policies

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

var runReviewerPersona = &engine.Persona{
	Name: "run-reviewer", PermissionMode: "read-only", Plugin: "llm", Tools: []string{"get_proposal"},
}

// runProposal is round 1 of a run whose criteria all pass: a test command,
// a changelog entry, an ai_review and a required manual criterion.
func runProposal() *gated.Proposal {
	return &gated.Proposal{
		V: 1, ID: "run-review-1", Tenant: "acme", Kind: gated.KindRun, Action: "agent_run",
		Class: gated.ClassWrite, BlastRadius: gated.BlastSingleDevice,
		RequestedBy: &gated.RequestedBy{Agent: "orchestrator-1"},
		Criteria: []gated.Criterion{
			{ID: "tests", Required: true, Kind: gated.CriterionCommandResult,
				Params:   map[string]any{"exit_code": json.Number("0")},
				Evidence: map[string]any{"command": "go test ./...", "exit_code": json.Number("0")}},
			{ID: "changelog", Required: true, Kind: gated.CriterionFileContains,
				Params:   map[string]any{"path": "CHANGELOG.md", "pattern": `(?m)^- .*nginx`},
				Evidence: map[string]any{"path": "CHANGELOG.md", "content": "- nginx restarts cleanly\n"}},
			{ID: "design", Required: true, Kind: gated.CriterionAIReview},
			{ID: "signoff", Required: true, Kind: gated.CriterionManual},
		},
		Run: &gated.Run{RunID: "r-77", TaskID: "t-1", Status: gated.RunCompleted, Round: 1, Worker: "w-3"},
	}
}

func continued(rounds ...int) *gated.RunRecord {
	r := &gated.RunRecord{Tenant: "acme", RunID: "r-77"}
	for _, n := range rounds {
		r.Rounds = append(r.Rounds, gated.RunRound{Round: n, ProposalID: "earlier", Outcome: gated.OutcomeRejected, Next: gated.NextContinuation})
	}
	return r
}

func denyRules(d engine.PolicyDecision) []string {
	var rules []string
	for _, deny := range d.Denies {
		rules = append(rules, deny.Rule)
	}
	slices.Sort(rules)
	return rules
}

// TestEvaluateRun decides run proposals with the compiled default bundle
// and checks what the engine reads: denies, routing and decision.run.
func TestEvaluateRun(t *testing.T) {
	e := mustEvaluator(t)
	tests := []struct {
		note    string
		mutate  func(*gated.Proposal)
		persona *engine.Persona
		record  *gated.RunRecord
		check   func(*testing.T, engine.PolicyDecision)
	}{
		{note: "passing run goes to the run reviewer", check: func(t *testing.T, d engine.PolicyDecision) {
			if len(d.Denies) != 0 || !d.Review.Required || d.Review.Persona != "run-reviewer" || d.Review.Blocked != "" {
				t.Errorf("denies %v, review %+v: want the run routed to run-reviewer", d.Denies, d.Review)
			}
			want := &gated.RunPolicy{
				Reviewed: true, Why: "run review policy always reviews completed runs", ReviewPolicy: "always",
				MaxRounds: 5, Continuable: true, Manual: []string{"signoff"}, MissingWork: []string{},
				Limits: gated.RunLimits{MaxItems: 20, MaxItemBytes: 2048, MaxGuidanceBytes: 8192},
				Criteria: []gated.CriterionEval{
					{ID: "tests", Pass: true, Reason: `"go test ./..." exited 0`, Kind: "command_result", Required: true, JudgedBy: "policy"},
					{ID: "changelog", Pass: true, Reason: `CHANGELOG.md matches "(?m)^- .*nginx"`, Kind: "file_contains", Required: true, JudgedBy: "policy"},
				},
			}
			if got, _ := json.Marshal(d.Run); string(got) != string(mustJSON(t, want)) {
				t.Errorf("run = %s\nwant  %s", got, mustJSON(t, want))
			}
		}},
		{note: "failed test command", mutate: func(p *gated.Proposal) {
			p.Criteria[0].Evidence["exit_code"] = json.Number("1")
		}, check: func(t *testing.T, d engine.PolicyDecision) {
			want := `criterion tests (command_result): "go test ./..." exited 1, expected 0`
			if len(d.Denies) != 1 || d.Denies[0] != (gated.Deny{Rule: "criterion_failed", Message: want}) {
				t.Errorf("denies = %v", d.Denies)
			}
			if !slices.Equal(d.Run.MissingWork, []string{want}) || !d.Run.Continuable {
				t.Errorf("missing work %q, continuable %v", d.Run.MissingWork, d.Run.Continuable)
			}
		}},
		{note: "malformed pattern fails the criterion, not the evaluation", mutate: func(p *gated.Proposal) {
			p.Criteria[1].Params["pattern"] = "(unclosed"
		}, check: func(t *testing.T, d engine.PolicyDecision) {
			if c := d.Run.Criteria[1]; c.Pass || !strings.Contains(c.Reason, "not a valid RE2") {
				t.Errorf("criterion = %+v", c)
			}
			if got := denyRules(d); !slices.Equal(got, []string{"criterion_failed"}) {
				t.Errorf("denies = %v", got)
			}
		}},
		{note: "missing evidence", mutate: func(p *gated.Proposal) {
			p.Criteria[0].Evidence, p.Criteria[1].Evidence = nil, nil
		}, check: func(t *testing.T, d engine.PolicyDecision) {
			if len(d.Run.MissingWork) != 2 || !strings.HasSuffix(d.Run.MissingWork[0], "no evidence: exit_code missing") {
				t.Errorf("missing work = %q", d.Run.MissingWork)
			}
		}},
		{note: "worker named like the persona is blocked, not denied", mutate: func(p *gated.Proposal) {
			p.Run.Worker = "reviewer"
		}, persona: reviewerPersona, check: func(t *testing.T, d engine.PolicyDecision) {
			if len(d.Denies) != 0 || !strings.Contains(d.Review.Blocked, `persona "reviewer" is the run's worker`) {
				t.Errorf("denies %v, blocked %q", d.Denies, d.Review.Blocked)
			}
		}},
		{note: "plugin named like the worker is blocked", mutate: func(p *gated.Proposal) {
			p.Run.Worker = "llm"
		}, check: func(t *testing.T, d engine.PolicyDecision) {
			if !strings.Contains(d.Review.Blocked, `runs on plugin "llm"`) {
				t.Errorf("blocked = %q", d.Review.Blocked)
			}
		}},
		{note: "round after a continuation", mutate: func(p *gated.Proposal) { p.Run.Round = 2 }, record: continued(1),
			check: func(t *testing.T, d engine.PolicyDecision) {
				if len(d.Denies) != 0 {
					t.Errorf("denies = %v", d.Denies)
				}
			}},
		{note: "round out of order", mutate: func(p *gated.Proposal) { p.Run.Round = 3 }, record: continued(1),
			check: func(t *testing.T, d engine.PolicyDecision) {
				if got := denyRules(d); !slices.Equal(got, []string{"run_round_out_of_order"}) || d.Run.Continuable {
					t.Errorf("denies %v, continuable %v", got, d.Run.Continuable)
				}
			}},
		{note: "closed run", mutate: func(p *gated.Proposal) { p.Run.Round = 2 },
			record: &gated.RunRecord{Tenant: "acme", RunID: "r-77", Closed: gated.RunAccepted, Rounds: []gated.RunRound{
				{Round: 1, ProposalID: "run-review-0", Outcome: gated.OutcomeApproved},
			}},
			check: func(t *testing.T, d engine.PolicyDecision) {
				if got := denyRules(d); !slices.Contains(got, "run_closed") || d.Run.Continuable {
					t.Errorf("denies %v, continuable %v", got, d.Run.Continuable)
				}
			}},
		{note: "past the last round", mutate: func(p *gated.Proposal) { p.Run.Round = 6 }, record: continued(1, 2, 3, 4, 5),
			check: func(t *testing.T, d engine.PolicyDecision) {
				if got := denyRules(d); !slices.Equal(got, []string{"run_round_limit"}) {
					t.Errorf("denies = %v", got)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			p := runProposal()
			if tc.mutate != nil {
				tc.mutate(p)
			}
			persona := tc.persona
			if persona == nil {
				persona = runReviewerPersona
			}
			d, err := e.Evaluate(t.Context(), engine.PolicyInput{Proposal: p, Persona: persona, RunRecord: tc.record})
			if err != nil {
				t.Fatal(err)
			}
			if d.Run == nil {
				t.Fatal("decision has no run section")
			}
			tc.check(t, d)
		})
	}
}

// TestEvaluateRunDecodedProposal feeds the policy a run proposal as the
// engine decodes it from the wire (numbers as json.Number).
func TestEvaluateRunDecodedProposal(t *testing.T) {
	raw := `{"v": 1, "id": "run-review-2", "tenant": "acme", "kind": "run", "action": "agent_run",
	  "class": "write", "blast_radius": "single_device", "requested_by": {"agent": "orchestrator-1"},
	  "criteria": [
	    {"id": "tests", "description": "tests pass", "required": true, "kind": "command_result",
	     "params": {"exit_code": 3}, "evidence": {"command": "make check", "exit_code": 3}},
	    {"id": "readme", "description": "README documents it", "required": false, "kind": "file_contains",
	     "params": {"path": "README.md", "text": "--flag"}, "evidence": {"path": "README.md", "content": "no flags"}}],
	  "run": {"run_id": "r-1", "status": "completed", "round": 2, "worker": "w-1",
	    "prior_reviews": [{"round": 1, "findings": [{"id": "r1-f1", "body": "document the flag", "line": null}]}]}}`
	p, err := gated.DecodeProposal([]byte(raw), "", "", gated.Limits{})
	if err != nil {
		t.Fatalf("decoding a valid run proposal: %v", err)
	}
	d, err := mustEvaluator(t).Evaluate(t.Context(), engine.PolicyInput{Proposal: p, Persona: runReviewerPersona, RunRecord: continued(1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Denies) != 0 || len(d.Run.Criteria) != 2 {
		t.Fatalf("denies %v, criteria %+v", d.Denies, d.Run.Criteria)
	}
	if c := d.Run.Criteria[0]; !c.Pass || c.Reason != `"make check" exited 3` {
		t.Errorf("tests = %+v", c)
	}
	if c := d.Run.Criteria[1]; c.Pass || c.Required || c.Reason != `README.md does not contain "--flag"` {
		t.Errorf("readme = %+v", c)
	}
	if len(d.Run.MissingWork) != 0 {
		t.Errorf("an optional criterion asked for work: %q", d.Run.MissingWork)
	}
}

func TestEvaluateRunReviewConfig(t *testing.T) {
	b, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	config := b.Data["gated"].(map[string]any)["config"].(map[string]any)
	config["run_review"] = map[string]any{
		"policy": "on_success", "max_rounds": json.Number("3"),
		"limits":  map[string]any{"max_items": json.Number("7")},
		"tenants": map[string]any{"globex": map[string]any{"policy": "always", "personas": []any{"senior"}, "quorum": json.Number("2")}},
	}
	e, err := Compile(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	failed := runProposal()
	failed.Run.Status = gated.RunFailed
	failed.Criteria[0].Evidence["exit_code"] = json.Number("2")
	d, err := e.Evaluate(t.Context(), engine.PolicyInput{Proposal: failed, Persona: runReviewerPersona})
	if err != nil {
		t.Fatal(err)
	}
	// Not reviewed, its criteria are not judged; failed and not accepted,
	// it is refused.
	if d.Review.Required || d.Run.Reviewed || len(d.Run.Criteria) != 0 || len(d.Denies) != 1 || d.Denies[0].Rule != "run_not_completed" {
		t.Errorf("an unreviewed run: review %+v, denies %v, run %+v", d.Review, d.Denies, d.Run)
	}
	if d.Review.Why != "run review policy on_success does not review failed runs" || d.Run.MaxRounds != 3 || d.Run.Limits.MaxItems != 7 {
		t.Errorf("why %q, max rounds %d, limits %+v", d.Review.Why, d.Run.MaxRounds, d.Run.Limits)
	}
	globex := runProposal()
	globex.Tenant, globex.Run.Status = "globex", gated.RunFailed
	d, err = e.Evaluate(t.Context(), engine.PolicyInput{Proposal: globex, Persona: runReviewerPersona})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Run.Reviewed || d.Review.Persona != "senior" || d.Review.Quorum != 2 || d.Run.ReviewPolicy != "always" {
		t.Errorf("tenant override: review %+v, run policy %q", d.Review, d.Run.ReviewPolicy)
	}
}

func TestCompileRefusesBadRunReviewConfig(t *testing.T) {
	b, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	b.Data["gated"].(map[string]any)["config"].(map[string]any)["run_review"] = map[string]any{
		"policy": "sometimes", "tenants": map[string]any{"acme": map[string]any{"quorum": json.Number("0")}},
	}
	_, err = Compile(t.Context(), b)
	if !errors.Is(err, ErrInvalidBundle) {
		t.Fatalf("err = %v, want ErrInvalidBundle", err)
	}
	for _, want := range []string{
		`data.gated.config.run_review.policy: "sometimes" is not one of none, on_success, on_failure, always`,
		"data.gated.config.run_review.tenants.acme.quorum: 0 is not an integer from 1 to 16",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestCompileRefusesBundleThatCannotDecideRuns: the start-up check
// includes a run proposal, so a replacement bundle without decision.run
// fails to load instead of failing every run.
func TestCompileRefusesBundleThatCannotDecideRuns(t *testing.T) {
	_, err := Compile(t.Context(), &Bundle{Modules: map[string]string{"mine.rego": `package gated

decision := {"deny": [], "review": {"required": false}}
`}})
	if !errors.Is(err, ErrInvalidBundle) || !strings.Contains(err.Error(), "sample run proposal") || !strings.Contains(err.Error(), "decision.run is missing") {
		t.Fatalf("err = %v, want the sample run proposal refused for its missing decision.run", err)
	}
}

func TestEvaluateActionHasNoRunSection(t *testing.T) {
	d, err := mustEvaluator(t).Evaluate(t.Context(), engine.PolicyInput{Proposal: writeProposal(), Persona: reviewerPersona})
	if err != nil {
		t.Fatal(err)
	}
	if d.Run != nil || d.Review.Blocked != "" {
		t.Errorf("run %+v, blocked %q: want neither for an action", d.Run, d.Review.Blocked)
	}
}

func TestSampleInputsCoverRuns(t *testing.T) {
	e := mustEvaluator(t)
	var runs int
	for _, in := range sampleInputs() {
		d, err := e.Evaluate(t.Context(), in)
		if err != nil {
			t.Fatal(err)
		}
		if in.Proposal.Kind != gated.KindRun {
			continue
		}
		runs++
		// The sample is a well-formed second round: the default bundle
		// reviews it without a deny, judging both deterministic criteria.
		if len(d.Denies) != 0 || !d.Review.Required || d.Run == nil || len(d.Run.Criteria) != 2 || !slices.Equal(d.Run.Manual, []string{"signoff"}) {
			t.Errorf("sample run: denies %v, review %+v, run %+v", d.Denies, d.Review, d.Run)
		}
	}
	if runs == 0 {
		t.Fatal("no sample run proposal")
	}
}

// TestInputValueRun checks the run parts of the input: every field present,
// findings open unless resolved, run_record null when there is none.
func TestInputValueRun(t *testing.T) {
	p := runProposal()
	line := 12
	p.Run.Summary, p.Run.Diff, p.Run.TestOutput = "bumped nginx", "--- a\n+++ b\n", "ok"
	p.Run.PriorReviews = []gated.PriorReview{{ProposalID: "run-review-0", Round: 1, Summary: "needs a changelog", Findings: []gated.Finding{
		{ID: "r1-f1", Body: "add a changelog entry", Path: "CHANGELOG.md", Line: &line, Criterion: "changelog"},
		{ID: "r1-f2", Body: "fix the typo", Status: gated.FindingResolved, Resolution: "fixed"},
	}}}
	decided := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	record := &gated.RunRecord{Tenant: "acme", RunID: "r-77", TaskID: "t-1", Rounds: []gated.RunRound{{
		Round: 1, ProposalID: "run-review-0", Outcome: gated.OutcomeRejected, Next: gated.NextContinuation,
		Findings: []gated.Finding{{ID: "r1-f1", Body: "add a changelog entry"}}, DecidedAt: decided, Sent: true,
	}}}
	got := inputJSON(t, engine.PolicyInput{Proposal: p, RunRecord: record})
	want := map[string]string{
		"proposal.criteria[0].evidence":          `{"command":"go test ./...","exit_code":0}`,
		"proposal.criteria[2].evidence":          `{}`,
		"proposal.criteria[2].params":            `{}`,
		"proposal.run.summary":                   `"bumped nginx"`,
		"proposal.run.diff":                      `"--- a\n+++ b\n"`,
		"proposal.run.test_output":               `"ok"`,
		"proposal.run.prior_reviews[0].round":    `1`,
		"proposal.run.prior_reviews[0].summary":  `"needs a changelog"`,
		"proposal.run.prior_reviews[0].findings": `[{"body":"add a changelog entry","criterion":"changelog","id":"r1-f1","line":12,"path":"CHANGELOG.md","resolution":"","status":"open"},{"body":"fix the typo","criterion":"","id":"r1-f2","line":null,"path":"","resolution":"fixed","status":"resolved"}]`,
		"run_record":                             `{"closed":"","rounds":[{"decided_at":"2026-03-01T12:00:00Z","decided_at_ns":1772366400000000000,"findings":[{"body":"add a changelog entry","criterion":"","id":"r1-f1","line":null,"path":"","resolution":"","status":"open"}],"next":"continuation","outcome":"rejected","proposal_id":"run-review-0","round":1,"sent":true}],"run_id":"r-77","task_id":"t-1","tenant":"acme"}`,
	}
	for path, w := range want {
		if g := pick(t, got, path); g != w {
			t.Errorf("%s = %s\nwant %s", path, g, w)
		}
	}
	action := inputJSON(t, engine.PolicyInput{Proposal: writeProposal()})
	if g := pick(t, action, "run_record"); g != "null" {
		t.Errorf("run_record of an action = %s, want null", g)
	}
	if g := pick(t, action, "proposal.run"); g != "null" {
		t.Errorf("run of an action = %s, want null", g)
	}
}

func inputJSON(t *testing.T, in engine.PolicyInput) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(InputValue(in).String()), &v); err != nil {
		t.Fatalf("the input is not JSON: %v", err)
	}
	return v
}

// pick follows a path such as "proposal.criteria[0].evidence" and returns
// the JSON found there.
func pick(t *testing.T, v any, path string) string {
	t.Helper()
	for part := range strings.SplitSeq(path, ".") {
		name, index, indexed := strings.Cut(part, "[")
		obj, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: %s is not in an object", path, name)
		}
		if v, ok = obj[name]; !ok {
			t.Fatalf("%s: no %s", path, name)
		}
		if indexed {
			n := 0
			for _, c := range strings.TrimSuffix(index, "]") {
				n = n*10 + int(c-'0')
			}
			list, ok := v.([]any)
			if !ok || n >= len(list) {
				t.Fatalf("%s: no element %d", path, n)
			}
			v = list[n]
		}
	}
	return string(mustJSON(t, v))
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func runDecision(t *testing.T, run map[string]any, review map[string]any) ast.Value {
	t.Helper()
	if review == nil {
		review = map[string]any{"required": true, "persona": "run-reviewer", "quorum": json.Number("1"), "why": "x"}
	}
	obj := map[string]any{"deny": []any{}, "review": review}
	if run != nil {
		obj["run"] = run
	}
	return astOf(t, obj)
}

func validRun() map[string]any {
	return map[string]any{
		"reviewed": true, "why": "run review policy always reviews completed runs", "review_policy": "always",
		"max_rounds": json.Number("4"),
		"criteria": []any{map[string]any{
			"id": "tests", "pass": false, "reason": "exited 1", "kind": "command_result", "required": true, "judged_by": "policy",
		}},
		"missing_work": []any{"criterion tests (command_result): exited 1"},
		"manual":       []any{"signoff"},
		"continuable":  true,
		"limits":       map[string]any{"max_items": json.Number("10"), "max_item_bytes": json.Number("999999"), "max_guidance_bytes": json.Number("0")},
	}
}

func TestParseDecisionRun(t *testing.T) {
	d, err := parseDecision(runDecision(t, validRun(), nil), gated.KindRun)
	if err != nil {
		t.Fatal(err)
	}
	want := &gated.RunPolicy{
		Reviewed: true, Why: "run review policy always reviews completed runs", ReviewPolicy: "always", MaxRounds: 4,
		Criteria:    []gated.CriterionEval{{ID: "tests", Reason: "exited 1", Kind: "command_result", Required: true, JudgedBy: "policy"}},
		MissingWork: []string{"criterion tests (command_result): exited 1"}, Manual: []string{"signoff"}, Continuable: true,
		// An oversize limit is capped, a zero one takes its default.
		Limits: gated.RunLimits{MaxItems: 10, MaxItemBytes: gated.CeilingRunMaxItemBytes, MaxGuidanceBytes: gated.DefaultRunMaxGuidanceBytes},
	}
	if got := mustJSON(t, d.Run); string(got) != string(mustJSON(t, want)) {
		t.Errorf("run = %s\nwant  %s", got, mustJSON(t, want))
	}

	// The least a run section may say.
	d, err = parseDecision(runDecision(t, map[string]any{"reviewed": false}, map[string]any{"required": false}), gated.KindRun)
	if err != nil {
		t.Fatal(err)
	}
	if d.Run.MaxRounds != engine.DefaultMaxRounds || d.Run.Limits != (gated.RunLimits{}).WithDefaults() || d.Run.Continuable {
		t.Errorf("minimal run = %+v", d.Run)
	}
}

func TestParseDecisionBlocked(t *testing.T) {
	review := map[string]any{"required": true, "persona": "", "quorum": json.Number("1"), "why": "x", "blocked": "only the worker"}
	d, err := parseDecision(runDecision(t, validRun(), review), gated.KindRun)
	if err != nil {
		t.Fatal(err)
	}
	if d.Review.Blocked != "only the worker" {
		t.Errorf("blocked = %q", d.Review.Blocked)
	}
	for _, tc := range []struct {
		note   string
		review map[string]any
	}{
		{note: "blocked as a number", review: map[string]any{"required": true, "blocked": json.Number("1")}},
		{note: "blocked without a required review", review: map[string]any{"required": false, "blocked": "only the worker"}},
	} {
		t.Run(tc.note, func(t *testing.T) {
			if _, err := parseDecision(runDecision(t, nil, tc.review), gated.KindAction); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestParseDecisionRunErrors(t *testing.T) {
	set := func(key string, value any) map[string]any {
		r := validRun()
		if value == nil {
			delete(r, key)
		} else {
			r[key] = value
		}
		return r
	}
	criterion := func(edit map[string]any) map[string]any {
		c := map[string]any{"id": "tests", "pass": true}
		for k, v := range edit {
			c[k] = v
		}
		return set("criteria", []any{c})
	}
	for _, tc := range []struct {
		note string
		kind gated.Kind
		run  any // nil leaves decision.run out
		want string
	}{
		{note: "missing for a run", kind: gated.KindRun, want: "decision.run is missing"},
		{note: "null for a run", kind: gated.KindRun, run: "null", want: "decision.run is null, want an object"},
		{note: "an object for an action", kind: gated.KindAction, run: validRun(), want: "want null for a proposal of kind action"},
		{note: "an object without a kind", kind: "", run: validRun(), want: "want null for a proposal of kind action"},
		{note: "reviewed missing", kind: gated.KindRun, run: set("reviewed", nil), want: "decision.run.reviewed must be a boolean"},
		{note: "reviewed but no review", kind: gated.KindRun, run: set("reviewed", false), want: "decision.run.reviewed is false but decision.review.required is true"},
		{note: "why a number", kind: gated.KindRun, run: set("why", json.Number("1")), want: "decision.run.why is number"},
		{note: "unknown review policy", kind: gated.KindRun, run: set("review_policy", "sometimes"), want: `review_policy "sometimes"`},
		{note: "max_rounds zero", kind: gated.KindRun, run: set("max_rounds", json.Number("0")), want: "decision.run.max_rounds 0 must be an integer from 1 to 100"},
		{note: "max_rounds a string", kind: gated.KindRun, run: set("max_rounds", "5"), want: "decision.run.max_rounds"},
		{note: "max_rounds a fraction", kind: gated.KindRun, run: set("max_rounds", json.Number("2.5")), want: "decision.run.max_rounds"},
		{note: "criteria an object", kind: gated.KindRun, run: set("criteria", map[string]any{}), want: "decision.run.criteria is object"},
		{note: "criterion a string", kind: gated.KindRun, run: set("criteria", []any{"tests"}), want: "decision.run.criteria[0]: string"},
		{note: "criterion without id", kind: gated.KindRun, run: criterion(map[string]any{"id": ""}), want: "id must be a non-empty string"},
		{note: "criterion pass a string", kind: gated.KindRun, run: criterion(map[string]any{"pass": "yes"}), want: "pass must be a boolean"},
		{note: "criterion required a string", kind: gated.KindRun, run: criterion(map[string]any{"required": "yes"}), want: `criterion "tests": required`},
		{note: "criterion judged by a reviewer", kind: gated.KindRun, run: criterion(map[string]any{"judged_by": "reviewer:x"}), want: `judged_by "reviewer:x"`},
		{note: "criterion judged twice", kind: gated.KindRun, run: set("criteria", []any{
			map[string]any{"id": "tests", "pass": true}, map[string]any{"id": "tests", "pass": false},
		}), want: `criterion "tests" is judged twice`},
		{note: "missing_work with a number", kind: gated.KindRun, run: set("missing_work", []any{"a", json.Number("1")}), want: "decision.run.missing_work must be an array of strings"},
		{note: "manual a string", kind: gated.KindRun, run: set("manual", "signoff"), want: "decision.run.manual must be an array of strings"},
		{note: "continuable a string", kind: gated.KindRun, run: set("continuable", "yes"), want: "decision.run.continuable is string"},
		{note: "limits a list", kind: gated.KindRun, run: set("limits", []any{}), want: "decision.run.limits is array"},
		{note: "limits unknown key", kind: gated.KindRun, run: set("limits", map[string]any{"max_bytes": json.Number("1")}), want: `unknown key "max_bytes"`},
		{note: "limit negative", kind: gated.KindRun, run: set("limits", map[string]any{"max_items": json.Number("-1")}), want: "decision.run.limits.max_items -1"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			var run map[string]any
			var v ast.Value
			switch r := tc.run.(type) {
			case map[string]any:
				run = r
				v = runDecision(t, run, nil)
			case string: // "null"
				obj := runDecision(t, nil, nil).(ast.Object)
				obj.Insert(ast.StringTerm("run"), ast.NullTerm())
				v = obj
			default:
				v = runDecision(t, nil, nil)
			}
			_, err := parseDecision(v, tc.kind)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestParseDecisionRunNullForActions(t *testing.T) {
	for _, run := range []*ast.Term{nil, ast.NullTerm()} {
		obj := runDecision(t, nil, nil).(ast.Object)
		if run != nil {
			obj.Insert(ast.StringTerm("run"), run)
		}
		d, err := parseDecision(obj, gated.KindAction)
		if err != nil || d.Run != nil {
			t.Errorf("run %v: decision.run = %+v, err %v; want nil and no error", run, d.Run, err)
		}
	}
}

// TestInputBudget: input.budget holds every counter, zeros when the
// engine keeps none, and an input with counters leaves the shared zero
// value as it was.
func TestInputBudget(t *testing.T) {
	zero := `{"budget_refusals_10m":0,"holds_pending":0,"proposals":0,"reads":0,"refusals_10m":0,"reviews_in_flight":0,"tokens":0}`
	for _, b := range []*gated.BudgetState{nil, {}} {
		in := inputJSON(t, engine.PolicyInput{Proposal: writeProposal(), Budget: b})
		for _, scope := range []string{"budget.tenant", "budget.agent"} {
			if g := pick(t, in, scope); g != zero {
				t.Errorf("%s with budget %v = %s\nwant %s", scope, b, g, zero)
			}
		}
	}
	b := &gated.BudgetState{
		Tenant: gated.BudgetCounters{Proposals: 1 << 40, Reads: 513, Tokens: 7, ReviewsInFlight: 2, HoldsPending: 3, Refusals: 4, BudgetRefusals: 5},
		Agent:  gated.BudgetCounters{Proposals: 9, Refusals: -1},
	}
	in := inputJSON(t, engine.PolicyInput{Proposal: writeProposal(), Budget: b})
	for path, want := range map[string]string{
		"budget.tenant": `{"budget_refusals_10m":5,"holds_pending":3,"proposals":1099511627776,"reads":513,"refusals_10m":4,"reviews_in_flight":2,"tokens":7}`,
		"budget.agent":  `{"budget_refusals_10m":0,"holds_pending":0,"proposals":9,"reads":0,"refusals_10m":-1,"reviews_in_flight":0,"tokens":0}`,
	} {
		if g := pick(t, in, path); g != want {
			t.Errorf("%s = %s\nwant %s", path, g, want)
		}
	}
	if g := pick(t, inputJSON(t, engine.PolicyInput{Proposal: writeProposal()}), "budget.tenant"); g != zero {
		t.Errorf("budget.tenant after an input with counters = %s\nwant %s", g, zero)
	}
}
