package policies

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/util"

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
	history := [][]engine.Verdict{
		nil,
		{{ProposalID: "h1", Tenant: "acme", Action: "host_restart_service", Outcome: engine.OutcomeApproved, Agent: "other", DecidedAt: planNow.Add(-5 * time.Minute)}},
		{{ProposalID: "h2", Tenant: "acme", Action: "host_restart_service", Outcome: engine.OutcomeApproved, Agent: "agent-7", DecidedAt: planNow.Add(-time.Minute)},
			{ProposalID: "h3", Tenant: "acme", Action: "host_restart_service", Outcome: engine.OutcomeRejected, Agent: "other", DecidedAt: planNow.Add(-time.Minute)},
			{ProposalID: "p1", Tenant: "acme", Action: "host_restart_service", Outcome: engine.OutcomeApproved, Agent: "other", DecidedAt: planNow.Add(-time.Minute)}},
		{{ProposalID: "h4", Tenant: "acme", Action: "host_restart_service", Outcome: engine.OutcomeApproved, DecidedAt: planNow.Add(-2 * time.Hour)}},
	}
	mutations := []func(*engine.Proposal){
		func(*engine.Proposal) {},
		func(p *engine.Proposal) { p.Class, p.Action = engine.ClassRead, "host_list_services" },
		func(p *engine.Proposal) { p.Class = engine.ClassRead },
		func(p *engine.Proposal) { p.Class, p.Action = engine.ClassRead, "unknown_read" },
		func(p *engine.Proposal) { p.Class, p.BlastRadius = engine.ClassDestructive, engine.BlastTenantWide },
		func(p *engine.Proposal) { p.Flags.SkipReview = true },
		func(p *engine.Proposal) { p.Flags.ForceApprove, p.Flags.SkipReview = true, true },
		func(p *engine.Proposal) { p.Flags.ForceApproveNoSOP, p.Flags.UserConfirmed = true, true },
		func(p *engine.Proposal) {
			p.Action, p.Flags.ForceApproveNoSOP, p.Flags.UserConfirmed = "db_vacuum_table", true, true
		},
		func(p *engine.Proposal) { p.Action, p.Target = "db_drop_table", map[string]any{"environment": "prod"} },
		func(p *engine.Proposal) { p.Action, p.Tenant = "web_skill", "acme" },
		func(p *engine.Proposal) { p.Action, p.Tenant = "k8s_scale_deployment", "globex" },
		func(p *engine.Proposal) { p.Action = "rotate_db_credentials" },
		func(p *engine.Proposal) { p.Action = "cache_flush" },
		func(p *engine.Proposal) { p.RequestedBy = &engine.RequestedBy{Agent: "reviewer"} },
		func(p *engine.Proposal) { p.RequestedBy = &engine.RequestedBy{Agent: "agent-7"} },
		func(p *engine.Proposal) { p.Reviewer = "platform" },
		func(p *engine.Proposal) { p.IncidentID = "INC-1" },
		func(p *engine.Proposal) { p.Target = map[string]any{"tags": []any{"staging", 3, nil}} },
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
	runMutations := []func(*engine.Proposal){
		func(*engine.Proposal) {},
		func(p *engine.Proposal) { p.Run.Status = engine.RunFailed },
		func(p *engine.Proposal) { p.Run.Status, p.Run.Round = engine.RunCanceled, 2 },
		func(p *engine.Proposal) { p.Run.Round = 4 },
		func(p *engine.Proposal) { p.Tenant = "globex" },
		func(p *engine.Proposal) { p.Tenant = "initech" },
		func(p *engine.Proposal) { p.RequestedBy = &engine.RequestedBy{Agent: "w-3"} },
		func(p *engine.Proposal) {
			p.Criteria[0].Evidence = map[string]any{"command": "go test ./...", "exit_code": json.Number("2")}
			p.Criteria[1].Evidence = map[string]any{"path": "CHANGELOG.md", "content": "nothing here"}
		},
		func(p *engine.Proposal) { p.Criteria = p.Criteria[:1]; p.Criteria[0].Evidence = nil },
		func(p *engine.Proposal) { p.Flags.SkipReview = true },
	}
	records := []*engine.RunRecord{nil, continued(1), continued(1, 2, 3)}
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
		mutate func(*engine.Proposal)
		rules  []string
		review bool
	}{
		{note: "frozen host action", mutate: func(*engine.Proposal) {}, rules: []string{"change_freeze"}, review: true},
		{note: "an incident passes the freeze", mutate: func(p *engine.Proposal) { p.IncidentID = "INC-9" }, review: true},
		{note: "skill denied for acme", mutate: func(p *engine.Proposal) { p.Action = "web_skill" }, rules: []string{"denied_action"}, review: true},
		{note: "skip_review waived action", mutate: func(p *engine.Proposal) { p.Action = "cache_flush" }},
		{note: "admin skip_review", mutate: func(p *engine.Proposal) { p.Flags.SkipReview = true; p.IncidentID = "INC-9" }, rules: []string{"no_skip_review"}, review: true},
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
		})
	}
}

