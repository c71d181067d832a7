package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// constantsPolicy has rules of data alone beside rules that reach the
// input or the clock in every way a rule can: directly, through another
// rule, through a function, through a function's argument, or by time.
const constantsPolicy = `package gated

names := {"a", "b"}

width := count(data.gated.xs)

first := data.gated.xs[0]

missing := data.gated.nothing

default has_missing := false

has_missing if missing

plus_one(x) := x + 1

two := plus_one(1)

direct := input.n

via_rule := direct + 1

add_input(x) := input.n + x

via_function := add_input(1)

via_argument := plus_one(input.n)

clock := time.now_ns()

via_clock := clock + 1

decision := {
	"names": names, "width": width, "first": first, "has_missing": has_missing, "two": two,
	"direct": direct, "via_rule": via_rule, "via_function": via_function, "via_argument": via_argument,
	"clock": clock, "via_clock": via_clock,
}
`

// TestConstantsAreRulesOfDataAlone checks which rules the machine keeps
// from one evaluation to the next: exactly those that reach neither the
// input nor the clock.
func TestConstantsAreRulesOfDataAlone(t *testing.T) {
	pl := compileOne(t, constantsPolicy)
	var shared []string
	for _, f := range pl.funcs {
		if f.shared >= 0 {
			shared = append(shared, f.rule)
		}
	}
	slices.Sort(shared)
	want := []string{"data.gated.first", "data.gated.has_missing", "data.gated.missing", "data.gated.names", "data.gated.two", "data.gated.width"}
	if !slices.Equal(shared, want) {
		t.Fatalf("functions kept across evaluations: %v, want %v", shared, want)
	}
	if pl.consts != len(want) {
		t.Fatalf("consts = %d, want %d", pl.consts, len(want))
	}
}

// TestConstantsDecideAsTopdown evaluates one plan many times, over
// different inputs, clocks and data documents, one after the other and
// concurrently: each decision is topdown's for that input, clock and data.
func TestConstantsDecideAsTopdown(t *testing.T) {
	ctx := context.Background()
	pl := compileOne(t, constantsPolicy)
	datas := []map[string]any{
		{"gated": map[string]any{"xs": []any{json.Number("3"), json.Number("4")}}},
		{"gated": map[string]any{"xs": []any{json.Number("9")}, "nothing": "here"}},
	}
	type run struct {
		data int
		n    int
		now  time.Time
	}
	var runs []run
	for i := range 12 {
		runs = append(runs, run{data: i / 3 % 2, n: i, now: planNow.Add(time.Duration(i) * time.Second)})
	}
	dataTerms := make([]*ast.Term, len(datas))
	pqs := make([]rego.PreparedEvalQuery, len(datas))
	for i, d := range datas {
		v, err := ast.InterfaceToValue(d)
		if err != nil {
			t.Fatal(err)
		}
		dataTerms[i] = ast.NewTerm(v)
		mod, err := ast.ParseModuleWithOpts("p.rego", constantsPolicy, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatal(err)
		}
		if pqs[i], err = rego.New(rego.Query(query), rego.ParsedModule(mod), rego.StrictBuiltinErrors(true),
			rego.Store(inmem.NewFromObject(d))).PrepareForEval(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check := func(r run) error {
		input := ast.MustParseTerm(fmt.Sprintf(`{"n": %d}`, r.n))
		rs, err := pqs[r.data].Eval(ctx, rego.EvalParsedInput(input.Value), rego.EvalTime(r.now), rego.EvalGenerateJSON(astResult))
		if err != nil || len(rs) != 1 {
			return fmt.Errorf("topdown: %v, %d results", err, len(rs))
		}
		want := rs[0].Expressions[0].Value.(ast.Value)
		got, err := pl.Eval(ctx, input, dataTerms[r.data], r.now)
		if err != nil {
			return fmt.Errorf("planned: %w", err)
		}
		if got == nil || ast.Compare(want, got.Value) != 0 {
			return fmt.Errorf("data %d, n %d differ\n  topdown: %v\n  planned: %v", r.data, r.n, want, got)
		}
		return nil
	}
	t.Run("one after the other", func(t *testing.T) {
		for _, r := range runs {
			if err := check(r); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("concurrently", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, len(runs)*4)
		for range 4 {
			wg.Go(func() {
				for _, r := range runs {
					if err := check(r); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

func compileOne(t *testing.T, src string) *Plan {
	t.Helper()
	mod, err := ast.ParseModuleWithOpts("p.rego", src, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := Compile(context.Background(), query, map[string]*ast.Module{"p.rego": mod})
	if err != nil {
		t.Fatal(err)
	}
	return pl
}
