package plan

import (
	"maps"

	"github.com/open-policy-agent/opa/v1/ast"
)

// OPA's planner builds a collection literal such as ["_", "-"] or
// {"required": false, "quorum": 0} with a Make statement and one append
// or insert per element, every time the statement runs: glob.match(p,
// ["_", "-"], action) builds its delimiter array on each call. When every
// element is a constant, foldLiterals builds the collection once, at plan
// time, and the statements become one constant.
//
// A constant is shared by every evaluation, so it must never be changed
// in place. The machine changes a collection only through append, insert
// and set-add statements; folding is done only when, in every function of
// the plan, each local those statements write into is written by nothing
// but its Make statement (or a reset) and is not a parameter: then what
// they change is always a collection made in that evaluation, and never a
// constant.

// collectionKind is an array, an object or a set.
type collectionKind int

const (
	kindArray collectionKind = iota
	kindObject
	kindSet
)

// changesOnlyFreshAll reports whether every function of a plan changes
// only collections it has just made (changesOnlyFresh).
func changesOnlyFreshAll(funcs []*pfunc) bool {
	for _, f := range funcs {
		if !changesOnlyFresh(f) {
			return false
		}
	}
	return true
}

// foldLiterals folds the constant collection literals of every function
// of a plan that changes only collections it has just made.
func foldLiterals(funcs []*pfunc) {
	for _, f := range funcs {
		grown := localsGrown(f)
		for _, b := range f.blocks {
			foldBlock(b, grown)
		}
	}
}

// grownBy is a function's count, per local, of the statements that add
// to the collection in it.
type grownBy map[int]int

// localsGrown counts, for each local of f, the append, insert and
// set-add statements into it.
func localsGrown(f *pfunc) grownBy {
	g := grownBy{}
	eachStmt(f, func(s pstmt) {
		if l, ok := grows(s); ok {
			g[l]++
		}
	})
	return g
}

// grows returns the local a statement adds to, if it adds to one.
func grows(s pstmt) (int, bool) {
	switch s := s.(type) {
	case *sAppend:
		return s.array, true
	case *sInsert:
		return s.object, true
	case *sInsertOnce:
		return s.object, true
	case *sSetAdd:
		return s.set, true
	}
	return 0, false
}

// changesOnlyFresh reports whether every statement of f that adds to a
// local's collection runs where that local holds nothing yet (the machine
// clears a function's locals when it is called, and an addition to
// nothing is undefined) or a collection made by a Make statement of f,
// with no other write to the local in between.
//
// It reads f in order, tracking the locals that may hold something else
// (unsafe). A block may stop at any statement, so after a nested block
// every local the block writes other than by a Make is unsafe; a scan's
// body starts each turn with the locals it writes unsafe, since a
// previous turn may have written them. Parameters hold the caller's
// values: unsafe from the start.
func changesOnlyFresh(f *pfunc) bool {
	ok := true
	var walk func(b *pblock, unsafe map[int]bool)
	nested := func(b *pblock, unsafe map[int]bool, loop bool) {
		inner := maps.Clone(unsafe)
		written := overwrites(b)
		if loop {
			maps.Copy(inner, written)
		}
		walk(b, inner)
		maps.Copy(unsafe, written)
	}
	walk = func(b *pblock, unsafe map[int]bool) {
		for _, s := range b.stmts {
			if l, grows := grows(s); grows && unsafe[l] {
				ok = false
			}
			switch s := s.(type) {
			case *sBlock:
				for _, sub := range s.blocks {
					nested(sub, unsafe, false)
				}
			case *sScan:
				unsafe[s.key], unsafe[s.value] = true, true
				nested(s.body, unsafe, true)
			case *sNot:
				nested(s.body, unsafe, false)
			case *sMakeArray, *sMakeObject, *sMakeSet:
				l, _, _ := made(s)
				delete(unsafe, l)
			default:
				for _, l := range writes(s) {
					if l < 0 {
						ok = false
					}
					unsafe[l] = true
				}
			}
		}
	}
	unsafe := map[int]bool{}
	for _, p := range f.params {
		unsafe[p] = true
	}
	for _, b := range f.blocks {
		nested(b, unsafe, false)
	}
	return ok
}

// overwrites returns the locals that b, nested blocks included, writes
// other than by a Make statement.
func overwrites(b *pblock) map[int]bool {
	out := map[int]bool{}
	eachStmt(&pfunc{blocks: []*pblock{b}}, func(s pstmt) {
		if _, _, isMake := made(s); isMake {
			return
		}
		if sc, ok := s.(*sScan); ok {
			out[sc.key], out[sc.value] = true, true
			return
		}
		for _, l := range writes(s) {
			out[l] = true
		}
	})
	return out
}

// writes lists the locals a statement sets. A statement this list does not
// know is taken to write every local: it stops folding.
func writes(s pstmt) []int {
	switch s := s.(type) {
	case *sDot:
		return []int{s.target}
	case *sLen:
		return []int{s.target}
	case *sScan:
		return []int{s.key, s.value}
	case *sAssignInt:
		return []int{s.target}
	case *sAssign:
		return []int{s.target}
	case *sAssignOnce:
		return []int{s.target}
	case *sReset:
		return []int{s.target}
	case *sMakeNull:
		return []int{s.target}
	case *sMakeConst:
		return []int{s.target}
	case *sMakeArray:
		return []int{s.target}
	case *sMakeObject:
		return []int{s.target}
	case *sMakeSet:
		return []int{s.target}
	case *sMakeObjectOf:
		return []int{s.target}
	case *sMakeArrayOf:
		return []int{s.target}
	case *sCallFunc:
		return []int{s.result}
	case *sCallBuiltin:
		return []int{s.result}
	case *sReturn, *sBlock, *sBreak, *sNot, *sEqual, *sNotEqual, *sIsArray, *sIsObject, *sIsSet,
		*sIsDefined, *sIsUndefined, *sAppend, *sInsert, *sInsertOnce, *sSetAdd, *sResultAdd, *sNop:
		return nil
	}
	return []int{-1}
}

