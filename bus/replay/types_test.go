package replay

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gated/gated/engine"
)

// jsonMembers maps the JSON member names of struct type t (its embedded
// structs' included) to their Go types.
func jsonMembers(t reflect.Type, into map[string]reflect.Type) map[string]reflect.Type {
	if into == nil {
		into = map[string]reflect.Type{}
	}
	for f := range t.Fields() {
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			jsonMembers(f.Type, into)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		into[name] = f.Type
	}
	return into
}

// TestReadsTheDeclaredEventTypes: every member replay reads of an audit
// event is a member of the event's type in engine (engine.AuditHead for
// the members every event starts with), read as the same kind of value,
// so that replay's one-pass readings cannot drift from what gated
// records.
func TestReadsTheDeclaredEventTypes(t *testing.T) {
	for _, tc := range []struct {
		event string
		read  reflect.Type
	}{
		{engine.EventPolicyDecided, reflect.TypeFor[recordedPolicy]()},
		{engine.EventReviewStarted, reflect.TypeFor[reviewStartedRecord]()},
		{engine.EventReviewDone, reflect.TypeFor[reviewFinishedRecord]()},
		{engine.EventVerdict, reflect.TypeFor[recordedVerdict]()},
	} {
		d, ok := engine.NewAuditEventData(tc.event)
		if !ok {
			t.Fatalf("%s has no declared type", tc.event)
		}
		declared := jsonMembers(reflect.TypeOf(d).Elem(), jsonMembers(reflect.TypeFor[engine.AuditHead](), nil))
		for name, typ := range jsonMembers(tc.read, nil) {
			want, ok := declared[name]
			switch {
			case !ok:
				t.Errorf("%s: replay reads member %q, which %T does not declare", tc.event, name, d)
			case want.Kind() != typ.Kind() || want.Kind() != reflect.String && want != typ:
				t.Errorf("%s: replay reads member %q as %v, declared %v", tc.event, name, typ, want)
			}
		}
	}
}
