package plan

import "github.com/open-policy-agent/opa/v1/ast"

// OPA's planner lays an object literal such as {"required": true,
// "persona": persona_name, "quorum": quorum} out as a MakeObject statement
// and one insert per member, and an array literal such as [action] as a
// MakeArray and one append per element. Each insert allocates a member
// and may grow the object's key list and map; each append copies the
// array. A decision builds a few dozen such collections. fuseLiterals
// replaces a Make statement followed at once by the additions of a
// literal with one statement that builds the collection from all its
// elements in one go. Constant literals are folded before this
// (literals.go); these hold values computed in the evaluation.
//
// The fused statement gives what the statements it replaces give: when
// an element's value is undefined, the collection is left with the
// elements before it, as the additions would have left it, and the block
// ends. Only objects whose keys are distinct constants are fused, so that
// no insert would have replaced another.

// sMakeObjectOf makes the object {keys[i]: values[i], ...}.
type sMakeObjectOf struct {
	keys   []*ast.Term
	values []operand
	target int
}

// sMakeArrayOf makes the array [values[0], ...].
type sMakeArrayOf struct {
	values []operand
	target int
}

// fuseLiterals fuses the collection literals of every function.
func fuseLiterals(funcs []*pfunc) {
	for _, f := range funcs {
		for _, b := range f.blocks {
			fuseBlock(b)
		}
	}
}

// fuseBlock fuses the literals of b and of the blocks nested in it.
func fuseBlock(b *pblock) {
	out := b.stmts[:0]
	for i := 0; i < len(b.stmts); i++ {
		s := b.stmts[i]
		switch s := s.(type) {
		case *sBlock:
			for _, sub := range s.blocks {
				fuseBlock(sub)
			}
		case *sScan:
			fuseBlock(s.body)
		case *sNot:
			fuseBlock(s.body)
		case *sMakeObject:
			if f, n := fuseObject(s.target, b.stmts[i+1:]); n > 0 {
				out = append(out, f)
				i += n
				continue
			}
		case *sMakeArray:
			if f, n := fuseArray(s.target, b.stmts[i+1:]); n > 0 {
				out = append(out, f)
				i += n
				continue
			}
		}
		out = append(out, s)
	}
	clear(b.stmts[len(out):])
	b.stmts = out
}

// fuseObject reads the inserts into target that start next and returns
// the statement that makes the object with them, and how many they are;
// none when they are not a literal it fuses.
func fuseObject(target int, next []pstmt) (*sMakeObjectOf, int) {
	f := &sMakeObjectOf{target: target}
	for _, s := range next {
		in, ok := s.(*sInsert)
		if !ok || in.object != target || in.key.konst == nil || refers(in.value, target) {
			break
		}
		for _, k := range f.keys {
			if k.Equal(in.key.konst) {
				return nil, 0
			}
		}
		f.keys, f.values = append(f.keys, in.key.konst), append(f.values, in.value)
	}
	return f, len(f.keys)
}

// fuseArray reads the appends to target that start next and returns the
// statement that makes the array with them, and how many they are.
func fuseArray(target int, next []pstmt) (*sMakeArrayOf, int) {
	f := &sMakeArrayOf{target: target}
	for _, s := range next {
		ap, ok := s.(*sAppend)
		if !ok || ap.array != target || refers(ap.value, target) {
			break
		}
		f.values = append(f.values, ap.value)
	}
	return f, len(f.values)
}

// refers reports whether o is the local l.
func refers(o operand, l int) bool { return o.konst == nil && o.local == l }

// makeObjectOf runs s; ok is false when a value is undefined.
func (m *machine) makeObjectOf(fr []*ast.Term, s *sMakeObjectOf) (ok bool) {
	items := m.items[:0]
	ok = true
	for i, o := range s.values {
		v := m.val(fr, o)
		if v == nil {
			ok = false
			break
		}
		items = append(items, [2]*ast.Term{s.keys[i], v})
	}
	// NewObject copies the items: the machine's buffer serves the next.
	fr[s.target] = ast.NewTerm(ast.NewObject(items...))
	clear(items)
	m.items = items[:0]
	return ok
}

// makeArrayOf runs s; ok is false when a value is undefined.
func (m *machine) makeArrayOf(fr []*ast.Term, s *sMakeArrayOf) (ok bool) {
	// NewArray keeps the elements' slice: a new one for each array.
	elems := make([]*ast.Term, 0, len(s.values))
	ok = true
	for _, o := range s.values {
		v := m.val(fr, o)
		if v == nil {
			ok = false
			break
		}
		elems = append(elems, v)
	}
	fr[s.target] = ast.NewTerm(ast.NewArray(elems...))
	return ok
}
