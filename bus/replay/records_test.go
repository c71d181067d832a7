package replay

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gated/gated"
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

// TestOnePassKeys: the one-pass reading of policy.decided reads exactly
// the members of its declared types (gated.AuditHead and
// gated.PolicyDecidedData, which recordedPolicy embeds), so a member
// added to one is read by both readings.
func TestOnePassKeys(t *testing.T) {
	tests := []struct {
		note string
		typ  reflect.Type
		keys []string
	}{
		{note: "policy.decided", typ: reflect.TypeFor[recordedPolicy](), keys: recordedPolicyKeys},
		{note: "replay input", typ: reflect.TypeFor[gated.ReplayInput](), keys: replayInputKeys},
		{note: "deny", typ: reflect.TypeFor[gated.Deny](), keys: denyKeys},
		{note: "route", typ: reflect.TypeFor[gated.Route](), keys: routeKeys},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			var names []string
			for name := range jsonMembers(tc.typ, nil) {
				names = append(names, name)
			}
			if len(names) == 0 {
				t.Fatalf("%v has no JSON members", tc.typ)
			}
			slices.Sort(names)
			if keys := slices.Sorted(slices.Values(tc.keys)); !slices.Equal(keys, names) {
				t.Errorf("the one-pass reading reads %v, encoding/json %v", keys, names)
			}
		})
	}
}
