package policies

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// TestRegoUnitTests runs the bundle's own *_test.rego files so that
// `go test ./...` covers the policy as `opa test policies/` does.
func TestRegoUnitTests(t *testing.T) {
	b, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	report, err := RunTests(t.Context(), b, "")
	if err != nil {
		t.Fatal(err)
	}
	results := report.Results
	if len(results) < 20 {
		t.Fatalf("found %d Rego tests, want at least 20: are the _test.rego files embedded?", len(results))
	}
	for _, r := range results {
		t.Run(r.Name, func(t *testing.T) {
			if r.Error != nil {
				t.Fatalf("%s: error: %v", r.Location, r.Error)
			}
			if r.Fail {
				t.Fatalf("%s: failed", r.Location)
			}
		})
	}
}

func mustEvaluator(t testing.TB) *Evaluator {
	t.Helper()
	b, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	e, err := Compile(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

var reviewerPersona = &engine.Persona{
	Name: "reviewer", PermissionMode: "read-only",
	Tools:         []string{"get_sop_text", "get_verdict_history", "get_proposal", "web_skill"},
	RequiredGates: []string{"sop_covers", "no_parallel_operation", "rollback_known"},
}

func writeProposal() *gated.Proposal {
	return &gated.Proposal{
		V: 1, ID: "p1", Tenant: "acme", Kind: gated.KindAction, Action: "host_restart_service",
		Class: gated.ClassWrite, BlastRadius: gated.BlastSingleDevice,
		Target:   map[string]any{"service": "nginx", "tags": []any{"production"}},
		Operator: &gated.Principal{ID: "root", Roles: []string{"admin"}},
	}
}

func TestEvaluate(t *testing.T) {
	e := mustEvaluator(t)
	tests := []struct {
		note       string
		mutate     func(*gated.Proposal)
		wantRules  []string
		wantReview bool
	}{
		{note: "write needs review", mutate: func(*gated.Proposal) {}, wantReview: true},
		{note: "read passes", mutate: func(p *gated.Proposal) { p.Class, p.Action = gated.ClassRead, "host_list_services" }},
		{note: "read claim on a write tool denied", mutate: func(p *gated.Proposal) { p.Class = gated.ClassRead }, wantRules: []string{"class_mismatch"}, wantReview: true},
		{note: "admin skip_review denied", mutate: func(p *gated.Proposal) { p.Flags.SkipReview = true }, wantRules: []string{"no_skip_review"}, wantReview: true},
		{note: "force_approve denied", mutate: func(p *gated.Proposal) { p.Flags.ForceApprove = true }, wantRules: []string{"unsupported_force_approve"}, wantReview: true},
		{note: "both flags", mutate: func(p *gated.Proposal) { p.Flags.ForceApprove, p.Flags.SkipReview = true, true }, wantRules: []string{"no_skip_review", "unsupported_force_approve"}, wantReview: true},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			p := writeProposal()
			tc.mutate(p)
			d, err := e.Evaluate(t.Context(), engine.PolicyInput{Proposal: p, Persona: reviewerPersona})
			if err != nil {
				t.Fatal(err)
			}
			var rules []string
			for _, deny := range d.Denies {
				rules = append(rules, deny.Rule)
			}
			slices.Sort(rules)
			if strings.Join(rules, ",") != strings.Join(tc.wantRules, ",") {
				t.Errorf("denies = %v, want %v", rules, tc.wantRules)
			}
			if d.Review.Required != tc.wantReview {
				t.Errorf("review.required = %v, want %v", d.Review.Required, tc.wantReview)
			}
			if !strings.HasPrefix(d.Revision, "sha256:") {
				t.Errorf("revision = %q", d.Revision)
			}
		})
	}
}

func TestEvaluateToolBagAndSOP(t *testing.T) {
	d, err := mustEvaluator(t).Evaluate(t.Context(), engine.PolicyInput{Proposal: writeProposal(), Persona: reviewerPersona})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(d.ReviewerTools, ","); got != "get_sop_text,get_verdict_history,get_proposal" {
		t.Errorf("reviewer tools = %s", got)
	}
	if got := strings.Join(d.DeniedTools, ","); got != "web_skill" {
		t.Errorf("denied tools = %s", got)
	}
	if d.SOP == nil || d.SOP.ID != "SOP-001" || d.SOP.Rollback == "" {
		t.Errorf("sop = %+v, want SOP-001 with a rollback", d.SOP)
	}
}

