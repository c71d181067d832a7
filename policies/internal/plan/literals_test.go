package plan

import (
	"context"
	"slices"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// literalsPolicy builds constant collections in every place the planner
// lays them out: a built-in's operand, a loop's body, a comprehension's
// element, an else branch, a partial rule's element, a function's result,
// beside collections that are grown from the input.
const literalsPolicy = `package gated

words := [w | some w in input.words; glob.match("rotate_*", ["_", "-"], w)]

pairs := [[1, 2] | some _ in input.words]

nested := {"a": [1, {"b": {"c", "d"}}], "e": set()}

grown := array.concat(["x"], [w | some w in input.words])

route := {"required": false, "quorum": 0} if {
	input.n > 3
} else := {"required": true, "quorum": 1}

names contains "fixed"

names contains w if some w in input.words

limits(_) := {"max": 3, "tags": ["a", "b"]}

scoped := [s | some s in [input.tenant, "*"]]

decision := {
	"words": words, "pairs": pairs, "nested": nested, "grown": grown, "route": route,
	"names": names, "limits": limits(1), "scoped": scoped,
}
`

var literalsInputs = []string{
	`{"words": ["rotate_db", "rotate-db", "drop_db"], "n": 5, "tenant": "acme"}`,
	`{"words": [], "n": 1, "tenant": "globex"}`,
	`{"words": ["fixed", "x"], "n": 4, "tenant": "*"}`,
}

// TestLiteralsAreFolded: the constant collections of literalsPolicy are
// built at plan time, and the collections grown from the input are not.
func TestLiteralsAreFolded(t *testing.T) {
	pl := compileOne(t, literalsPolicy)
	var folded []string
	makes := 0
	for _, f := range append(slices.Clone(pl.funcs), pl.main) {
		eachStmt(f, func(s pstmt) {
			switch s := s.(type) {
			case *sMakeConst:
				switch s.value.Value.(type) {
				case *ast.Array, ast.Object, ast.Set:
					folded = append(folded, s.value.String())
				}
			case *sMakeArray, *sMakeObject, *sMakeSet:
				makes++
			}
		})
	}
	for _, want := range []string{`["_", "-"]`, `[1, 2]`, `{"required": false, "quorum": 0}`, `{"quorum": 1, "required": true}`, `["x"]`} {
		found := slices.ContainsFunc(folded, func(s string) bool {
			return ast.Compare(ast.MustParseTerm(s).Value, ast.MustParseTerm(want).Value) == 0
		})
		if !found {
			t.Errorf("%s is not folded; folded: %v", want, folded)
		}
	}
	if makes == 0 {
		t.Errorf("every collection was folded, the ones grown from the input too: %v", folded)
	}
}

// TestLiteralsDecideAsTopdown evaluates one plan of literalsPolicy on each
// input, then again in reverse order: a folded constant that one
// evaluation changed would show in a later one.
func TestLiteralsDecideAsTopdown(t *testing.T) {
	ctx := context.Background()
	pl := compileOne(t, literalsPolicy)
	pq := prepareTopdown(t, literalsPolicy)
	order := append(slices.Clone(literalsInputs), literalsInputs...)
	slices.Reverse(order[len(literalsInputs):])
	data := ast.NewTerm(ast.NewObject())
	for i, raw := range order {
		input := ast.MustParseTerm(raw)
		rs, err := pq.Eval(ctx, rego.EvalParsedInput(input.Value), rego.EvalTime(planNow), rego.EvalGenerateJSON(astResult))
		if err != nil || len(rs) != 1 {
			t.Fatalf("topdown: %v, %d results", err, len(rs))
		}
		got, err := pl.Eval(ctx, input, data, planNow)
		if err != nil {
			t.Fatalf("evaluation %d: %v", i, err)
		}
		if want := rs[0].Expressions[0].Value.(ast.Value); got == nil || ast.Compare(want, got.Value) != 0 {
			t.Fatalf("evaluation %d (%s) differs\n  topdown: %v\n  planned: %v", i, raw, want, got)
		}
	}
}

// TestChangesOnlyFresh: folding is refused for a plan that adds to a
// local holding anything but a collection it just made.
func TestChangesOnlyFresh(t *testing.T) {
	k := func(v any) operand { return operand{konst: ast.InternedTerm(v.(int))} }
	l := func(n int) operand { return operand{local: n} }
	block := func(stmts ...pstmt) *pblock { return &pblock{stmts: stmts} }
	for _, tc := range []struct {
		note string
		f    *pfunc
		want bool
	}{
		{note: "made then grown", want: true, f: &pfunc{params: []int{0, 1}, blocks: []*pblock{block(
			&sMakeArray{target: 2}, &sAppend{value: k(1), array: 2})}}},
		{note: "grown while never written", want: true, f: &pfunc{params: []int{0, 1}, blocks: []*pblock{block(
			&sAppend{value: k(1), array: 2})}}},
		{note: "made in one block, grown in the next", want: true, f: &pfunc{params: []int{0, 1}, blocks: []*pblock{
			block(&sMakeSet{target: 2}), block(&sSetAdd{value: k(1), set: 2})}}},
		{note: "a parameter grown", f: &pfunc{params: []int{0, 1}, blocks: []*pblock{block(
			&sAppend{value: k(1), array: 1})}}},
		{note: "assigned then grown", f: &pfunc{params: []int{0, 1}, blocks: []*pblock{block(
			&sMakeArray{target: 2}, &sAssign{src: l(3), target: 2}, &sAppend{value: k(1), array: 2})}}},
		{note: "a call's result grown", f: &pfunc{params: []int{0, 1}, blocks: []*pblock{block(
			&sCallFunc{fn: &pfunc{}, result: 2}, &sInsert{key: k(1), value: k(2), object: 2})}}},
		{note: "written in a block that may stop early", f: &pfunc{params: []int{0, 1}, blocks: []*pblock{block(
			&sMakeArray{target: 2},
			&sBlock{blocks: []*pblock{block(&sDot{src: l(0), key: k(1), target: 2}, &sMakeArray{target: 2})}},
			&sAppend{value: k(1), array: 2})}}},
		{note: "written late in a loop's body, grown early in the next turn", f: &pfunc{params: []int{0, 1}, blocks: []*pblock{block(
			&sMakeArray{target: 2},
			&sScan{src: 0, key: 3, value: 4, body: block(&sAppend{value: l(4), array: 2}, &sAssign{src: l(4), target: 2})})}}},
		{note: "made in a loop's body and grown there", want: true, f: &pfunc{params: []int{0, 1}, blocks: []*pblock{block(
			&sScan{src: 0, key: 3, value: 4, body: block(&sMakeArray{target: 2}, &sAppend{value: l(4), array: 2})})}}},
		{note: "the scan's value grown", f: &pfunc{params: []int{0, 1}, blocks: []*pblock{block(
			&sScan{src: 0, key: 3, value: 4, body: block(&sAppend{value: k(1), array: 4})})}}},
	} {
		t.Run(tc.note, func(t *testing.T) {
			if got := changesOnlyFresh(tc.f); got != tc.want {
				t.Fatalf("changesOnlyFresh = %v, want %v", got, tc.want)
			}
		})
	}
}

// prepareTopdown prepares the query on the module src with OPA's own
// evaluator, over empty data, for a test to compare the plan with.
func prepareTopdown(t *testing.T, src string) rego.PreparedEvalQuery {
	t.Helper()
	mod, err := ast.ParseModuleWithOpts("p.rego", src, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		t.Fatal(err)
	}
	pq, err := rego.New(rego.Query(query), rego.ParsedModule(mod), rego.StrictBuiltinErrors(true),
		rego.Store(inmem.NewFromObject(map[string]any{}))).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return pq
}
