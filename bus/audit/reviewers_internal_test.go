package audit

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gated/gated"
)

// jsonFields maps the JSON names of t's fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		fields[name] = f.Type
	}
	return fields
}

// TestTrackedVerdictReadsTheVerdictsFields: every member the track
// record reads of a verdict is a member of gated.Verdict (and of its
// reviews) under the same name and of the same type, so that the short
// reading cannot drift from what gated writes.
func TestTrackedVerdictReadsTheVerdictsFields(t *testing.T) {
	verdict := jsonFields(reflect.TypeFor[gated.Verdict]())
	for name, typ := range jsonFields(reflect.TypeFor[trackedVerdict]()) {
		want, ok := verdict[name]
		switch {
		case !ok:
			t.Errorf("gated.Verdict has no member %q", name)
		case name == "reviews":
			review := jsonFields(want.Elem())
			for rname, rtyp := range jsonFields(typ.Elem()) {
				if review[rname] != rtyp {
					t.Errorf("gated.Review's member %q is %v, read as %v", rname, review[rname], rtyp)
				}
			}
		case want != typ:
			t.Errorf("gated.Verdict's member %q is %v, read as %v", name, want, typ)
		}
	}
}
