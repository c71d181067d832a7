package policies

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

var planNow = time.Date(2026, 12, 24, 12, 0, 0, 0, time.UTC)

// agree evaluates in with e's planned evaluator and with topdown and fails
// unless both fail or both return the same decision value.
func agree(t testing.TB, e *Evaluator, in engine.PolicyInput, what string) {
	t.Helper()
	if in.Now.IsZero() {
		in.Now = planNow
	}
	want, werr := e.evalTopdown(context.Background(), in)
	got, gerr := e.evalPlan(context.Background(), in)
	switch {
	case (werr == nil) != (gerr == nil):
		t.Fatalf("%s: topdown error %v, planned error %v\n  topdown: %v\n  planned: %v", what, werr, gerr, want, got)
	case werr == nil && ast.Compare(want, got) != 0:
		t.Fatalf("%s: decisions differ\n  topdown: %v\n  planned: %v", what, want, got)
	}
}

func mustPlanned(t testing.TB, b *Bundle) *Evaluator {
	t.Helper()
	e, err := Compile(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if st := e.Plan(); st.Evaluator != EvaluatorPlanned {
		t.Fatalf("the bundle is not planned: %+v", st)
	}
	return e
}

func TestDefaultBundleIsPlanned(t *testing.T) {
	e := mustEvaluator(t)
	if st := e.Plan(); st.Evaluator != EvaluatorPlanned || st.Reason != "" {
		t.Fatalf("default bundle: %+v, want the planned evaluator", st)
	}
	off, err := Compile(t.Context(), mustDefault(t), Topdown())
	if err != nil {
		t.Fatal(err)
	}
	if st := off.Plan(); st.Evaluator != EvaluatorTopdown || off.plan != nil {
		t.Fatalf("with Topdown(): %+v", st)
	}
}

func mustDefault(t testing.TB) *Bundle {
	t.Helper()
	b, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// configured is the default bundle with data that switches on every
// setting the rules read.
func configured(t testing.TB) *Bundle {
	t.Helper()
	b := mustDefault(t)
	var config map[string]any
	err := json.Unmarshal([]byte(`{
		"default_persona": "reviewer",
		"production_tags": ["production", "prod"],
		"skip_review_actions": ["cache_*", "host_list_*"],
		"denied_actions": {"*": ["db_drop_*"], "acme": ["*_skill"], "globex": ["k8s_*"]},
		"tenant_wide_quorum": 3,
		"parallel_operation_window": "30m",
		"target_cooldown": "15m",
		"persona_routes": [{"actions": ["db_*"], "persona": "dba"}, {"actions": ["k8s_*", "helm_*"], "persona": "platform"}],
		"change_freezes": [
			{"name": "year-end", "start": "2026-12-20T00:00:00Z", "end": "2027-01-04T00:00:00Z", "tenants": ["acme"], "actions": ["host_*"], "allow_incidents": true, "reason": "year-end change freeze"},
			{"name": "past", "start": "2025-01-01T00:00:00Z", "end": "2025-01-02T00:00:00Z"}
		],
		"run_review": {"policy": "on_success", "personas": ["run-reviewer", "reviewer"], "quorum": 1, "max_rounds": 3,
			"limits": {"max_items": 5},
			"tenants": {"globex": {"policy": "always", "quorum": 2}, "initech": {"policy": "none"}}}
	}`), &config)
	if err != nil {
		t.Fatal(err)
	}
	b.Data["gated"].(map[string]any)["config"] = config
	return b
}

// corpus is a spread of inputs over the default rules: every class and
// blast radius, the flags, self review, routed actions, personas that may
// and may not review, histories inside and outside the windows, and runs
// in several rounds.
func corpus() []engine.PolicyInput {
	personas := []*engine.Persona{
		nil,
		reviewerPersona,
		{Name: "dba", PermissionMode: "read-only", Tools: []string{"get_sop_text", "db_query"}},
		{Name: "platform", PermissionMode: "read-only", Plugin: "llm", Tools: []string{"get_proposal"}},
		{Name: "broad", PermissionMode: "default", Tools: []string{"get_sop_text", "run_shell", "ns.web_skill", "kill_process"}, DisallowedTools: []string{"get_*", "*_shell"}},
	}
	history := [][]gated.Verdict{
		nil,
		{{ProposalID: "h1", Tenant: "acme", Action: "host_restart_service", Outcome: gated.OutcomeApproved, Agent: "other", DecidedAt: planNow.Add(-5 * time.Minute)}},
		{{ProposalID: "h2", Tenant: "acme", Action: "host_restart_service", Outcome: gated.OutcomeApproved, Agent: "agent-7", DecidedAt: planNow.Add(-time.Minute)},
			{ProposalID: "h3", Tenant: "acme", Action: "host_restart_service", Outcome: gated.OutcomeRejected, Agent: "other", DecidedAt: planNow.Add(-time.Minute)},
			{ProposalID: "p1", Tenant: "acme", Action: "host_restart_service", Outcome: gated.OutcomeApproved, Agent: "other", DecidedAt: planNow.Add(-time.Minute)}},
		{{ProposalID: "h4", Tenant: "acme", Action: "host_restart_service", Outcome: gated.OutcomeApproved, DecidedAt: planNow.Add(-2 * time.Hour)}},
	}
	mutations := []func(*gated.Proposal){
		func(*gated.Proposal) {},
		func(p *gated.Proposal) { p.Class, p.Action = gated.ClassRead, "host_list_services" },
		func(p *gated.Proposal) { p.Class = gated.ClassRead },
		func(p *gated.Proposal) { p.Class, p.Action = gated.ClassRead, "unknown_read" },
		func(p *gated.Proposal) { p.Class, p.BlastRadius = gated.ClassDestructive, gated.BlastTenantWide },
		func(p *gated.Proposal) { p.Flags.SkipReview = true },
		func(p *gated.Proposal) { p.Flags.ForceApprove, p.Flags.SkipReview = true, true },
		func(p *gated.Proposal) { p.Flags.ForceApproveNoSOP, p.Flags.UserConfirmed = true, true },
		func(p *gated.Proposal) {
			p.Action, p.Flags.ForceApproveNoSOP, p.Flags.UserConfirmed = "db_vacuum_table", true, true
		},
		func(p *gated.Proposal) { p.Action, p.Target = "db_drop_table", map[string]any{"environment": "prod"} },
		func(p *gated.Proposal) { p.Action, p.Tenant = "web_skill", "acme" },
		func(p *gated.Proposal) { p.Action, p.Tenant = "k8s_scale_deployment", "globex" },
		func(p *gated.Proposal) { p.Action = "rotate_db_credentials" },
		func(p *gated.Proposal) { p.Action = "cache_flush" },
		func(p *gated.Proposal) { p.RequestedBy = &gated.RequestedBy{Agent: "reviewer"} },
		func(p *gated.Proposal) { p.RequestedBy = &gated.RequestedBy{Agent: "agent-7"} },
		func(p *gated.Proposal) { p.Reviewer = "platform" },
		func(p *gated.Proposal) { p.IncidentID = "INC-1" },
		func(p *gated.Proposal) { p.Target = map[string]any{"tags": []any{"staging", 3, nil}} },
	}
	var out []engine.PolicyInput
	for i, mutate := range mutations {
		p := writeProposal()
		p.ID = fmt.Sprintf("p%d", i+1)
		mutate(p)
		for j, persona := range personas {
			out = append(out, engine.PolicyInput{Proposal: p, Persona: persona, History: history[(i+j)%len(history)]})
		}
	}
	runMutations := []func(*gated.Proposal){
		func(*gated.Proposal) {},
		func(p *gated.Proposal) { p.Run.Status = gated.RunFailed },
		func(p *gated.Proposal) { p.Run.Status, p.Run.Round = gated.RunCanceled, 2 },
		func(p *gated.Proposal) { p.Run.Round = 4 },
		func(p *gated.Proposal) { p.Tenant = "globex" },
		func(p *gated.Proposal) { p.Tenant = "initech" },
		func(p *gated.Proposal) { p.RequestedBy = &gated.RequestedBy{Agent: "w-3"} },
		func(p *gated.Proposal) {
			p.Criteria[0].Evidence = map[string]any{"command": "go test ./...", "exit_code": json.Number("2")}
			p.Criteria[1].Evidence = map[string]any{"path": "CHANGELOG.md", "content": "nothing here"}
		},
		func(p *gated.Proposal) { p.Criteria = p.Criteria[:1]; p.Criteria[0].Evidence = nil },
		func(p *gated.Proposal) { p.Flags.SkipReview = true },
	}
	records := []*gated.RunRecord{nil, continued(1), continued(1, 2, 3)}
	runPersonas := []*engine.Persona{runReviewerPersona, reviewerPersona, {Name: "w-3", PermissionMode: "read-only"}}
	for i, mutate := range runMutations {
		for j, record := range records {
			p := runProposal()
			p.ID = fmt.Sprintf("run-%d-%d", i, j)
			if record != nil {
				p.Run.Round = len(record.Rounds) + 1
			}
			mutate(p)
			out = append(out, engine.PolicyInput{Proposal: p, Persona: runPersonas[(i+j)%len(runPersonas)], RunRecord: record})
		}
	}
	return out
}

// TestPlannedAgreesWithTopdown decides the corpus with both evaluators,
// over the default data and over data that turns on every setting.
func TestPlannedAgreesWithTopdown(t *testing.T) {
	for name, b := range map[string]*Bundle{"default data": mustDefault(t), "configured": configured(t)} {
		t.Run(name, func(t *testing.T) {
			e := mustPlanned(t, b)
			ins := corpus()
			for i, in := range ins {
				agree(t, e, in, fmt.Sprintf("input %d (%s, %s)", i, in.Proposal.ID, in.Proposal.Action))
			}
			t.Logf("%d inputs agree", len(ins))
		})
	}
}

// TestPlannedDecisions pins a few planned decisions by their content, so
// the two evaluators cannot agree on a wrong answer unnoticed.
func TestPlannedDecisions(t *testing.T) {
	e := mustPlanned(t, configured(t))
	cases := []struct {
		note   string
		mutate func(*gated.Proposal)
		rules  []string
		review bool
		route  string
	}{
		{note: "frozen host action", mutate: func(*gated.Proposal) {}, rules: []string{"change_freeze"}, review: true, route: "route_class"},
		{note: "an incident passes the freeze", mutate: func(p *gated.Proposal) { p.IncidentID = "INC-9" }, review: true, route: "route_class"},
		{note: "skill denied for acme", mutate: func(p *gated.Proposal) { p.Action = "web_skill" }, rules: []string{"denied_action"}, review: true, route: "route_class"},
		{note: "skip_review waived action", mutate: func(p *gated.Proposal) { p.Action = "cache_flush" }, route: "route_skip"},
		{note: "catalogued read", mutate: func(p *gated.Proposal) { p.Action, p.Class = "host_list_services", gated.ClassRead }, route: "route_read"},
		{note: "admin skip_review", mutate: func(p *gated.Proposal) { p.Flags.SkipReview = true; p.IncidentID = "INC-9" }, rules: []string{"no_skip_review"}, review: true, route: "route_class"},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			p := writeProposal()
			tc.mutate(p)
			d, err := e.Evaluate(t.Context(), engine.PolicyInput{Proposal: p, Persona: reviewerPersona, Now: planNow})
			if err != nil {
				t.Fatal(err)
			}
			if got := denyRules(d); strings.Join(got, ",") != strings.Join(tc.rules, ",") {
				t.Errorf("denies %v, want %v", got, tc.rules)
			}
			if d.Review.Required != tc.review {
				t.Errorf("review required %v, want %v", d.Review.Required, tc.review)
			}
			if d.Review.Rule != tc.route {
				t.Errorf("routing rule %q, want %q", d.Review.Rule, tc.route)
			}
		})
	}
}

