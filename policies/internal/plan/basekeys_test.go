package plan

import (
	"errors"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/util"
)

// baseKeyData is the data document of TestBaseDataKeys: base documents
// are JSON, so every object key in them is a string, "2" and "-1" and
// "2.0" included.
const baseKeyData = `{
	"m": {"2": "x", "-1": "neg", "2.0": "float", "1e3": "exp", "99999999999999999999": "big", "true": "t", "null": "n", "a": {"2": "deep"}},
	"arr": ["a", "b", "c"],
	"rules": {"t": {"2": "x", "1.0": "float"}, "arr": ["a", "b"]}
}`

// TestBaseDataKeys indexes base data with keys that are not strings, and
// arrays of base data with strings. Topdown reads a reference into base
// data from its store by a path of strings: a number key is its text (2
// finds "2", 2.0 finds "2.0"), a string indexes an array when it reads
// as an integer ("1", "+1", "1.0"), a boolean, null or collection finds
// nothing. A value held in a variable is looked up as the value it is
// (m[2] finds nothing in an object of string keys). The planned evaluator
// must find what topdown finds: a policy that reads a limit or a role
// from data by a number must not flip between evaluators. want is what
// topdown gives, so that a case where both evaluators find nothing is
// known to be meant.
func TestBaseDataKeys(t *testing.T) {
	var data map[string]any
	if err := util.UnmarshalJSON([]byte(baseKeyData), &data); err != nil {
		t.Fatal(err)
	}
	const beside = `decision := {v | some x; v := data.rules[x][input.k]}`
	cases := []struct {
		note, rule, input, want string
	}{
		{note: "number literal", rule: `decision := data.m[2]`, want: `"x"`},
		{note: "number from the input", rule: `decision := data.m[input.k]`, input: `{"k": 2}`, want: `"x"`},
		{note: "number as the argument of a function", rule: "f(k) := data.m[k]\ndecision := f(input.k)", input: `{"k": 2}`, want: `"x"`},
		{note: "number then a string", rule: `decision := data.m.a[input.k]`, input: `{"k": 2}`, want: `"deep"`},
		{note: "float literal keeps its text", rule: `decision := data.m[2.0]`, want: `"float"`},
		{note: "float from the input keeps its text", rule: `decision := data.m[input.k]`, input: `{"k": 2.0}`, want: `"float"`},
		{note: "negative number", rule: `decision := data.m[-1]`, want: `"neg"`},
		{note: "exponent", rule: `decision := data.m[1e3]`, want: `"exp"`},
		{note: "number beyond int64", rule: `decision := data.m[99999999999999999999]`, want: `"big"`},
		{note: "number with no such key", rule: `decision := data.m[input.k]`, input: `{"k": 3}`},
		{note: "boolean finds nothing", rule: `decision := data.m[input.k]`, input: `{"k": true}`},
		{note: "null finds nothing", rule: `decision := data.m[input.k]`, input: `{"k": null}`},
		{note: "array finds nothing", rule: `decision := data.m[input.k]`, input: `{"k": [2]}`},
		{note: "string indexes a base array", rule: `decision := data.arr[input.k]`, input: `{"k": "1"}`, want: `"b"`},
		{note: "string with a sign indexes a base array", rule: `decision := data.arr[input.k]`, input: `{"k": "+1"}`, want: `"b"`},
		{note: "string with zero decimals indexes a base array", rule: `decision := data.arr[input.k]`, input: `{"k": "1.0"}`, want: `"b"`},
		{note: "string out of range", rule: `decision := data.arr[input.k]`, input: `{"k": "3"}`},
		{note: "string not a number", rule: `decision := data.arr[input.k]`, input: `{"k": "b"}`},
		{note: "number indexes a base array", rule: `decision := data.arr[input.k]`, input: `{"k": 1}`, want: `"b"`},
		{note: "value in a variable is a value", rule: "decision := x if { m := data.m; x := m[input.k] }", input: `{"k": 2}`},
		{note: "array in a variable is a value", rule: "decision := x if { a := data.arr; x := a[input.k] }", input: `{"k": "1"}`},
		{note: "value from a rule is a value", rule: "m := data.m\ndecision := m[input.k]", input: `{"k": 2}`},
		{note: "object literal is a value", rule: `decision := {"2": "x"}[input.k]`, input: `{"k": 2}`},
		{note: "iteration yields string keys", rule: `decision := [k | some k, _ in data.m; k == "2"]`, want: `["2"]`},
		{note: "membership of a number", rule: `decision := [k | some k, v in data.m; v == "x"; k == 2]`, want: `[]`},
		// data.rules.t holds a rule as well as base documents: the plan
		// enumerates its rules, then scans its base documents for the
		// bound key.
		{note: "bound number beside rules", rule: beside, input: `{"k": 2}`, want: `{"x"}`},
		{note: "bound float beside rules", rule: beside, input: `{"k": 1.0}`, want: `{"float", "b"}`},
		{note: "bound number equal in value, not in text", rule: beside, input: `{"k": 1}`, want: `{"b"}`},
		{note: "bound string beside rules", rule: beside, input: `{"k": "2"}`, want: `{"x"}`},
		{note: "bound string indexes a base array beside rules", rule: beside, input: `{"k": "1"}`, want: `{"b"}`},
		{note: "bound key names a rule", rule: beside, input: `{"k": "p"}`, want: `{1}`},
		{note: "bound boolean beside rules", rule: beside, input: `{"k": true}`, want: `set()`},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			input := ast.Value(ast.NewObject())
			if tc.input != "" {
				input = ast.MustParseTerm(tc.input).Value
			}
			modules := map[string]string{"p.rego": "package gated\n" + tc.rule, "t.rego": "package rules.t\np := 1"}
			want, got, werr, gerr, unsupported := evalBoth(t, modules, data, input)
			if unsupported != nil {
				t.Fatalf("not planned: %v", unsupported)
			}
			if werr != nil || gerr != nil {
				t.Fatalf("topdown error %v, planned error %v", werr, gerr)
			}
			switch {
			case tc.want == "" && want != nil:
				t.Fatalf("topdown decided %v, the case expects undefined: the case is wrong", want)
			case tc.want != "" && (want == nil || ast.Compare(want.Value, ast.MustParseTerm(tc.want).Value) != 0):
				t.Fatalf("topdown decided %v, the case expects %s: the case is wrong", want, tc.want)
			case (want == nil) != (got == nil) || want != nil && ast.Compare(want.Value, got.Value) != 0:
				t.Fatalf("evaluators differ\n  topdown: %v\n  planned: %v", want, got)
			}
		})
	}
}

