package replay

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// jsonFields maps the JSON names of struct type t's exported fields to
// their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.IsExported() && name != "" && name != "-" {
			out[name] = f.Type
		}
	}
	return out
}

// TestRecordedVerdictIsAVerdict: what a replay reads of a verdict.decided
// record is a part of gated.Verdict, member for member and type for
// type, so that a change of the verdict's schema cannot leave the replay
// reading a member the engine no longer writes.
func TestRecordedVerdictIsAVerdict(t *testing.T) {
	verdict := jsonFields(reflect.TypeFor[gated.Verdict]())
	read := jsonFields(reflect.TypeFor[recordedVerdict]())
	if len(read) == 0 || len(verdict) <= len(read) {
		t.Fatalf("the replay reads %d members of a verdict's %d", len(read), len(verdict))
	}
	for name, typ := range read {
		if got, ok := verdict[name]; !ok || got != typ {
			t.Errorf("member %q: %v in the replay's reading, %v in gated.Verdict", name, typ, got)
		}
	}
}

// TestOnePassKeys: the one-pass readings read exactly the members their
// encoding/json types name, so a member added to one is added to both.
func TestOnePassKeys(t *testing.T) {
	tests := []struct {
		note string
		typ  reflect.Type
		keys []string
	}{
		{note: "policy.decided", typ: reflect.TypeFor[recordedPolicy](), keys: recordedPolicyKeys},
		{note: "replay input", typ: reflect.TypeFor[engine.ReplayInput](), keys: replayInputKeys},
		{note: "verdict.decided", typ: reflect.TypeFor[recordedVerdict](), keys: recordedVerdictKeys},
		{note: "review.started", typ: reflect.TypeFor[reviewStartedRecord](), keys: reviewStartedKeys},
		{note: "review.finished", typ: reflect.TypeFor[reviewFinishedRecord](), keys: reviewFinishedKeys},
		{note: "deny", typ: reflect.TypeFor[gated.Deny](), keys: denyKeys},
		{note: "route", typ: reflect.TypeFor[engine.Route](), keys: routeKeys},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			var names []string
			for name := range jsonFields(tc.typ) {
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
