package plan_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/util"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/policies"
	"github.com/gated/gated/policies/internal/plan"
)

var fuzzNow = time.Date(2026, 12, 24, 12, 0, 0, 0, time.UTC)

// harness decides data.gated.decision of the default bundle with the
// planned evaluator and with topdown, over each data document the
// bundle's own tests evaluate it with (the default data and the test's
// `with data...` overrides of it).
type harness struct {
	pl     *plan.Plan
	datas  []*ast.Term
	pqs    []rego.PreparedEvalQuery
	inputs []policies.TestInput
	dataOf []int // the index in datas of each input's data
}

func newHarness(tb testing.TB) *harness {
	tb.Helper()
	ctx := context.Background()
	b, err := policies.Default()
	if err != nil {
		tb.Fatal(err)
	}
	inputs, _, err := policies.TestInputs(ctx, b, "")
	if err != nil {
		tb.Fatal(err)
	}
	mods := map[string]*ast.Module{}
	for _, name := range slices.Sorted(maps.Keys(b.Modules)) {
		if strings.HasSuffix(name, "_test.rego") {
			continue
		}
		if mods[name], err = ast.ParseModuleWithOpts(name, b.Modules[name], ast.ParserOptions{RegoVersion: ast.RegoV1}); err != nil {
			tb.Fatal(err)
		}
	}
	compiler := ast.NewCompiler().WithDefaultRegoVersion(ast.RegoV1)
	if compiler.Compile(mods); compiler.Failed() {
		tb.Fatal(compiler.Errors)
	}
	h := &harness{inputs: inputs}
	if h.pl, err = plan.Compile(ctx, policies.Query, mods); err != nil {
		tb.Fatal(err)
	}
	index := map[string]int{}
	for _, in := range inputs {
		key := strings.Join(in.Overrides, "\n")
		i, ok := index[key]
		if !ok {
			i = len(h.datas)
			index[key] = i
			doc, err := ast.JSON(in.Data)
			if err != nil {
				tb.Fatal(err)
			}
			store := inmem.NewFromObjectWithOpts(doc.(map[string]any), inmem.OptReturnASTValuesOnRead(true))
			pq, err := rego.New(rego.Query(policies.Query), rego.Compiler(compiler), rego.Store(store), rego.StrictBuiltinErrors(true)).PrepareForEval(ctx)
			if err != nil {
				tb.Fatal(err)
			}
			h.datas, h.pqs = append(h.datas, ast.NewTerm(in.Data)), append(h.pqs, pq)
		}
		h.dataOf = append(h.dataOf, i)
	}
	if len(inputs) == 0 {
		tb.Fatal("the default bundle's tests gave no inputs")
	}
	return h
}

// agree decides input over data number d with both evaluators and fails
// unless both fail, both are undefined, or both give the same value.
func (h *harness) agree(t *testing.T, input ast.Value, d int, what string) {
	t.Helper()
	ctx := context.Background()
	rs, werr := h.pqs[d].Eval(ctx, rego.EvalParsedInput(input), rego.EvalTime(fuzzNow),
		rego.EvalGenerateJSON(func(t *ast.Term, _ *rego.EvalContext) (any, error) { return t.Value, nil }))
	got, gerr := h.pl.Eval(ctx, ast.NewTerm(input), h.datas[d], fuzzNow)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%s: topdown error %v, planned error %v", what, werr, gerr)
	}
	if werr != nil {
		return
	}
	switch {
	case len(rs) == 0 && got == nil:
	case len(rs) != 1 || got == nil:
		t.Fatalf("%s: topdown %v, planned %v", what, rs, got)
	case ast.Compare(rs[0].Expressions[0].Value.(ast.Value), got.Value) != 0:
		t.Fatalf("%s: decided differently\n  topdown: %v\n  planned: %v", what, rs[0].Expressions[0].Value, got)
	}
}

var fuzzPersonas = []*engine.Persona{
	nil,
	{Name: "reviewer", PermissionMode: "read-only", Tools: []string{"get_sop_text", "get_verdict_history", "get_proposal", "web_skill"},
		RequiredGates: []string{"sop_covers", "no_parallel_operation", "rollback_known"}},
	{Name: "run-reviewer", PermissionMode: "read-only", Plugin: "llm", Tools: []string{"get_proposal"}},
	{Name: "broad", PermissionMode: "default", Tools: []string{"x_skill", "get_sop_text"}},
}

// FuzzPlannedAgreesWithTopdown feeds arbitrary bytes as a proposal, decoded
// as the engine decodes them, and also as the raw proposal document of the
// input (any JSON, shaped or not), through both evaluators of the default
// bundle over one of the data documents its tests use: they must agree on
// every one. The seeds are the proposals of the bundle's test inputs.
func FuzzPlannedAgreesWithTopdown(f *testing.F) {
	h := newHarness(f)
	for i, in := range h.inputs {
		obj, ok := in.Input.(ast.Object)
		if !ok || obj.Get(ast.InternedTerm("proposal")) == nil {
			continue
		}
		if raw, err := json.Marshal(obj.Get(ast.InternedTerm("proposal"))); err == nil {
			f.Add(raw, uint8(i), uint16(h.dataOf[i]))
		}
	}
	f.Add([]byte(`{"flags": "yes", "target": [1], "class": 7}`), uint8(1), uint16(0))
	f.Add([]byte(`{"action": "db_drop_x", "target": {"tags": "production"}, "requested_by": {"agent": 3}}`), uint8(2), uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, pick uint8, which uint16) {
		persona := fuzzPersonas[int(pick)%len(fuzzPersonas)]
		d := int(which) % len(h.datas)
		if p, err := gated.DecodeProposal(data, "acme", "host_restart_service", gated.Limits{}); err == nil {
			var record *gated.RunRecord
			if pick&4 != 0 {
				record = &gated.RunRecord{Tenant: "acme", RunID: "r-77", Rounds: []gated.RunRound{
					{Round: 1, ProposalID: "earlier", Outcome: gated.OutcomeRejected, Next: gated.NextContinuation}}}
			}
			in := policies.InputValue(engine.PolicyInput{Proposal: p, Persona: persona, RunRecord: record, Now: fuzzNow})
			h.agree(t, in, d, "decoded proposal")
		}
		var doc any
		if util.UnmarshalJSON(data, &doc) != nil {
			return
		}
		raw, err := ast.InterfaceToValue(doc)
		if err != nil {
			return
		}
		input := policies.InputValue(engine.PolicyInput{Persona: persona, Now: fuzzNow}).(ast.Object)
		input.Insert(ast.InternedTerm("proposal"), ast.NewTerm(raw))
		h.agree(t, input, d, "raw proposal")
	})
}

// FuzzPlanOnTestInputs feeds arbitrary bytes as the whole input document,
// over one of the data documents of the default bundle's tests. The seeds
// are the inputs of those tests, each with its own data.
func FuzzPlanOnTestInputs(f *testing.F) {
	h := newHarness(f)
	for i, in := range h.inputs {
		if in.Input == nil {
			continue
		}
		if raw, err := json.Marshal(in.Input); err == nil {
			f.Add(raw, uint16(h.dataOf[i]))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, which uint16) {
		var doc any
		if util.UnmarshalJSON(data, &doc) != nil {
			return
		}
		input, err := ast.InterfaceToValue(doc)
		if err != nil {
			return
		}
		h.agree(t, input, int(which)%len(h.datas), "input")
	})
}
