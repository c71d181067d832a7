package plan

import (
	"unsafe"

	"github.com/open-policy-agent/opa/v1/ast"
)

// A decision looks the same members of the input and the data up over and
// over: every rule reads input.proposal, most then read its action or
// class, and the settings rules read data.gated.config. In gated's bundle
// about seven lookups in ten repeat one made earlier in the evaluation,
// and each costs a hash of the key and a probe of the object's map. The
// machine keeps the lookups into the input and the data for the rest of
// an evaluation, by the identity of the collection and the key.
//
// A lookup is kept only where its answer cannot change: in the input, the
// data and what a kept lookup returned, which the machine never changes
// (it changes only collections it has just made, and keeps lookups only
// for a plan whose statements were checked to do so, literals.go). The
// keys are the terms themselves: a key built anew, equal to one seen,
// misses and is looked up again, never answered wrongly.

// dotSlots is the size of an evaluation's lookup cache, a power of two.
const dotSlots = 256

// dotEntry is one kept lookup: src[key] is val (nil: no such member).
type dotEntry struct{ src, key, val *ast.Term }

// dotCache is an evaluation's kept lookups, and the collections whose
// lookups may be kept.
type dotCache struct {
	entries [dotSlots]dotEntry
	// fixed holds the collections that cannot change: the input, the
	// data and the collections a kept lookup returned.
	fixed [2 * dotSlots]*ast.Term
}

// slot spreads a pair of terms over n slots by their addresses.
func slot(a, b *ast.Term, n int) int {
	h := uint64(uintptr(unsafe.Pointer(a)))*0x9e3779b97f4a7c15 ^ uint64(uintptr(unsafe.Pointer(b)))*0xc2b2ae3d27d4eb4f
	return int(h>>40) & (n - 1)
}

// isFixed reports whether t is one of the collections that cannot change.
func (c *dotCache) isFixed(t *ast.Term) bool {
	for i := slot(t, nil, len(c.fixed)); ; i = (i + 1) & (len(c.fixed) - 1) {
		switch c.fixed[i] {
		case t:
			return true
		case nil:
			return false
		}
	}
}

// fix adds t to the collections that cannot change, while there is room:
// past half full the lookups in t are simply not kept.
func (c *dotCache) fix(t *ast.Term, count *int) {
	if *count >= len(c.fixed)/2 {
		return
	}
	for i := slot(t, nil, len(c.fixed)); ; i = (i + 1) & (len(c.fixed) - 1) {
		switch c.fixed[i] {
		case t:
			return
		case nil:
			c.fixed[i] = t
			*count++
			return
		}
	}
}

// lookup is dot(src.Value, key), kept when src cannot change.
func (m *machine) lookup(src, key *ast.Term) *ast.Term {
	c := m.dots
	if c == nil || !c.isFixed(src) {
		return dot(src.Value, key)
	}
	e := &c.entries[slot(src, key, dotSlots)]
	if e.src == src && e.key == key {
		return e.val
	}
	v := dot(src.Value, key)
	*e = dotEntry{src: src, key: key, val: v}
	if v != nil {
		switch v.Value.(type) {
		case ast.Object, *ast.Array, ast.Set:
			c.fix(v, &m.nfixed)
		}
	}
	return v
}

// startDots readies the lookup cache for an evaluation over input and
// data, when the plan may keep lookups.
func (m *machine) startDots(pl *Plan, input, data *ast.Term) {
	if !pl.fresh {
		return
	}
	if m.dots == nil {
		m.dots = new(dotCache)
	}
	m.dots.fix(input, &m.nfixed)
	m.dots.fix(data, &m.nfixed)
}

// endDots forgets the evaluation's lookups.
func (m *machine) endDots() {
	if m.dots != nil && m.nfixed > 0 {
		*m.dots = dotCache{}
		m.nfixed = 0
	}
}