// evalBoth runs query data.gated.decision over modules and data with
// topdown and with the planned evaluator; unsupported reports a plan the
// machine does not run.
func evalBoth(t *testing.T, modules map[string]string, data map[string]any, input ast.Value) (want, got *ast.Term, werr, gerr error, unsupported error) {
	t.Helper()
	ctx := context.Background()
	if data == nil {
		data = map[string]any{}
	}
	b := &Bundle{Modules: modules, Data: data}
	mods, err := b.parse(false)
	if err != nil {
		t.Fatal(err)
	}
	opts := []func(*rego.Rego){rego.Query(Query), rego.StrictBuiltinErrors(true), rego.Store(inmem.NewFromObject(data))}
	for _, m := range mods {
		opts = append(opts, rego.ParsedModule(m))
	}
	pq, err := rego.New(opts...).PrepareForEval(ctx)
	if err != nil {
		t.Fatalf("topdown prepare: %v", err)
	}
	rs, werr := pq.Eval(ctx, rego.EvalParsedInput(input), rego.EvalTime(planNow), rego.EvalGenerateJSON(astResult))
	if werr == nil && len(rs) == 1 {
		want = ast.NewTerm(rs[0].Expressions[0].Value.(ast.Value))
	}
	pl, err := planBundle(ctx, b)
	if err != nil {
		if !errors.Is(err, errUnsupportedPlan) {
			t.Fatalf("planning: %v", err)
		}
		return want, nil, werr, nil, err
	}
	d, err := ast.InterfaceToValue(data)
	if err != nil {
		t.Fatal(err)
	}
	got, gerr = pl.eval(ctx, ast.NewTerm(input), ast.NewTerm(d), planNow)
	return want, got, werr, gerr, nil
}