// A tool catalog that lists a skill, a shell or a restart as read does not
// hand it to a reviewer: the baseline denylist is a hard rule, not a
// default of the catalog. Both evaluators decide it.
func TestBaselineDenylistOverridesTheCatalog(t *testing.T) {
	denied := []string{"deploy_skill", "ns.market_skill", "execute_skill", "run_shell", "host_restart_service", "kill_process"}
	persona := &engine.Persona{
		Name: "reviewer", PermissionMode: "read-only",
		Tools: append([]string{"get_sop_text"}, denied...),
	}
	for _, tc := range []struct {
		note string
		opts []CompileOption
	}{
		{note: EvaluatorPlanned},
		{note: EvaluatorTopdown, opts: []CompileOption{Topdown()}},
	} {
		t.Run(tc.note, func(t *testing.T) {
			b, err := Default()
			if err != nil {
				t.Fatal(err)
			}
			tools := map[string]any{}
			for _, name := range persona.Tools {
				tools[name] = map[string]any{"class": "read"}
			}
			b.Data["gated"].(map[string]any)["tools"] = tools
			e, err := Compile(t.Context(), b, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.Plan().Evaluator; got != tc.note {
				t.Fatalf("evaluator = %s, want %s", got, tc.note)
			}
			d, err := e.Evaluate(t.Context(), engine.PolicyInput{Proposal: writeProposal(), Persona: persona})
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Denies) != 0 || !d.Review.Required {
				t.Fatalf("denies = %v, review required = %v; want no deny and a review", d.Denies, d.Review.Required)
			}
			if got := strings.Join(d.ReviewerTools, ","); got != "get_sop_text" {
				t.Errorf("reviewer tools = %s, want get_sop_text only", got)
			}
			want := slices.Sorted(slices.Values(denied))
			if got := slices.Sorted(slices.Values(d.DeniedTools)); !slices.Equal(got, want) {
				t.Errorf("denied tools = %v, want %v", got, want)
			}
		})
	}
}

func TestCompileErrorNamesFileAndLine(t *testing.T) {
	b, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	b.Modules["broken.rego"] = "package gated\n\ndeny contains x if {\n  x := \n}\n"
	_, err = Compile(t.Context(), b)
	if !errors.Is(err, ErrInvalidBundle) {
		t.Fatalf("err = %v, want ErrInvalidBundle", err)
	}
	if !strings.Contains(err.Error(), "broken.rego:") {
		t.Errorf("error %q does not name the file and line", err)
	}
}

func TestBadDecisionShapeIsAnError(t *testing.T) {
	b, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	b.Modules["bad.rego"] = "package gated\n\ndeny contains \"just a string\" if true\n"
	_, err = Compile(t.Context(), b)
	if !errors.Is(err, ErrInvalidBundle) || !strings.Contains(err.Error(), "decision.deny[") {
		t.Fatalf("a deny entry that is not {rule, message} must fail the compile-time check, got %v", err)
	}
}

func TestRevisionChangesWithData(t *testing.T) {
	a, _ := Default()
	b, _ := Default()
	if a.Revision() != b.Revision() {
		t.Fatal("same bundle, different revisions")
	}
	b.Data["gated"].(map[string]any)["sops"] = []any{}
	if a.Revision() == b.Revision() {
		t.Fatal("changing data must change the revision")
	}
}

// BenchmarkEvaluate measures one decision of the default bundle, Go input
// conversion and result reading included, with the planned evaluator and,
// as the baseline in the same run, with topdown. It reports the latency
// distribution next to ns/op: p50-ns and p99-ns.
func BenchmarkEvaluate(b *testing.B) {
	read := writeProposal()
	read.Class, read.Action = gated.ClassRead, "host_list_services"
	denied := writeProposal()
	denied.Flags.SkipReview = true
	history := []gated.Verdict{{
		ProposalID: "p0", Tenant: "acme", Action: "host_restart_service", Outcome: gated.OutcomeApproved,
		Stage: gated.StageReview, Agent: "other-agent", DecidedAt: time.Now().Add(-20 * time.Minute),
	}}
	// floor is a bundle whose decision is a constant, through the same
	// evaluators, so the rest is what the default rules cost.
	floor := &Bundle{Modules: map[string]string{"floor.rego": `package gated

decision := {"deny": [], "review": {"required": false}, "run": run}

default run := null

run := {"reviewed": false} if input.proposal.kind == "run"
`}}
	evaluators := map[string]*Evaluator{}
	for name, bundle := range map[string]*Bundle{"floor": floor, "default": mustDefault(b)} {
		planned, err := Compile(context.Background(), bundle)
		if err != nil {
			b.Fatal(err)
		}
		if planned.Plan().Evaluator != EvaluatorPlanned {
			b.Fatalf("%s is not planned: %+v", name, planned.Plan())
		}
		topdown, err := Compile(context.Background(), bundle, Topdown())
		if err != nil {
			b.Fatal(err)
		}
		evaluators[name+"/planned"], evaluators[name+"/topdown"] = planned, topdown
	}
	for _, bc := range []struct {
		name, bundle string
		in           engine.PolicyInput
	}{
		{"floor", "floor", engine.PolicyInput{Proposal: writeProposal(), Persona: reviewerPersona}},
		{"write", "default", engine.PolicyInput{Proposal: writeProposal(), Persona: reviewerPersona}},
		{"write-with-history", "default", engine.PolicyInput{Proposal: writeProposal(), Persona: reviewerPersona, History: history}},
		{"read", "default", engine.PolicyInput{Proposal: read, Persona: reviewerPersona}},
		{"denied", "default", engine.PolicyInput{Proposal: denied, Persona: reviewerPersona}},
		{"run", "default", engine.PolicyInput{Proposal: runProposal(), Persona: runReviewerPersona, RunRecord: continued()}},
	} {
		for _, kind := range []string{EvaluatorPlanned, EvaluatorTopdown} {
			e := evaluators[bc.bundle+"/"+kind]
			b.Run(bc.name+"/"+kind, func(b *testing.B) {
				ctx := context.Background()
				lat := make([]time.Duration, 0, 1<<16)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					start := time.Now()
					if _, err := e.Evaluate(ctx, bc.in); err != nil {
						b.Fatal(err)
					}
					if len(lat) < cap(lat) {
						lat = append(lat, time.Since(start))
					}
				}
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
			})
		}
	}
}

