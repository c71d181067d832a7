package plan

import (
	"fmt"
	"maps"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"
	"github.com/open-policy-agent/opa/v1/util"
)

// Topdown does not look a reference into the base data (data.m[k], where
// no rule defines data.m) up in a value: it reads it from OPA's store, by
// a path of strings (storage.NewPathForRef). A number in the reference is
// its text, so data.m[2] finds data.m["2"] and data.m[2.0] finds
// data.m["2.0"]; a boolean, null or collection finds nothing; and the
// store indexes an array by a segment that reads as an integer
// (util.Atoi64), so data.a["1"] is data.a[1]. Topdown keeps what it read
// (its base cache), but a look-up there that finds nothing falls back to
// the store, and one that finds something finds what the store would: the
// store's reading decides. A value held in a variable (m := data.m;
// m[2]), returned by a rule or built in the policy is looked up as a
// value: an object of string keys has no member 2.
//
// OPA's planner lays a reference into the base data out as lookups
// (DotStmt) from the data local, or from a scan (ScanStmt) of a
// collection reached that way; a variable gets a local of its own, set by
// an assignment. markBase marks those lookups and scans, and the machine
// reads them as the store does. A key bound before the reference meets a
// collection the planner scans (its rules beside base documents) in the
// scan's first statement, an equality of the scan's key and the bound
// value: that equality is also read as the store reads the key.

// markBase marks, in every function of a plan, the lookups and scans of
// the base data and the key equalities that start a scan of it. It fails
// with ErrUnsupported where a local may hold the base data on one path
// and another value on another: which reading applies would then depend
// on the path taken.
func markBase(funcs []*pfunc) error {
	for _, f := range funcs {
		if err := markBaseFunc(f); err != nil {
			return fmt.Errorf("function %s: %w", f.name, err)
		}
	}
	return nil
}

// holds says what a local may hold at a point of a function: the base
// data (a collection of it, or a scalar read from it), another value, or
// either. Nothing (zero) is a local not set, or reset: a look-up in it is
// undefined under either reading.
type holds uint8

const (
	holdsBase holds = 1 << iota
	holdsValue
)

// baseMarker follows what each local of one function holds, statement by
// statement. The planner reuses a local from one rule body to the next,
// so what a local holds is a property of a point in the function, not of
// the local.
type baseMarker struct {
	err error
}

func markBaseFunc(f *pfunc) error {
	var bm baseMarker
	st := map[int]holds{}
	for i, p := range f.params {
		st[p] = holdsValue
		if i == 1 && p == int(ir.Data) {
			st[p] = holdsBase
		}
	}
	// The function's blocks run in turn, each until its end or a
	// statement that is undefined: a block may leave any of its writes
	// done or not.
	for _, b := range f.blocks {
		bm.nested(b, st, nil)
	}
	return bm.err
}

// nested follows b, a block that may stop at any statement, from state
// st; afterwards st holds what each local may hold whether b ran to its
// end or not, and written, when set, gains what b wrote.
func (bm *baseMarker) nested(b *pblock, st, written map[int]holds) {
	inner := maps.Clone(st)
	w := map[int]holds{}
	bm.block(b, inner, w)
	for l, h := range w {
		st[l] |= h
		if written != nil {
			written[l] |= h
		}
	}
}

