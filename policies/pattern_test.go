package policies

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/gated/gated/engine"
)

// actionPatternCase is one row of testdata/action_patterns.json.
type actionPatternCase struct {
	Note    string `json:"note"`
	Pattern string `json:"pattern"`
	Action  string `json:"action"`
	Match   bool   `json:"match"`
}

func actionPatternCases(t testing.TB) []actionPatternCase {
	t.Helper()
	raw, err := os.ReadFile("testdata/action_patterns.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []actionPatternCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatalf("reading testdata/action_patterns.json: %v", err)
	}
	return cases
}

// patternQuery evaluates the bundle's action_pattern_matches.
type patternQuery struct{ pq rego.PreparedEvalQuery }

func newPatternQuery(t testing.TB) patternQuery {
	t.Helper()
	b, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	mods, err := b.parse(false)
	if err != nil {
		t.Fatal(err)
	}
	opts := []func(*rego.Rego){rego.Query("x := data.gated.action_pattern_matches(input.pattern, input.action)")}
	for _, m := range mods {
		opts = append(opts, rego.ParsedModule(m))
	}
	pq, err := rego.New(opts...).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return patternQuery{pq}
}

func (q patternQuery) matches(t testing.TB, pattern, action string) bool {
	t.Helper()
	in := ast.NewObject(
		[2]*ast.Term{ast.StringTerm("pattern"), ast.StringTerm(pattern)},
		[2]*ast.Term{ast.StringTerm("action"), ast.StringTerm(action)},
	)
	rs, err := q.pq.Eval(context.Background(), rego.EvalParsedInput(in))
	if err != nil {
		t.Fatalf("evaluating action_pattern_matches(%q, %q): %v", pattern, action, err)
	}
	return len(rs) == 1 && rs[0].Bindings["x"] == true
}

// TestActionPatternsGoAndRegoAgree runs the shared table through the
// policy's action_pattern_matches and engine.MatchAction (which the SOP
// reviewer uses): each must give the expected answer, so the two cannot
// drift apart.
func TestActionPatternsGoAndRegoAgree(t *testing.T) {
	q := newPatternQuery(t)
	for _, tc := range actionPatternCases(t) {
		t.Run(tc.Note, func(t *testing.T) {
			if got := q.matches(t, tc.Pattern, tc.Action); got != tc.Match {
				t.Errorf("rego: action_pattern_matches(%q, %q) = %v, want %v", tc.Pattern, tc.Action, got, tc.Match)
			}
			if got := engine.MatchAction(tc.Pattern, tc.Action); got != tc.Match {
				t.Errorf("go: MatchAction(%q, %q) = %v, want %v", tc.Pattern, tc.Action, got, tc.Match)
			}
		})
	}
}

// FuzzMatchActionAgreesWithPolicy: for any pattern and action, the Go
// reading of an action pattern is the policy's.
func FuzzMatchActionAgreesWithPolicy(f *testing.F) {
	for _, tc := range actionPatternCases(f) {
		f.Add(tc.Pattern, tc.Action)
	}
	q := newPatternQuery(f)
	f.Fuzz(func(t *testing.T, pattern, action string) {
		if !utf8.ValidString(pattern) || !utf8.ValidString(action) {
			return // Rego strings are UTF-8
		}
		if got, want := engine.MatchAction(pattern, action), q.matches(t, pattern, action); got != want {
			t.Fatalf("MatchAction(%q, %q) = %v, the policy says %v", pattern, action, got, want)
		}
	})
}