// TestPlanFallsBackToTopdown: a bundle whose plan uses with, or a built-in
// with side effects, is decided by topdown, and says why.
func TestPlanFallsBackToTopdown(t *testing.T) {
	for _, tc := range []struct{ note, module, reason string }{
		{note: "dynamic reference into rules", reason: "CallDynamicStmt", module: `package gated
deny contains {"rule": "dynamic", "message": "m"} if data.gated.tenants[input.proposal.tenant] == "blocked"`},
		{note: "with", reason: "WithStmt", module: `package gated
probe if input.proposal.action == "never"
deny contains {"rule": "with_probe", "message": "m"} if {
	input.proposal.tenant == "nobody"
	probe with input.proposal.action as "never"
}`},
		{note: "http.send", reason: "http.send", module: `package gated
deny contains {"rule": "remote", "message": "m"} if {
	input.proposal.tenant == "nobody"
	http.send({"method": "get", "url": "http://127.0.0.1:9"}).status_code == 200
}`},
	} {
		t.Run(tc.note, func(t *testing.T) {
			b := mustDefault(t)
			b.Modules["extra.rego"] = tc.module
			b.Modules["tenants.rego"] = "package gated.tenants\n\nacme := \"open\"\n\nglobex := \"blocked\"\n"
			e, err := Compile(t.Context(), b)
			if err != nil {
				t.Fatal(err)
			}
			st := e.Plan()
			if st.Evaluator != EvaluatorTopdown || !strings.Contains(st.Reason, tc.reason) {
				t.Fatalf("plan status %+v, want topdown because of %s", st, tc.reason)
			}
			d, err := e.Evaluate(t.Context(), engine.PolicyInput{Proposal: writeProposal(), Persona: reviewerPersona, Now: planNow})
			if err != nil || !d.Review.Required {
				t.Fatalf("topdown decision %+v, %v", d, err)
			}
		})
	}
}

