package policies

import (
	"strings"
	"testing"
)

func TestDecodeHistory(t *testing.T) {
	verdict := `{"v":1,"proposal_id":"p1","tenant":"acme","action":"db_drop_table","outcome":"approved","approved":true,"stage":"review","reason":"ok","decided_at":"2026-01-02T03:04:05Z"}`
	for _, tc := range []struct {
		note  string
		input string
		n     int
		want  string // "" means the history is read
	}{
		{note: "empty list", input: `[]`},
		{note: "one verdict", input: "[" + verdict + "]", n: 1},
		{note: "not a list", input: verdict, want: "want a JSON array of verdicts"},
		{note: "trailing value", input: `[] []`, want: "unexpected data after the JSON value"},
		{note: "trailing close bracket", input: `[]]`, want: "unexpected data after the JSON value"},
		{note: "trailing close brace", input: "[" + verdict + "]}", want: "unexpected data after the JSON value"},
		{note: "unknown field", input: "[" + strings.Replace(verdict, `"v":1`, `"v":1,"x":2`, 1) + "]", want: `verdict [0]: unknown field "x"`},
		{note: "wrong type", input: "[" + strings.Replace(verdict, `"reason":"ok"`, `"reason":7`, 1) + "]", want: "verdict [0]: field reason must not be number"},
		{note: "no decided_at", input: "[" + strings.Replace(verdict, `,"decided_at":"2026-01-02T03:04:05Z"`, "", 1) + "]", want: "decided_at is missing"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			got, err := DecodeHistory("history.json", []byte(tc.input))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("DecodeHistory: %v", err)
			case tc.want == "" && len(got) != tc.n:
				t.Fatalf("DecodeHistory read %d verdicts, want %d", len(got), tc.n)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("DecodeHistory = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