// TestMarkBase follows what a local holds through a function's blocks:
// OPA's planner reuses a local from one rule body to the next, so a
// local may hold the base data in one block and another value in the
// next. A lookup in a local that may hold either is refused (the bundle
// stays on topdown), since the two readings differ.
func TestMarkBase(t *testing.T) {
	key := operand{konst: ast.StringTerm("m")}
	dot := func(src, target int) *sDot { return &sDot{src: operand{local: src}, key: key, target: target} }
	block := func(stmts ...pstmt) *pblock { return &pblock{stmts: stmts} }
	cases := []struct {
		note   string
		blocks []*pblock
		// base is whether the last lookup reads the base data; refused,
		// whether the plan is refused.
		base, refused bool
	}{
		{note: "set from the data in an earlier block", blocks: []*pblock{block(dot(1, 5)), block(dot(5, 6))}, base: true},
		{note: "set from the input in an earlier block", blocks: []*pblock{block(dot(0, 5)), block(dot(5, 6))}},
		{note: "set from either in earlier blocks", blocks: []*pblock{block(dot(1, 5)), block(dot(0, 5)), block(dot(5, 6))}, refused: true},
		{note: "set again in the same block", blocks: []*pblock{block(dot(0, 5), dot(1, 5), dot(5, 6))}, base: true},
		{note: "set again from the input in the same block", blocks: []*pblock{block(dot(1, 5), dot(0, 5), dot(5, 6))}},
		{note: "set in a nested block that may stop early", blocks: []*pblock{block(dot(0, 5), &sBlock{blocks: []*pblock{block(dot(1, 5))}}, dot(5, 6))}, refused: true},
		{note: "set by an earlier turn of a scan", blocks: []*pblock{block(dot(1, 5),
			&sScan{src: 0, key: 7, value: 8, body: block(dot(5, 6), dot(0, 5))})}, refused: true},
		{note: "assigned from the data", blocks: []*pblock{block(&sAssign{src: operand{local: 1}, target: 5}, dot(5, 6))}},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			f := &pfunc{name: "f", params: []int{0, 1}, blocks: tc.blocks}
			err := markBase([]*pfunc{f})
			if tc.refused {
				if !errors.Is(err, ErrUnsupported) {
					t.Fatalf("markBase: %v, want ErrUnsupported", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var last *sDot
			eachStmt(f, func(s pstmt) {
				if d, ok := s.(*sDot); ok && d.target == 6 {
					last = d
				}
			})
			if last.base != tc.base {
				t.Fatalf("lookup in local 5 reads the base data: %v, want %v", last.base, tc.base)
			}
		})
	}
}
