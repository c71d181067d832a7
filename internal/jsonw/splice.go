package jsonw

import (
	"strconv"

	"github.com/gated/gated/internal/jsonscan"
)

// SetTopLevelUint returns doc, a JSON object, with the value of its
// top-level member key replaced by n. The member's value must be an
// unsigned integer. It reports false, and returns doc unchanged, when doc
// has no such member or is not a well-formed object as far as the scan
// reads it, and when a top-level key holds an escape or a byte outside
// printable ASCII (jsonscan.Members), which no verdict's does. Nested
// members of the same name are left alone. doc is not modified; the
// result is a new slice.
//
// It lets the engine encode a verdict once with audit_seq 0, for the
// verdict's audit record, and then give the stored and published copies
// their sequence without encoding the verdict again.
func SetTopLevelUint(doc []byte, key string, n uint64) ([]byte, bool) {
	// start and stop bound the member's digits once found; the walk goes
	// on to the object's end so that a second member of the name is
	// refused.
	start, stop := -1, -1
	ok := jsonscan.Members(doc, func(name, val []byte) bool {
		if string(name) != key {
			return true
		}
		if start >= 0 || len(val) == 0 || jsonscan.Digits(val, 0) != len(val) {
			return false // the name twice, or not an unsigned integer
		}
		// val is doc[start:stop]: Members hands out slices of doc.
		start = cap(doc) - cap(val)
		stop = start + len(val)
		return true
	})
	if !ok || start < 0 {
		return doc, false
	}
	out := make([]byte, 0, len(doc)+20)
	out = append(out, doc[:start]...)
	out = strconv.AppendUint(out, n, 10)
	return append(out, doc[stop:]...), true
}