// eachStmt calls visit for every statement of f, nested blocks included.
func eachStmt(f *pfunc, visit func(pstmt)) {
	var walk func(b *pblock)
	walk = func(b *pblock) {
		for _, s := range b.stmts {
			visit(s)
			switch s := s.(type) {
			case *sBlock:
				for _, sub := range s.blocks {
					walk(sub)
				}
			case *sScan:
				walk(s.body)
			case *sNot:
				walk(s.body)
			}
		}
	}
	for _, b := range f.blocks {
		walk(b)
	}
}

// foldBlock replaces, in b and the blocks nested in it, each Make
// statement followed by constant additions that are all the additions its
// local gets with one constant. An addition's element is constant when it
// is a constant operand or a local that an earlier statement of b set to
// a constant (a number, null, a folded collection) and nothing wrote
// since: the statements of a block run in order, so reaching one means
// every statement before it ran. Statements that set such locals may sit
// between the additions; they are kept, in order, before the constant.
func foldBlock(b *pblock, grown grownBy) {
	known := map[int]*ast.Term{}
	out := b.stmts[:0]
	for i := 0; i < len(b.stmts); i++ {
		s := b.stmts[i]
		target, kind, isMake := made(s)
		if isMake {
			var kept []pstmt
			var adds []pstmt
			var elems []*ast.Term
			// The run's locals are committed only when it folds: a run
			// given up leaves its statements to be read in turn.
			runKnown := maps.Clone(known)
			j := i + 1
			for ; j < len(b.stmts) && len(adds) < grown[target]; j++ {
				next := b.stmts[j]
				if v, l, ok := constantSet(next); ok && l != target {
					runKnown[l] = v
					kept = append(kept, next)
					continue
				}
				elem, ok := constantInto(next, target, kind, runKnown)
				if !ok {
					break
				}
				adds = append(adds, next)
				elems = append(elems, elem...)
			}
			if len(adds) == grown[target] {
				known = runKnown
				out = append(out, kept...)
				c := &sMakeConst{value: literal(kind, elems), target: target}
				out = append(out, c)
				known[target] = c.value
				i = j - 1
				continue
			}
		}
		switch s := s.(type) {
		case *sBlock:
			for _, sub := range s.blocks {
				foldBlock(sub, grown)
			}
			clear(known)
		case *sScan:
			foldBlock(s.body, grown)
			clear(known)
		case *sNot:
			foldBlock(s.body, grown)
			clear(known)
		default:
			for _, l := range writes(s) {
				delete(known, l)
			}
			if v, l, ok := constantSet(s); ok {
				known[l] = v
			}
		}
		out = append(out, s)
	}
	clear(b.stmts[len(out):])
	b.stmts = out
}

// constantSet returns the constant a statement sets a local to, if it
// sets one.
func constantSet(s pstmt) (*ast.Term, int, bool) {
	switch s := s.(type) {
	case *sMakeConst:
		return s.value, s.target, true
	case *sAssignInt:
		return s.value, s.target, true
	case *sMakeNull:
		return ast.InternedNullTerm, s.target, true
	}
	return nil, 0, false
}

// made returns the local a Make statement makes and its kind.
func made(s pstmt) (int, collectionKind, bool) {
	switch s := s.(type) {
	case *sMakeArray:
		return s.target, kindArray, true
	case *sMakeObject:
		return s.target, kindObject, true
	case *sMakeSet:
		return s.target, kindSet, true
	}
	return 0, 0, false
}

// constantInto returns the constant element (a key and a value for an
// object) that s adds to the collection of that kind in local target, if
// it adds one. An insert-once is left alone: a repeated key with another
// value is an error to report when the statement runs.
func constantInto(s pstmt, target int, kind collectionKind, known map[int]*ast.Term) ([]*ast.Term, bool) {
	val := func(o operand) *ast.Term {
		if o.konst != nil {
			return o.konst
		}
		return known[o.local]
	}
	switch s := s.(type) {
	case *sAppend:
		if v := val(s.value); kind == kindArray && s.array == target && v != nil {
			return []*ast.Term{v}, true
		}
	case *sInsert:
		if k, v := val(s.key), val(s.value); kind == kindObject && s.object == target && k != nil && v != nil {
			return []*ast.Term{k, v}, true
		}
	case *sSetAdd:
		if v := val(s.value); kind == kindSet && s.set == target && v != nil {
			return []*ast.Term{v}, true
		}
	}
	return nil, false
}

// literal builds the collection of kind with elems (keys and values in
// turn for an object), as the machine would.
func literal(kind collectionKind, elems []*ast.Term) *ast.Term {
	switch kind {
	case kindArray:
		return ast.NewTerm(ast.NewArray(elems...))
	case kindObject:
		obj := ast.NewObject()
		for i := 0; i < len(elems); i += 2 {
			obj.Insert(elems[i], elems[i+1])
		}
		return ast.NewTerm(obj)
	default:
		set := ast.NewSet()
		for _, v := range elems {
			set.Add(v)
		}
		return ast.NewTerm(set)
	}
}
