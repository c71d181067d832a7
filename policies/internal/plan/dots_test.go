package plan

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestDotsKeepOnlyWhatCannotChange: a lookup into a collection the
// evaluation is still building is made again after the collection grows,
// while lookups into the input are kept.
func TestDotsKeepOnlyWhatCannotChange(t *testing.T) {
	k := func(s string) operand { return operand{konst: ast.StringTerm(s)} }
	l := func(n int) operand { return operand{local: n} }
	input := ast.MustParseTerm(`{"proposal": {"action": "a"}}`)
	data := ast.NewTerm(ast.NewObject())
	proposal, bkey := k("proposal"), k("b")
	b := &pblock{stmts: []pstmt{
		// Twice into the input: the second is the kept lookup.
		&sDot{src: l(0), key: proposal, target: 2},
		&sDot{src: l(0), key: proposal, target: 3},
		// Into an object being built: absent, then present.
		&sMakeObject{target: 4},
		&sNot{body: &pblock{stmts: []pstmt{&sDot{src: l(4), key: bkey, target: 5}}}},
		&sInsert{key: bkey, value: k("y"), object: 4},
		&sDot{src: l(4), key: bkey, target: 6},
	}}
	m := &machine{ctx: context.Background()}
	m.startDots(&Plan{fresh: true}, input, data)
	defer m.endDots()
	fr := make([]*ast.Term, 7)
	fr[0], fr[1] = input, data
	if _, done, err := m.block(fr, b); err != nil || !done {
		t.Fatalf("the block stopped (err %v): a lookup into the growing object was kept", err)
	}
	if fr[2] == nil || fr[2] != fr[3] {
		t.Fatalf("input.proposal looked up as %v and %v", fr[2], fr[3])
	}
	if e := m.dots.entries[slot(input, proposal.konst, dotSlots)]; e.val != fr[2] {
		t.Fatal("the lookup into the input is not kept")
	}
	if fr[6] == nil || fr[6].String() != `"y"` {
		t.Fatalf("the grown object's member reads %v", fr[6])
	}
}

// TestDotsDoNotOutliveTheEvaluation: evaluations of one plan on inputs in
// turn, on several goroutines, each read their own input, never a lookup
// kept from another.
func TestDotsDoNotOutliveTheEvaluation(t *testing.T) {
	pl := compileOne(t, `package gated

decision := {"action": input.proposal.action, "class": input.proposal.class, "again": input.proposal.action}
`)
	if !pl.fresh {
		t.Fatal("the plan does not keep lookups")
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				id := fmt.Sprintf("a%d-%d", g, i)
				input := ast.MustParseTerm(fmt.Sprintf(`{"proposal": {"action": %q, "class": "c%d"}}`, id, i))
				got, err := pl.Eval(context.Background(), input, ast.NewTerm(ast.NewObject()), planNow)
				want := ast.MustParseTerm(fmt.Sprintf(`{"action": %q, "class": "c%d", "again": %q}`, id, i, id))
				if err != nil || got == nil || !got.Equal(want) {
					t.Errorf("evaluation %s: %v (%v), want %v", id, got, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
}
