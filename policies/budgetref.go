package policies

import (
	"github.com/open-policy-agent/opa/v1/ast"
)

// readsBudget reports whether a rule of the compiled modules can read
// input.budget: a reference to it, or to input whole (passed to a
// function, bound to a variable, walked) or under a key that is not a
// string written out (input[k]). Only the target of a with modifier,
// which replaces the input rather than reading it, is left out. It errs
// towards yes: the engine does not read the budget counters for a bundle
// it says no of, which must so be unable to see them.
func readsBudget(c *ast.Compiler) bool {
	for _, m := range c.Modules {
		if readsInput(m, "budget") {
			return true
		}
	}
	return false
}

// readsInput reports whether a rule of m can read input.<key>, as
// readsBudget tells for input.budget.
func readsInput(m *ast.Module, key string) bool {
	reads := false
	var vis *ast.GenericVisitor
	vis = ast.NewGenericVisitor(func(x any) bool {
		if reads {
			return true
		}
		switch x := x.(type) {
		case *ast.With:
			// The target is written, not read; the value is read.
			vis.Walk(x.Value)
			return true
		case ast.Ref:
			if refReadsInput(x, key) {
				reads = true
				return true
			}
			// The head is the root the reference starts from; a key may
			// itself refer to the input.
			for _, t := range x[1:] {
				vis.Walk(t)
			}
			return true
		case ast.Var:
			// input outside a reference: the whole document.
			if x.Equal(ast.InputRootDocument.Value) {
				reads = true
			}
		}
		return false
	})
	vis.Walk(m)
	return reads
}

// refReadsInput is readsInput's test of one reference.
func refReadsInput(r ast.Ref, key string) bool {
	if len(r) == 0 || !r[0].Equal(ast.InputRootDocument) {
		return false
	}
	if len(r) < 2 {
		return true
	}
	k, ok := r[1].Value.(ast.String)
	return !ok || string(k) == key
}
