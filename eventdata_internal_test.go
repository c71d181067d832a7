package gated

import (
	"encoding/json"
	"testing"
)

// The records every proposal has keep the encoding of the maps they were
// written from before: the same members, in the same order.
func TestEventDataEncodesAsItsMap(t *testing.T) {
	run := &RunPolicy{MaxRounds: 3}
	for _, tc := range []struct {
		data any
		m    map[string]any
	}{
		{ReceivedData{Subject: "proposals.acme.restart", Bytes: 412, SHA256: "ab"},
			map[string]any{"subject": "proposals.acme.restart", "bytes": 412, "sha256": "ab"}},
		{PolicyDecidedData{Denies: []Deny{{Rule: "r", Message: "m"}}, Review: Route{Required: true, Persona: "reviewer", Quorum: 1},
			ReviewerTools: []string{"get_sop_text"}, DeniedTools: []string{"x_skill"}, EvalUS: 25, SOP: "sop-1", Run: run},
			map[string]any{"denies": []Deny{{Rule: "r", Message: "m"}}, "review": Route{Required: true, Persona: "reviewer", Quorum: 1},
				"reviewer_tools": []string{"get_sop_text"}, "denied_tools": []string{"x_skill"}, "eval_us": int64(25), "sop": "sop-1", "run": run}},
		{PolicyDecidedData{Denies: []Deny{}},
			map[string]any{"denies": []Deny{}, "review": Route{}, "reviewer_tools": []string(nil), "denied_tools": []string(nil),
				"eval_us": int64(0), "sop": "", "run": (*RunPolicy)(nil)}},
	} {
		got, _ := json.Marshal(tc.data)
		want, _ := json.Marshal(tc.m)
		if string(got) != string(want) {
			t.Errorf("%T encodes as\n%s\nwant\n%s", tc.data, got, want)
		}
	}
}