// block follows b's statements in order from st, which it updates: a
// statement that runs follows every one before it in b. written gains
// what each write sets.
func (bm *baseMarker) block(b *pblock, st, written map[int]holds) {
	set := func(l int, h holds) {
		st[l] = h
		written[l] |= h
	}
	from := func(o operand, s pstmt) holds {
		if o.konst != nil {
			return holdsValue
		}
		h := st[o.local]
		if h == holdsBase|holdsValue && bm.err == nil {
			bm.err = fmt.Errorf("%w: local %d may hold the base data or another value where %T reads it", ErrUnsupported, o.local, s)
		}
		return h
	}
	for _, s := range b.stmts {
		switch s := s.(type) {
		case *sDot:
			s.base = from(s.src, s) == holdsBase
			if s.base {
				set(s.target, holdsBase)
			} else {
				set(s.target, holdsValue)
			}
		case *sScan:
			scansBase := from(operand{local: s.src}, s) == holdsBase
			if eq, ok := firstStmt(s.body).(*sEqual); ok && eq.a.konst == nil && eq.a.local == s.key {
				eq.baseKey = scansBase
			}
			elem := holdsValue
			if scansBase {
				elem = holdsBase
			}
			// The body runs any number of times: each turn starts with
			// what the turns before may have written, until that stops
			// growing.
			carried := map[int]holds{}
			for {
				entry := maps.Clone(st)
				for l, h := range carried {
					entry[l] |= h
				}
				entry[s.key], entry[s.value] = holdsValue, elem
				w := map[int]holds{s.key: holdsValue, s.value: elem}
				bm.nested(s.body, entry, w)
				grew := false
				for l, h := range w {
					if carried[l]|h != carried[l] {
						carried[l] |= h
						grew = true
					}
				}
				if !grew {
					break
				}
			}
			for l, h := range carried {
				st[l] |= h
				written[l] |= h
			}
		case *sBlock:
			for _, sub := range s.blocks {
				bm.nested(sub, st, written)
			}
		case *sNot:
			bm.nested(s.body, st, written)
		case *sReset:
			set(s.target, 0)
		case *sCallFunc:
			// A callee's data parameter is the base data only when the
			// caller passes its own.
			if len(s.fn.params) >= 2 && (len(s.args) < 2 || s.args[1].konst != nil || s.args[1].local != int(ir.Data) || from(s.args[1], s) != holdsBase) && bm.err == nil {
				bm.err = fmt.Errorf("%w: %s is called with another data document", ErrUnsupported, s.fn.name)
			}
			set(s.result, holdsValue)
		default:
			for _, l := range writes(s) {
				if l < 0 {
					if bm.err == nil {
						bm.err = fmt.Errorf("%w: statement %T", ErrUnsupported, s)
					}
					continue
				}
				set(l, holdsValue)
			}
		}
	}
}

// firstStmt is b's first statement, nil when b has none.
func firstStmt(b *pblock) pstmt {
	if len(b.stmts) == 0 {
		return nil
	}
	return b.stmts[0]
}

// baseLookup looks key up in src, a collection of the base data, as the
// store reads the reference for topdown: a number is its text, a string
// indexes an array when it reads as an integer, any other key finds
// nothing.
func (m *machine) baseLookup(src, key *ast.Term) *ast.Term {
	switch k := key.Value.(type) {
	case ast.String:
		if arr, ok := src.Value.(*ast.Array); ok {
			return arrayAt(arr, string(k))
		}
		return m.lookup(src, key)
	case ast.Number:
		if obj, ok := src.Value.(ast.Object); ok {
			return obj.Get(ast.StringTerm(string(k)))
		}
		// An array: Number.Int reads the text with util.Atoi64, as the
		// store does.
		return m.lookup(src, key)
	}
	return nil
}

// arrayAt is arr's element at the index seg reads as, nil when it reads
// as none or one out of range.
func arrayAt(arr *ast.Array, seg string) *ast.Term {
	i, ok := util.Atoi64(seg)
	if !ok || i < 0 || i >= int64(arr.Len()) {
		return nil
	}
	return arr.Elem(int(i))
}

// baseKeyEqual reports whether v, as a key of a reference into the base
// data, names key, a key met scanning a base collection: a member's
// string or an element's index.
func baseKeyEqual(key, v ast.Value) bool {
	var seg string
	switch x := v.(type) {
	case ast.String:
		seg = string(x)
	case ast.Number:
		seg = string(x)
	default:
		return false
	}
	switch k := key.(type) {
	case ast.String:
		return string(k) == seg
	case ast.Number:
		i, ok := k.Int64()
		j, ok2 := util.Atoi64(seg)
		return ok && ok2 && i == j
	}
	return false
}
