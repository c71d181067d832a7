package engine

import (
	"encoding/json"
	"testing"
)

func TestMergeJSON(t *testing.T) {
	for _, tc := range []struct{ base, extra, want string }{
		{`{"action":"a"}`, `{"why":"w"}`, `{"action":"a","why":"w"}`},
		{`{"action":"a"}`, ` { "why" : "w" } `, `{"action":"a","why" : "w"}`},
		{`{"action":"a"}`, `{}`, `{"action":"a"}`},
		{`{"action":"a"}`, `null`, `{"action":"a"}`},
		{`{"action":"a"}`, ``, `{"action":"a"}`},
		{`{}`, `{"why":"w"}`, `{"why":"w"}`},
		{`{"action":"a"}`, `"text"`, `{"action":"a","detail":"text"}`},
		{`{"action":"a"}`, `[1,2]`, `{"action":"a","detail":[1,2]}`},
	} {
		got := mergeJSON(json.RawMessage(tc.base), json.RawMessage(tc.extra))
		if string(got) != tc.want {
			t.Errorf("mergeJSON(%s, %s) = %s, want %s", tc.base, tc.extra, got, tc.want)
		}
		if !json.Valid(got) {
			t.Errorf("mergeJSON(%s, %s) = %s is not valid JSON", tc.base, tc.extra, got)
		}
	}
}