func TestMalformedDecisionFieldsAreErrors(t *testing.T) {
	for _, tc := range []struct{ note, field, value string }{
		{note: "quorum as a string", field: "quorum", value: `"2"`},
		{note: "persona as a number", field: "persona", value: `7`},
		{note: "quorum negative", field: "quorum", value: `-1`},
		{note: "personas as a string", field: "personas", value: `"dba"`},
		{note: "personas with a boolean", field: "personas", value: `["dba", true]`},
	} {
		t.Run(tc.note, func(t *testing.T) {
			review := map[string]any{"required": true, "persona": "reviewer", "quorum": json.Number("1"), "why": "x"}
			var v any
			if err := json.Unmarshal([]byte(tc.value), &v); err != nil {
				t.Fatal(err)
			}
			if n, ok := v.(float64); ok {
				v = json.Number(fmt.Sprint(n))
			}
			review[tc.field] = v
			_, err := parseDecision(astOf(t, map[string]any{"deny": []any{}, "review": review}), gated.KindAction)
			if err == nil {
				t.Fatalf("%s = %s accepted", tc.field, tc.value)
			}
		})
	}
	for _, tc := range []struct {
		note, key string
		value     any
	}{
		{note: "skipped as a string", key: "skipped", value: "yes"},
		{note: "sop as a string", key: "sop", value: "SOP-1"},
		{note: "reviewer_tools with a number", key: "reviewer_tools", value: []any{"a", json.Number("1")}},
	} {
		t.Run(tc.note, func(t *testing.T) {
			obj := map[string]any{"deny": []any{}, "review": map[string]any{"required": true}, tc.key: tc.value}
			if _, err := parseDecision(astOf(t, obj), gated.KindAction); err == nil {
				t.Fatalf("%s = %v accepted", tc.key, tc.value)
			}
		})
	}
}

func TestDecisionReviewPersonas(t *testing.T) {
	set := ast.NewSet(ast.StringTerm("ops"), ast.StringTerm("dba"))
	for _, tc := range []struct {
		note     string
		personas ast.Value // nil leaves the field out
		want     []string
	}{
		{note: "absent", want: nil},
		{note: "null", personas: ast.Null{}, want: nil},
		{note: "array keeps the policy's order", personas: ast.NewArray(ast.StringTerm("ops"), ast.StringTerm("dba")), want: []string{"ops", "dba"}},
		{note: "set in sorted order", personas: set, want: []string{"dba", "ops"}},
		{note: "empty array", personas: ast.NewArray(), want: []string{}},
	} {
		t.Run(tc.note, func(t *testing.T) {
			review := astOf(t, map[string]any{"required": true, "persona": "reviewer", "quorum": json.Number("2")}).(ast.Object)
			if tc.personas != nil {
				review.Insert(ast.StringTerm("personas"), ast.NewTerm(tc.personas))
			}
			obj := ast.NewObject(
				[2]*ast.Term{ast.StringTerm("deny"), ast.ArrayTerm()},
				[2]*ast.Term{ast.StringTerm("review"), ast.NewTerm(review)},
			)
			d, err := parseDecision(obj, gated.KindAction)
			if err != nil {
				t.Fatalf("parseDecision: %v", err)
			}
			if !slices.Equal(d.Review.Personas, tc.want) || (tc.want == nil) != (d.Review.Personas == nil) {
				t.Errorf("review.personas = %#v, want %#v", d.Review.Personas, tc.want)
			}
			if d.Review.Quorum != 2 {
				t.Errorf("quorum = %d, want 2", d.Review.Quorum)
			}
		})
	}
}

