package engine

import (
	"strconv"

	"github.com/gated/gated/internal/jsonscan"
)

// setTopLevelUint returns doc, a JSON object, with the value of its
// top-level member key replaced by n. The member's value must be an
// unsigned integer. It reports false, and returns doc unchanged, when doc
// has no such member or is not a well-formed object as far as the scan
// reads it. Nested members of the same name are left alone. doc is not
// modified; the result is a new slice.
//
// It lets the engine encode a verdict once with audit_seq 0, for the
// verdict's audit record, and then give the stored and published copies
// their sequence without encoding the verdict again.
func setTopLevelUint(doc []byte, key string, n uint64) ([]byte, bool) {
	i := jsonscan.Space(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return doc, false
	}
	// start and stop bound the member's digits once found; the scan goes
	// on to the object's end so that a second member of the name, or an
	// object that never closes, is refused.
	depth, start, stop := 0, -1, -1
	for i < len(doc) {
		switch doc[i] {
		case '{', '[':
			depth++
			i++
		case '}', ']':
			depth--
			i++
			if depth > 0 {
				continue
			}
			if start < 0 || jsonscan.Space(doc, i) != len(doc) {
				return doc, false
			}
			out := make([]byte, 0, len(doc)+20)
			out = append(out, doc[:start]...)
			out = strconv.AppendUint(out, n, 10)
			return append(out, doc[stop:]...), true
		case '"':
			open := i
			if i = jsonscan.String(doc, open); i < 0 {
				return doc, false
			}
			if depth != 1 || string(doc[open+1:i-1]) != key {
				continue
			}
			colon := jsonscan.Space(doc, i)
			if colon >= len(doc) || doc[colon] != ':' {
				continue // a value that spells the key
			}
			if start >= 0 {
				return doc, false // the name twice
			}
			first := jsonscan.Space(doc, colon+1)
			last := first
			for last < len(doc) && doc[last] >= '0' && doc[last] <= '9' {
				last++
			}
			if next := jsonscan.Space(doc, last); last == first || next >= len(doc) || doc[next] != ',' && doc[next] != '}' {
				return doc, false // not an unsigned integer
			}
			start, stop, i = first, last, last
		default:
			i++
		}
	}
	return doc, false
}