// semantics are small policies over the language's corners: else chains,
// functions with several definitions, every, not, iteration over arrays,
// objects and sets, comprehensions, data references with variables,
// membership, arithmetic, built-in errors and conflicts.
var semantics = map[string]string{
	"else and functions": `package gated
default grade := "none"
grade := "high" if input.n > 10
else := "mid" if input.n > 5
else := "low" if is_number(input.n)
sign(x) := "neg" if x < 0
sign(x) := "pos" if x > 0
sign(0) := "zero"
decision := {"grade": grade, "sign": object.get({"s": sign(input.n)}, "s", "n/a")}`,
	"every, not and some": `package gated
all_small if every x in input.xs { x < 10 }
any_big if { some x in input.xs; x > 100 }
none_big if not any_big
default all_small := false
decision := {"all_small": all_small, "none_big": object.get({"x": none_big}, "x", false), "has_a": "a" in input.xs, "kv": member_kv}
member_kv := (1, 2 in input.xs)
`,
	"iteration": `package gated
keys := {k | some k, _ in input.obj}
vals := [v | some v in input.obj]
pairs := {k: v | some k, v in input.obj; is_number(v); v > 1}
from_set := [x | some x in {y | some y in input.xs}]
idx := [i | some i, x in input.xs; x == input.n]
cross := [[x, y] | some x in input.xs; some y in input.xs; x < y]
first := [x | some x in input.xs][0]
decision := {"keys": keys, "vals": vals, "pairs": pairs, "from_set": from_set, "idx": idx, "cross": cross, "first": object.get({"f": first}, "f", null)}`,
	"data with variables": `package gated
limit := data.gated.limits[input.tenant]
over := [name | some name, l in data.gated.limits; l < input.n]
deep := data.gated.nested[input.tenant][input.key]
decision := {"limit": object.get({"l": limit}, "l", -1), "over": over, "deep": object.get({"d": deep}, "d", null), "all": data.gated.limits}`,
	"partial rules": `package gated
deny contains sprintf("%v is big", [x]) if { some x in input.xs; x > 2 }
deny contains "no tenant" if not input.tenant
tags[t] := count(t) if { some t in input.tags; is_string(t) }
decision := {"deny": deny, "n": count(deny), "tags": tags}`,
	"strings and numbers": `package gated
decision := {
	"s": sprintf("%s/%d/%v", [input.tenant, 3, input.xs]),
	"g": glob.match("a.*", ["."], input.key),
	"g0": glob.match("*_skill", null, input.key),
	"r": regex.match("^[a-z]+$", input.key),
	"u": upper(input.key),
	"sp": split(input.key, "."),
	"c": concat("-", ["a", input.key]),
	"m": input.n * 3 + 0.5,
	"d": input.n / 4,
	"mod": input.n % 3,
	"rnd": round(input.n / 3),
	"cmp": [input.n < 3, input.key > "m", input.xs == [1, 2, 3]],
	"j": json.marshal({"b": [1, {"c": input.key}], "a": {"x", "y"}}),
	"srt": sort(input.xs),
	"u2": object.union({"a": 1, "b": {"c": 2}}, {"b": {"d": 3}}),
	"get": object.get(input, ["obj", "a"], "none"),
}`,
	"errors": `package gated
decision := {"n": to_number(input.key)} if input.mode == "builtin"
else := {"n": input.n / 0} if input.mode == "divide"
else := {"n": x} if input.mode == "conflict"
else := {"n": f(1)} if input.mode == "function"
else := {"n": input.n} if input.mode != "undefined"
x := 1 if input.n
x := 2 if input.n
f(_) := 1
f(_) := 2 if input.n
`,
}

var semanticsInputs = []string{
	`{"n": 7, "xs": [1, 2, 3], "obj": {"b": 2, "a": 1, "c": "three"}, "tenant": "acme", "key": "a.b", "tags": ["x", "yy", 3], "mode": "ok"}`,
	`{"n": 12, "xs": [], "obj": {}, "tenant": "globex", "key": "web_skill", "tags": [], "mode": "builtin"}`,
	`{"n": -2, "xs": [5, 5, 200], "obj": {"k": [1]}, "key": "Z", "mode": "divide"}`,
	`{"n": 0, "xs": [3, 1, 2], "tenant": "nobody", "key": "abc", "mode": "conflict"}`,
	`{"n": "text", "xs": "not a list", "obj": [1, 2], "tenant": 5, "key": "", "mode": "function"}`,
	`{"mode": "undefined"}`,
	`{}`,
}

var semanticsData = map[string]any{"gated": map[string]any{
	"limits": map[string]any{"acme": json.Number("5"), "globex": json.Number("10"), "initech": json.Number("1.5")},
	"nested": map[string]any{"acme": map[string]any{"a.b": "found", "abc": []any{"x"}}},
}}