// TestPlannedHonoursCancel: a canceled context stops a long evaluation
// with an error rather than a decision.
func TestPlannedHonoursCancel(t *testing.T) {
	e := mustEvaluator(t)
	history := make([]gated.Verdict, 5000)
	for i := range history {
		history[i] = gated.Verdict{ProposalID: fmt.Sprintf("h%d", i), Outcome: gated.OutcomeRejected, DecidedAt: planNow}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := e.Evaluate(ctx, engine.PolicyInput{Proposal: writeProposal(), Persona: reviewerPersona, History: history, Now: planNow}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled evaluation: %v, want context.Canceled", err)
	}
}

// TestExplainComparesEvaluators: policy eval's Explain decides with both
// and reports the fired rules of topdown's run.
func TestExplainComparesEvaluators(t *testing.T) {
	e := mustEvaluator(t)
	p := writeProposal()
	p.Flags.SkipReview = true
	d, fired, err := e.Explain(t.Context(), engine.PolicyInput{Proposal: p, Persona: reviewerPersona})
	if err != nil {
		t.Fatal(err)
	}
	if got := denyRules(d); len(got) != 1 || got[0] != "no_skip_review" || len(fired) == 0 {
		t.Fatalf("denies %v, %d fired rules", got, len(fired))
	}
}

// TestPersonaTermCoversEveryField: a persona changed in place, in any
// field the policy input carries (a list's element included), never gets
// the value cached for what it was.
func TestPersonaTermCoversEveryField(t *testing.T) {
	fresh := func() *engine.Persona {
		return &engine.Persona{Name: "n", Description: "d", Model: "m", MaxTurns: 3, PermissionMode: "read-only",
			Tools: []string{"a"}, DisallowedTools: []string{"b"}, RequiredGates: []string{"c"}, Plugin: "p"}
	}
	typ := reflect.TypeFor[engine.Persona]()
	for i := range typ.NumField() {
		t.Run(typ.Field(i).Name, func(t *testing.T) {
			p := fresh()
			personaTerm(p)
			f := reflect.ValueOf(p).Elem().Field(i)
			switch f.Kind() {
			case reflect.String:
				f.SetString(f.String() + "x")
			case reflect.Int, reflect.Int64:
				f.SetInt(f.Int() + 1)
			case reflect.Bool:
				f.SetBool(!f.Bool())
			case reflect.Slice:
				// In place: the same backing array with another element.
				f.Index(0).SetString("x")
			default:
				t.Fatalf("a persona field of kind %s: teach this test to change it", f.Kind())
			}
			want := personaValue(p)
			if got := personaTerm(p); ast.Compare(got.Value, want) != 0 {
				t.Fatalf("changed in place: input %v, want %v", got, want)
			}
		})
	}
	p := fresh()
	if personaTerm(p) != personaTerm(p) {
		t.Error("an unchanged persona is not served from the cache")
	}
}

func TestFlagsTerm(t *testing.T) {
	for i := range 16 {
		f := gated.Flags{SkipReview: i&1 != 0, ForceApprove: i&2 != 0, ForceApproveNoSOP: i&4 != 0, UserConfirmed: i&8 != 0}
		want := ast.MustParseTerm(fmt.Sprintf(`{"skip_review": %v, "force_approve": %v, "force_approve_no_sop": %v, "user_confirmed": %v}`,
			f.SkipReview, f.ForceApprove, f.ForceApproveNoSOP, f.UserConfirmed))
		if got := flagsTerm(f); ast.Compare(want.Value, got.Value) != 0 {
			t.Errorf("flags %+v: input %v, want %v", f, got, want)
		}
	}
}

// TestExplainFullTracesBothEvaluators: the full explanation holds
// topdown's trace and the rules the planned evaluator evaluated, which
// include the deny and routing rules that decided; a bundle on topdown
// alone has no planned rules.
func TestExplainFullTracesBothEvaluators(t *testing.T) {
	p := writeProposal()
	p.Flags.SkipReview = true
	in := engine.PolicyInput{Proposal: p, Persona: reviewerPersona, Now: planNow}
	for _, tc := range []struct {
		name      string
		opts      []CompileOption
		evaluator string
		planned   []string
	}{
		{name: "planned", evaluator: EvaluatorPlanned, planned: []string{"data.gated.deny", "data.gated.review", "data.gated.decision"}},
		{name: "topdown", opts: []CompileOption{Topdown()}, evaluator: EvaluatorTopdown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mustDefault(t)
			e, err := Compile(t.Context(), b, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			x, err := e.ExplainFull(t.Context(), in)
			if err != nil {
				t.Fatal(err)
			}
			if got := denyRules(x.Decision); len(got) != 1 || got[0] != "no_skip_review" || x.Decision.Review.Rule != "route_class" {
				t.Fatalf("denies %v, route %q", got, x.Decision.Review.Rule)
			}
			if x.Evaluator != tc.evaluator {
				t.Errorf("evaluator %q, want %q", x.Evaluator, tc.evaluator)
			}
			for _, rule := range tc.planned {
				if !slices.Contains(x.Planned, rule) {
					t.Errorf("planned rules %v lack %s", x.Planned, rule)
				}
			}
			t.Logf("planned evaluator: %v", x.Planned)
			if tc.planned == nil && x.Planned != nil {
				t.Errorf("topdown alone, yet planned rules %v", x.Planned)
			}
			for _, want := range []string{"Enter data.gated.decision", "hard_rules.rego:", "Exit data.gated.deny"} {
				if !strings.Contains(x.Trace, want) {
					t.Errorf("trace lacks %q:\n%.2000s", want, x.Trace)
				}
			}
		})
	}
}