func astOf(t *testing.T, v any) ast.Value {
	t.Helper()
	val, err := ast.InterfaceToValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return val
}

func TestCatalogComesFromTheData(t *testing.T) {
	c := mustEvaluator(t).Catalog()
	if s, ok := c.SOP("SOP-001"); !ok || s.Rollback == "" || len(s.Actions) == 0 {
		t.Fatalf("SOP-001 = %+v, %v", s, ok)
	}
	if _, ok := c.SOP("SOP-404"); ok {
		t.Fatal("an unknown SOP was found")
	}
	if ti, ok := c.Tool("get_sop_text"); !ok || ti.Class != "read" || ti.Description == "" {
		t.Fatalf("get_sop_text = %+v, %v", ti, ok)
	}
	b, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	b.Data["gated"].(map[string]any)["sops"] = "not a list"
	if _, err := Compile(t.Context(), b); err == nil || !strings.Contains(err.Error(), "data.gated.sops") {
		t.Fatalf("Compile with a malformed SOP catalog: err = %v", err)
	}
}

// TestCompileRefusesBadActionPatterns: an action pattern in the policy data
// that does not compile, is empty or is not a string would give an error
// verdict (or match nothing) when a proposal meets it. The bundle is
// refused when it loads instead, by data.gated.config_errors, with an
// error that names the pattern and where it is.
func TestCompileRefusesBadActionPatterns(t *testing.T) {
	for _, tc := range []struct {
		note string
		set  func(g, config map[string]any)
		want string
	}{
		{note: "sop unclosed range", want: `data.gated.sops[3].actions[0] (SOP-BAD): "rotate_[db_credentials" is not a valid action pattern`,
			set: func(g, _ map[string]any) {
				g["sops"] = append(g["sops"].([]any), map[string]any{"id": "SOP-BAD", "actions": []any{"rotate_[db_credentials"}, "rollback": "r"})
			}},
		{note: "sop empty pattern", want: `data.gated.sops[3].actions[1] (SOP-EMPTY): "" is not a valid action pattern`,
			set: func(g, _ map[string]any) {
				g["sops"] = append(g["sops"].([]any), map[string]any{"id": "SOP-EMPTY", "actions": []any{"db_vacuum", ""}, "rollback": "r"})
			}},
		{note: "skip unclosed brace", want: `data.gated.config.skip_review_actions[1]: "k8s_{get,list" is not a valid action pattern`,
			set: func(_, config map[string]any) { config["skip_review_actions"] = []any{"k8s_get_pods", "k8s_{get,list"} }},
		{note: "skip not a list", want: `data.gated.config.skip_review_actions: "k8s_get_pods": want a list of action patterns`,
			set: func(_, config map[string]any) { config["skip_review_actions"] = "k8s_get_pods" }},
		{note: "route reversed range", want: `data.gated.config.persona_routes[0].actions[0]: "db_[z-a]*" is not a valid action pattern`,
			set: func(_, config map[string]any) {
				config["persona_routes"] = []any{map[string]any{"actions": []any{"db_[z-a]*"}, "persona": "dba"}}
			}},
		{note: "override trailing backslash", want: `data.gated.config.reviewer_overrides[0].actions[0]: "host_restart_\\" is not a valid action pattern`,
			set: func(_, config map[string]any) {
				config["reviewer_overrides"] = []any{map[string]any{"actions": []any{`host_restart_\`}, "personas": []any{"oncall"}}}
			}},
		{note: "denied action empty range", want: `data.gated.config.denied_actions.acme[0]: "db_[]" is not a valid action pattern`,
			set: func(_, config map[string]any) { config["denied_actions"] = map[string]any{"acme": []any{"db_[]"}} }},
		{note: "freeze unclosed range", want: `data.gated.config.change_freezes[0].actions[0]: "host_[" is not a valid action pattern`,
			set: func(_, config map[string]any) {
				config["change_freezes"] = []any{map[string]any{"name": "year-end", "start": "2026-12-20T00:00:00Z",
					"end": "2027-01-04T00:00:00Z", "actions": []any{"host_["}}}
			}},
	} {
		t.Run(tc.note, func(t *testing.T) {
			b, err := Default()
			if err != nil {
				t.Fatal(err)
			}
			g := b.Data["gated"].(map[string]any)
			tc.set(g, g["config"].(map[string]any))
			_, err = Compile(t.Context(), b)
			if !errors.Is(err, ErrInvalidBundle) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Compile: err = %v\nwant ErrInvalidBundle naming %s", err, tc.want)
			}
		})
	}
}