// TestPlannedSemantics decides the semantics policies for every input with
// both evaluators: the same value, both undefined, or both an error.
func TestPlannedSemantics(t *testing.T) {
	for name, src := range semantics {
		t.Run(name, func(t *testing.T) {
			for i, raw := range semanticsInputs {
				var v any
				if err := util.UnmarshalJSON([]byte(raw), &v); err != nil {
					t.Fatal(err)
				}
				input, err := ast.InterfaceToValue(v)
				if err != nil {
					t.Fatal(err)
				}
				want, got, werr, gerr, unsupported := evalBoth(t, map[string]string{"p.rego": src}, semanticsData, input)
				if unsupported != nil {
					t.Fatalf("not planned: %v", unsupported)
				}
				switch {
				case (werr == nil) != (gerr == nil):
					t.Fatalf("input %d: topdown error %v, planned error %v (planned %v)", i, werr, gerr, got)
				case werr != nil:
					continue
				case (want == nil) != (got == nil):
					t.Fatalf("input %d: topdown %v, planned %v", i, want, got)
				case want != nil && ast.Compare(want.Value, got.Value) != 0:
					t.Fatalf("input %d differs\n  topdown: %v\n  planned: %v", i, want, got)
				}
			}
		})
	}
}

// TestPlannedErrors checks that the error inputs above are errors at all,
// so TestPlannedSemantics' "both an error" is not both wrong.
func TestPlannedErrors(t *testing.T) {
	for _, mode := range []string{"builtin", "divide", "conflict", "function"} {
		input := ast.MustParseTerm(fmt.Sprintf(`{"n": 1, "key": "abc", "mode": %q}`, mode)).Value
		_, got, _, gerr, _ := evalBoth(t, map[string]string{"p.rego": semantics["errors"]}, nil, input)
		if gerr == nil {
			t.Errorf("%s: planned decided %v, want an error", mode, got)
		}
	}
	input := ast.MustParseTerm(`{"mode": "undefined"}`).Value
	if _, got, _, gerr, _ := evalBoth(t, map[string]string{"p.rego": semantics["errors"]}, nil, input); gerr != nil || got != nil {
		t.Errorf("undefined: planned %v, %v; want undefined", got, gerr)
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
	history := make([]engine.Verdict, 5000)
	for i := range history {
		history[i] = engine.Verdict{ProposalID: fmt.Sprintf("h%d", i), Outcome: engine.OutcomeRejected, DecidedAt: planNow}
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

// TestPersonaKeyCoversEveryField: two personas that build different input
// values never share a cache key.
func TestPersonaKeyCoversEveryField(t *testing.T) {
	base := engine.Persona{Name: "n", Description: "d", Model: "m", MaxTurns: 3, PermissionMode: "read-only",
		Tools: []string{"a"}, DisallowedTools: []string{"b"}, RequiredGates: []string{"c"}, Plugin: "p"}
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		changed := base
		changed.Tools = append([]string(nil), base.Tools...)
		changed.DisallowedTools = append([]string(nil), base.DisallowedTools...)
		changed.RequiredGates = append([]string(nil), base.RequiredGates...)
		f := reflect.ValueOf(&changed).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Int:
			f.SetInt(f.Int() + 1)
		case reflect.Slice:
			if f.Type().Elem().Kind() != reflect.String {
				continue
			}
			f.Set(reflect.Append(f, reflect.ValueOf("x")))
		default:
			continue
		}
		if ast.Compare(personaValue(&base), personaValue(&changed)) == 0 {
			continue // a field the policy input does not carry
		}
		if personaKey(&base) == personaKey(&changed) {
			t.Errorf("field %s changes the persona value but not its cache key", typ.Field(i).Name)
		}
	}
	// Lengths are part of the key: moving a character between fields is
	// another persona.
	a := engine.Persona{Name: "ab", Model: "c"}
	b := engine.Persona{Name: "a", Model: "bc"}
	if personaKey(&a) == personaKey(&b) {
		t.Error("personas differing only in where a field ends share a key")
	}
	if personaTerm(&base) != personaTerm(&engine.Persona{Name: "n", Description: "d", Model: "m", MaxTurns: 3, PermissionMode: "read-only",
		Tools: []string{"a"}, DisallowedTools: []string{"b"}, RequiredGates: []string{"c"}, Plugin: "p"}) {
		t.Error("equal personas are not served from the cache")
	}
}

// FuzzPlannedAgreesWithTopdown feeds arbitrary bytes as a proposal, decoded
// as the engine decodes them, and also as the raw proposal document of the
// input (any JSON, shaped or not), through both evaluators of the default
// bundle over configured data: they must agree on every one.
func FuzzPlannedAgreesWithTopdown(f *testing.F) {
	for _, in := range corpus() {
		if data, err := json.Marshal(in.Proposal); err == nil {
			f.Add(data, uint8(len(in.Proposal.ID)))
		}
	}
	f.Add([]byte(`{"flags": "yes", "target": [1], "class": 7}`), uint8(1))
	f.Add([]byte(`{"action": "db_drop_x", "target": {"tags": "production"}, "requested_by": {"agent": 3}}`), uint8(2))
	e := mustPlanned(f, configured(f))
	personas := []*engine.Persona{nil, reviewerPersona, runReviewerPersona, {Name: "broad", PermissionMode: "default", Tools: []string{"x_skill", "get_sop_text"}}}
	f.Fuzz(func(t *testing.T, data []byte, pick uint8) {
		persona := personas[int(pick)%len(personas)]
		if p, err := engine.DecodeProposal(data, "acme", "host_restart_service", engine.Limits{}); err == nil {
			var record *engine.RunRecord
			if pick&4 != 0 {
				record = continued(1)
			}
			agree(t, e, engine.PolicyInput{Proposal: p, Persona: persona, RunRecord: record}, "decoded proposal")
		}
		var doc any
		if util.UnmarshalJSON(data, &doc) != nil {
			return
		}
		raw, err := ast.InterfaceToValue(doc)
		if err != nil {
			return
		}
		input := InputValue(engine.PolicyInput{Persona: persona, Now: planNow}).(ast.Object)
		input.Insert(ast.InternedTerm("proposal"), ast.NewTerm(raw))
		want, werr := e.pq.Eval(context.Background(), rego.EvalParsedInput(input), rego.EvalGenerateJSON(astResult))
		got, gerr := e.plan.eval(context.Background(), ast.NewTerm(input), e.data, planNow)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("raw input: topdown error %v, planned error %v", werr, gerr)
		}
		if werr != nil {
			return
		}
		switch {
		case len(want) == 0 && got == nil:
		case len(want) != 1 || got == nil:
			t.Fatalf("raw input: topdown %v, planned %v", want, got)
		case ast.Compare(want[0].Expressions[0].Value.(ast.Value), got.Value) != 0:
			t.Fatalf("raw input decided differently\n  topdown: %v\n  planned: %v", want[0].Expressions[0].Value, got)
		}
	})
}

func TestFlagsTerm(t *testing.T) {
	for i := range 16 {
		f := engine.Flags{SkipReview: i&1 != 0, ForceApprove: i&2 != 0, ForceApproveNoSOP: i&4 != 0, UserConfirmed: i&8 != 0}
		want := ast.MustParseTerm(fmt.Sprintf(`{"skip_review": %v, "force_approve": %v, "force_approve_no_sop": %v, "user_confirmed": %v}`,
			f.SkipReview, f.ForceApprove, f.ForceApproveNoSOP, f.UserConfirmed))
		if got := flagsTerm(f); ast.Compare(want.Value, got.Value) != 0 {
			t.Errorf("flags %+v: input %v, want %v", f, got, want)
		}
	}
}
