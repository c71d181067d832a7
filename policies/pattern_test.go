package policies

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"unicode/utf8"

	"github.com/gobwas/glob"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/gated/gated"
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
	return newBundleQuery(t, "x := data.gated.action_pattern_matches(input.pattern, input.action)")
}

// newBundleQuery prepares query against the default bundle, with builtin
// errors non-fatal as config_errors is evaluated.
func newBundleQuery(t testing.TB, query string) patternQuery {
	t.Helper()
	b, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	mods, err := b.parse(false)
	if err != nil {
		t.Fatal(err)
	}
	opts := []func(*rego.Rego){rego.Query(query)}
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
// policy's action_pattern_matches and gated.MatchAction (which the SOP
// reviewer uses): each must give the expected answer, so the two cannot
// drift apart.
func TestActionPatternsGoAndRegoAgree(t *testing.T) {
	q := newPatternQuery(t)
	for _, tc := range actionPatternCases(t) {
		t.Run(tc.Note, func(t *testing.T) {
			if got := q.matches(t, tc.Pattern, tc.Action); got != tc.Match {
				t.Errorf("rego: action_pattern_matches(%q, %q) = %v, want %v", tc.Pattern, tc.Action, got, tc.Match)
			}
			if got := gated.MatchAction(tc.Pattern, tc.Action); got != tc.Match {
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
		if got, want := gated.MatchAction(pattern, action), q.matches(t, pattern, action); got != want {
			t.Fatalf("MatchAction(%q, %q) = %v, the policy says %v", pattern, action, got, want)
		}
	})
}

// validPattern evaluates the bundle's valid_action_pattern, the check
// config_errors makes of every action pattern in the policy data.
func (q patternQuery) validPattern(t testing.TB, pattern string) bool {
	t.Helper()
	in := ast.NewObject([2]*ast.Term{ast.StringTerm("pattern"), ast.StringTerm(pattern)})
	rs, err := q.pq.Eval(context.Background(), rego.EvalParsedInput(in))
	if err != nil {
		t.Fatalf("evaluating valid_action_pattern(%q): %v", pattern, err)
	}
	return len(rs) == 1
}

// goValidPattern is the Go reading of a valid action pattern: a non-empty
// pattern that gated.MatchAction can compile.
func goValidPattern(pattern string) bool {
	_, err := glob.Compile(pattern, []rune(gated.ActionWordSeparators)...)
	return pattern != "" && err == nil
}

// invalidActionPatterns are patterns config_errors refuses.
var invalidActionPatterns = []string{"", "[", "db_[", "rotate_[db_credentials", "k8s_{get,list", "db_[]", "db_[z-a]*", "[!]", `host_\`, "[a-"}

// validActionPatterns are patterns config_errors accepts.
var validActionPatterns = []string{"host_restart_service", "rotate_*_credentials", "db_**", "**", "k8s_{get,list}_pods", "k8s_[a-z]?_x", "[!a]*", "[^a]*", "a}", "{}", `host\_x`}

// TestActionPatternValidityGoAndRegoAgree: the patterns config_errors
// refuses are the ones gated.MatchAction cannot compile, and empty ones;
// on the shared table the two sides agree.
func TestActionPatternValidityGoAndRegoAgree(t *testing.T) {
	q := newBundleQuery(t, "data.gated.valid_action_pattern(input.pattern)")
	check := func(t *testing.T, pattern string, want bool) {
		t.Helper()
		if got := q.validPattern(t, pattern); got != want {
			t.Errorf("rego: valid_action_pattern(%q) = %v, want %v", pattern, got, want)
		}
		if got := goValidPattern(pattern); got != want {
			t.Errorf("go: compiling %q: valid = %v, want %v", pattern, got, want)
		}
	}
	for _, pattern := range validActionPatterns {
		t.Run("valid "+pattern, func(t *testing.T) { check(t, pattern, true) })
	}
	for _, pattern := range invalidActionPatterns {
		t.Run("invalid "+pattern, func(t *testing.T) { check(t, pattern, false) })
	}
	for _, tc := range actionPatternCases(t) {
		t.Run(tc.Note, func(t *testing.T) { check(t, tc.Pattern, goValidPattern(tc.Pattern)) })
	}
}

// FuzzActionPatternValidityAgreesWithGo: for any pattern, the policy's
// check of a configured action pattern accepts exactly what the Go side
// compiles, so no pattern config_errors lets through fails later on
// either side.
func FuzzActionPatternValidityAgreesWithGo(f *testing.F) {
	for _, tc := range actionPatternCases(f) {
		f.Add(tc.Pattern)
	}
	for _, pattern := range append(validActionPatterns, invalidActionPatterns...) {
		f.Add(pattern)
	}
	q := newBundleQuery(f, "data.gated.valid_action_pattern(input.pattern)")
	f.Fuzz(func(t *testing.T, pattern string) {
		if !utf8.ValidString(pattern) {
			return // Rego strings are UTF-8
		}
		if got, want := q.validPattern(t, pattern), goValidPattern(pattern); got != want {
			t.Fatalf("valid_action_pattern(%q) = %v, Go compiles it: %v", pattern, got, want)
		}
	})
}
