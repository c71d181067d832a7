package plan

import (
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// opaGlobMatch is OPA's own glob.match on args: its result, or its error.
func opaGlobMatch(t *testing.T, args []*ast.Term) (*ast.Term, error) {
	t.Helper()
	var out *ast.Term
	err := topdown.GetBuiltin(ast.GlobMatch.Name)(topdown.BuiltinContext{}, args, func(v *ast.Term) error {
		out = v
		return nil
	})
	return out, err
}

// globArgs builds glob.match's operands: delims is null when mode is 0,
// an array of the comma-separated parts of delims when mode is 1, and a
// number otherwise.
func globArgs(pattern string, mode byte, delims, match string) []*ast.Term {
	d := ast.NullTerm()
	switch mode % 3 {
	case 1:
		var elems []*ast.Term
		if delims != "" {
			for _, part := range strings.Split(delims, ",") {
				elems = append(elems, ast.StringTerm(part))
			}
		}
		d = ast.ArrayTerm(elems...)
	case 2:
		d = ast.IntNumberTerm(7)
	}
	return []*ast.Term{ast.StringTerm(pattern), d, ast.StringTerm(match)}
}

// checkGlobMatch holds the machine's glob.match to OPA's on args: the same
// result, twice (the second from the machine's compiled patterns), or left
// to OPA where OPA fails.
func checkGlobMatch(t *testing.T, m *machine, args []*ast.Term) (taken bool) {
	t.Helper()
	want, err := opaGlobMatch(t, args)
	for range 2 {
		got, ok := m.globMatch(args)
		switch {
		case ok && err != nil:
			t.Fatalf("glob.match(%v) = %v, and OPA's built-in fails: %v", args, got, err)
		case ok && !got.Equal(want):
			t.Fatalf("glob.match(%v) = %v, OPA's built-in %v", args, got, want)
		}
		taken = ok
	}
	return taken
}

func TestGlobMatchIsOPAs(t *testing.T) {
	m := &machine{}
	for _, tc := range []struct {
		pattern string
		mode    byte
		delims  string
		match   string
		taken   bool
	}{
		{"*_skill", 0, "", "ns.web_skill", true},
		{"rotate_*_credentials", 1, "_,-", "rotate_db_credentials", true},
		{"rotate_*_credentials", 1, "_,-", "rotate_db_credentials_then_drop_all_credentials", true},
		{"db_**", 1, "_,-", "db_drop_table", true},
		// An empty array is the dot: * stops at one.
		{"a.*", 1, "", "a.b.c", true},
		{"a.*", 0, "", "a.b.c", true},
		{"a?c", 1, "é", "aéc", true},
		// What the machine leaves to OPA: a pattern that does not compile,
		// a delimiter of two characters or none, more than four, another
		// type.
		{"[a", 0, "", "a", false},
		{"a*", 1, "ab", "a", false},
		{"a*", 1, ",", "a", false},
		{"a*", 1, "a,b,c,d,e", "a", false},
		{"a*", 2, "", "a", false},
	} {
		if got := checkGlobMatch(t, m, globArgs(tc.pattern, tc.mode, tc.delims, tc.match)); got != tc.taken {
			t.Errorf("glob.match(%q, %d %q, %q): taken by the machine %v, want %v", tc.pattern, tc.mode, tc.delims, tc.match, got, tc.taken)
		}
	}
	// A number where a string goes is OPA's to word.
	if _, ok := m.globMatch([]*ast.Term{ast.IntNumberTerm(1), ast.NullTerm(), ast.StringTerm("a")}); ok {
		t.Error("a number pattern is taken by the machine")
	}
	if _, ok := m.globMatch([]*ast.Term{ast.StringTerm("a"), ast.NullTerm(), ast.IntNumberTerm(1)}); ok {
		t.Error("a number to match is taken by the machine")
	}
}

// TestGlobMatchKeepsFewPatterns: past maxGlobs patterns the machine starts
// over rather than growing without bound, and still answers.
func TestGlobMatchKeepsFewPatterns(t *testing.T) {
	m := &machine{}
	for i := range 3 * maxGlobs {
		p := strings.Repeat("a", i%97) + "*" + string(rune('a'+i%26)) + strings.Repeat("?", i/97)
		checkGlobMatch(t, m, globArgs(p, 0, "", "aaab"))
		if len(m.globs) > maxGlobs {
			t.Fatalf("the machine keeps %d patterns, more than %d", len(m.globs), maxGlobs)
		}
	}
}

// FuzzGlobMatch holds the machine's glob.match to OPA's built-in.
func FuzzGlobMatch(f *testing.F) {
	f.Add("*_skill", byte(0), "", "ns.web_skill")
	f.Add("rotate_*_credentials", byte(1), "_,-", "rotate_db_credentials")
	f.Add("{a,b}*[!c]", byte(1), "", "a.xd")
	f.Add("**", byte(1), ".,_", "a_b.c")
	f.Add("[a-", byte(0), "", "a")
	f.Add("\\*", byte(1), "\xff", "*")
	f.Fuzz(func(t *testing.T, pattern string, mode byte, delims, match string) {
		checkGlobMatch(t, &machine{}, globArgs(pattern, mode, delims, match))
	})
}

// TestGlobMatchOfAKnownPatternAllocatesNothing: matching with a pattern
// the machine has compiled builds no key and no delimiter slice.
func TestGlobMatchOfAKnownPatternAllocatesNothing(t *testing.T) {
	m := &machine{}
	args := globArgs("rotate_*_credentials", 1, "_,-", "rotate_db_credentials")
	checkGlobMatch(t, m, args)
	if n := testing.AllocsPerRun(100, func() { m.globMatch(args) }); n != 0 {
		t.Fatalf("a match allocates %v times", n)
	}
}
