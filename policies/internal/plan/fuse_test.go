package plan

import (
	"context"
	"fmt"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// fusePolicy builds object and array literals from values of the input,
// some of which may be undefined, in a rule body, a comprehension, an
// else branch and a function.
const fusePolicy = `package gated

route := {"required": true, "persona": input.persona, "quorum": count(input.words), "why": sprintf("%v", [input.n])} if {
	input.n > 3
} else := {"required": false, "persona": "", "quorum": 0, "why": input.why}

pairs := [[w, upper(w)] | some w in input.words]

named := {"name": input.name, "n": input.n}

tagged(x) := {"tag": x, "tags": [x, input.tenant]}

decision := {"route": route, "pairs": pairs, "named": object.get({"v": named}, "v", "none"), "tagged": tagged(input.n)}
`

var fuseInputs = []string{
	`{"persona": "dba", "words": ["a", "b"], "n": 5, "name": "x", "tenant": "acme", "why": "w"}`,
	`{"persona": "dba", "words": [], "n": 1, "tenant": "acme", "why": "w"}`,
	`{"words": ["c"], "n": 9, "name": "y"}`,
	`{"n": 2, "name": "z"}`,
}

// TestLiteralsAreFused: the literals of fusePolicy built from the input
// become one statement each, and decide as topdown does, an undefined
// member included.
func TestLiteralsAreFused(t *testing.T) {
	ctx := context.Background()
	pl := compileOne(t, fusePolicy)
	objects, arrays := 0, 0
	for _, f := range append(pl.funcs, pl.main) {
		eachStmt(f, func(s pstmt) {
			switch s.(type) {
			case *sMakeObjectOf:
				objects++
			case *sMakeArrayOf:
				arrays++
			}
		})
	}
	if objects < 4 || arrays < 2 {
		t.Fatalf("%d object and %d array literals fused, want at least 4 and 2", objects, arrays)
	}
	pq := prepareTopdown(t, fusePolicy)
	data := ast.NewTerm(ast.NewObject())
	for i, raw := range fuseInputs {
		input := ast.MustParseTerm(raw)
		rs, err := pq.Eval(ctx, rego.EvalParsedInput(input.Value), rego.EvalTime(planNow), rego.EvalGenerateJSON(astResult))
		if err != nil {
			t.Fatalf("topdown: %v", err)
		}
		got, err := pl.Eval(ctx, input, data, planNow)
		if err != nil {
			t.Fatalf("evaluation %d: %v", i, err)
		}
		switch {
		case len(rs) == 0 && got != nil:
			t.Fatalf("evaluation %d (%s): topdown is undefined, planned %v", i, raw, got)
		case len(rs) == 1 && (got == nil || ast.Compare(rs[0].Expressions[0].Value.(ast.Value), got.Value) != 0):
			t.Fatalf("evaluation %d (%s) differs\n  topdown: %v\n  planned: %v", i, raw, rs[0].Expressions[0].Value, got)
		}
	}
}

// TestFusedLiteralLeavesWhatTheAdditionsLeave runs a literal with an
// undefined element as the planner lays it out and fused: the block ends
// at the same point, and the collection holds the elements before it.
func TestFusedLiteralLeavesWhatTheAdditionsLeave(t *testing.T) {
	k := func(s string) operand { return operand{konst: ast.StringTerm(s)} }
	l := func(n int) operand { return operand{local: n} }
	for _, tc := range []struct {
		note  string
		stmts func() []pstmt
	}{
		{"object, all defined", func() []pstmt {
			return []pstmt{&sMakeObject{target: 2}, &sInsert{key: k("a"), value: l(4), object: 2},
				&sInsert{key: k("b"), value: k("x"), object: 2}, &sAssign{src: l(2), target: 3}}
		}},
		{"object, the second undefined", func() []pstmt {
			return []pstmt{&sMakeObject{target: 2}, &sInsert{key: k("a"), value: l(4), object: 2},
				&sInsert{key: k("b"), value: l(5), object: 2}, &sInsert{key: k("c"), value: l(4), object: 2},
				&sAssign{src: l(2), target: 3}}
		}},
		{"array, the first undefined", func() []pstmt {
			return []pstmt{&sMakeArray{capacity: 2, target: 2}, &sAppend{value: l(5), array: 2},
				&sAppend{value: l(4), array: 2}, &sAssign{src: l(2), target: 3}}
		}},
		{"array, all defined", func() []pstmt {
			return []pstmt{&sMakeArray{capacity: 2, target: 2}, &sAppend{value: l(4), array: 2},
				&sAppend{value: k("y"), array: 2}, &sAssign{src: l(2), target: 3}}
		}},
	} {
		t.Run(tc.note, func(t *testing.T) {
			run := func(fused bool) (frame string, done bool) {
				b := &pblock{stmts: tc.stmts()}
				if fused {
					fuseBlock(b)
					if len(b.stmts) != 2 {
						t.Fatalf("fused into %d statements, want 2", len(b.stmts))
					}
				}
				m := &machine{ctx: context.Background()}
				fr := make([]*ast.Term, 6)
				fr[4] = ast.StringTerm("v")
				_, done, err := m.block(fr, b)
				if err != nil {
					t.Fatal(err)
				}
				return fmt.Sprint(fr), done
			}
			wantFrame, wantDone := run(false)
			gotFrame, gotDone := run(true)
			if gotFrame != wantFrame || gotDone != wantDone {
				t.Fatalf("fused: %s (ran to the end %v), the additions: %s (%v)", gotFrame, gotDone, wantFrame, wantDone)
			}
		})
	}
}

// TestFuseLeavesWhatItCannotFuse: an object with a key given twice or a
// key that is not a constant, and additions that read the collection
// itself, stay as the planner laid them out.
func TestFuseLeavesWhatItCannotFuse(t *testing.T) {
	k := func(s string) operand { return operand{konst: ast.StringTerm(s)} }
	l := func(n int) operand { return operand{local: n} }
	for _, stmts := range [][]pstmt{
		{&sMakeObject{target: 2}, &sInsert{key: k("a"), value: l(4), object: 2}, &sInsert{key: k("a"), value: l(5), object: 2}},
		{&sMakeObject{target: 2}, &sInsert{key: l(4), value: l(5), object: 2}},
		{&sMakeObject{target: 2}, &sInsert{key: k("a"), value: l(2), object: 2}},
		{&sMakeArray{target: 2}, &sAppend{value: l(2), array: 2}},
		{&sMakeArray{target: 2}, &sAppend{value: l(4), array: 3}},
	} {
		b := &pblock{stmts: stmts}
		fuseBlock(b)
		if len(b.stmts) != len(stmts) {
			t.Errorf("%T %T fused", stmts[0], stmts[1])
		}
	}
}
