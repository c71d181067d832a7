package strictjson

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCheckFolded(t *testing.T) {
	for _, tc := range []struct {
		note       string
		in         string
		path       string // "" with key "" means no error
		key, other string
	}{
		{note: "distinct keys", in: `{"host":"a","hosts":["b"],"service":"nginx"}`},
		{note: "scalars and arrays", in: `[1,"x",null,[{"a":1}]]`},
		{note: "ascii case", in: `{"host":"a","HOST":"b"}`, key: "HOST", other: "host"},
		{note: "one letter", in: `{"Host":"a","host":"b"}`, key: "Host", other: "host"},
		{note: "long s folds to s", in: `{"host":"a","ho\u017ft":"b"}`, key: "host", other: "hoſt"},
		{note: "kelvin sign folds to k", in: `{"\u212aey":1,"key":2}`, key: "key", other: "\u212aey"},
		{note: "nested in an array", in: `{"ops":[{"x":1},{"id":1,"ID":2}]}`, path: "/ops/1", key: "ID", other: "id"},
		{note: "pointer escapes", in: `{"a/b":{"c~d":{"e":1,"E":2}}}`, path: "/a~1b/c~0d", key: "E", other: "e"},
		{note: "sigma forms", in: `{"\u03c3":1,"\u03c2":2}`, key: "ς", other: "σ"},
		{note: "dotless i is not i", in: `{"i":1,"\u0131":2}`},
	} {
		t.Run(tc.note, func(t *testing.T) {
			var v any
			if err := json.Unmarshal([]byte(tc.in), &v); err != nil {
				t.Fatal(err)
			}
			err := CheckFolded(v)
			if tc.key == "" {
				if err != nil {
					t.Fatalf("CheckFolded(%s) = %v, want nil", tc.in, err)
				}
				return
			}
			fe, ok := errors.AsType[*FoldError](err)
			if !ok || !errors.Is(err, ErrFoldedKeys) {
				t.Fatalf("CheckFolded(%s) = %v, want a *FoldError", tc.in, err)
			}
			if fe.Path != tc.path || fe.Key != tc.key || fe.Other != tc.other {
				t.Fatalf("CheckFolded(%s) = %+v, want path %q keys %q, %q", tc.in, fe, tc.path, tc.key, tc.other)
			}
			if !strings.Contains(err.Error(), "differ only by case") {
				t.Fatalf("error %q does not say what is wrong", err)
			}
		})
	}
}

// FuzzCheckFolded holds CheckFolded to strings.EqualFold: it refuses an
// object exactly when two of its keys are equal under EqualFold, and
// the two it names are such keys.
func FuzzCheckFolded(f *testing.F) {
	for _, s := range [][2]string{{"host", "HOST"}, {"a", "b"}, {"hoſt", "host"}, {"K", "\u212a"}, {"ß", "ss"}, {"", ""}} {
		f.Add(s[0], s[1], "x")
	}
	f.Fuzz(func(t *testing.T, a, b, c string) {
		obj := map[string]any{a: 1, b: 2, c: 3}
		keys := []string{a, b, c}
		want := false
		for i := range keys {
			for j := i + 1; j < len(keys); j++ {
				if keys[i] != keys[j] && strings.EqualFold(keys[i], keys[j]) {
					want = true
				}
			}
		}
		for _, v := range []any{obj, []any{map[string]any{"n": obj}}} {
			err := CheckFolded(v)
			fe, got := errors.AsType[*FoldError](err)
			if got != want {
				t.Fatalf("CheckFolded(%q) = %v, want a refusal: %v", keys, err, want)
			}
			if got && (fe.Key == fe.Other || !strings.EqualFold(fe.Key, fe.Other)) {
				t.Fatalf("CheckFolded(%q) names %q and %q", keys, fe.Key, fe.Other)
			}
		}
	})
}
