package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/util"
)

const query = "data.gated.decision"

var planNow = time.Date(2026, 12, 24, 12, 0, 0, 0, time.UTC)

// astResult hands back rego's result as OPA's own value.
func astResult(t *ast.Term, _ *rego.EvalContext) (any, error) { return t.Value, nil }

// evalBoth runs query data.gated.decision over modules and data with
// topdown and with the planned evaluator; unsupported reports a plan the
// machine does not run.
func evalBoth(t *testing.T, modules map[string]string, data map[string]any, input ast.Value) (want, got *ast.Term, werr, gerr error, unsupported error) {
	t.Helper()
	ctx := context.Background()
	if data == nil {
		data = map[string]any{}
	}
	mods := map[string]*ast.Module{}
	for name, src := range modules {
		m, err := ast.ParseModuleWithOpts(name, src, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatal(err)
		}
		mods[name] = m
	}
	opts := []func(*rego.Rego){rego.Query(query), rego.StrictBuiltinErrors(true), rego.Store(inmem.NewFromObject(data))}
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
	pl, err := Compile(ctx, query, mods)
	if err != nil {
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("planning: %v", err)
		}
		return want, nil, werr, nil, err
	}
	d, err := ast.InterfaceToValue(data)
	if err != nil {
		t.Fatal(err)
	}
	got, gerr = pl.Eval(ctx, ast.NewTerm(input), ast.NewTerm(d), planNow)
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
