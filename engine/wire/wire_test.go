package wire

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// notSubjects are string literals of the module that begin with "gated."
// but are file names, not subjects.
var notSubjects = map[string]bool{"gated.lock": true, "gated.log": true}

// TestSubjectsAreSpelledOnce fails when Go code of the module outside this
// package spells a gated subject in a string literal instead of using the
// names here. Tests and generated code are left out.
func TestSubjectsAreSpelledOnce(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			// internal/telemetry names OpenTelemetry spans and attributes
			// (gated.policy, gated.tenant, ...), which are not subjects.
			if path == here || name == "testdata" || name == "vendor" || (strings.HasPrefix(name, ".") && path != root) ||
				path == filepath.Join(root, "internal", "telemetry") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err == nil && strings.HasPrefix(s, Root) && !notSubjects[s] {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d spells the subject %q: use package wire", rel, fset.Position(lit.Pos()).Line, s)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d Go files under %s, want the whole module", checked, root)
	}
}

// TestSubjectsOfTheContract pins every builder to the subject the v1
// contract spells, so that a change here is a change of the contract and
// shows as one.
func TestSubjectsOfTheContract(t *testing.T) {
	for _, tc := range []struct{ name, got, want string }{
		{"proposal", ProposalSubject("acme", "host_restart_service"), "gated.proposals.acme.host_restart_service"},
		{"proposal stream", ProposalSubjects, "gated.proposals.*.*"},
		{"verdict", VerdictSubject("acme", "p1"), "gated.verdicts.acme.p1"},
		{"review", ReviewSubject, "gated.review"},
		{"review of a tenant", ReviewSubjectPrefix + "acme", "gated.review.acme"},
		{"audit", AuditSubject("acme", "verdict.decided"), "gated.audit.acme.verdict.decided"},
		{"verdict key", VerdictKey("acme", "p1"), "acme.p1"},
		{"every verdict key", VerdictKey("*", "*"), "*.*"},
		{"operator", OperatorSubject("acme", "p1"), "gated.operator.acme.p1"},
		{"continuation", ContinuationSubject("acme", "r1"), "gated.continuations.acme.r1"},
		{"escalation", EscalationSubject("acme"), "gated.escalations.acme"},
		{"tool", ToolSubject("sop_lookup"), "gated.tools.sop_lookup"},
		{"status", StatusSubject("acme", "p1"), "gated.status.acme.p1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}

func TestErrorCodesMatch(t *testing.T) {
	errA, errB, errC := errors.New("a"), errors.New("b"), errors.New("c")
	codes := ErrorCodes{400: {errA}, 413: {errA}, 503: {errB, errC}}
	for _, tc := range []struct {
		note   string
		code   int
		target error
		want   bool
	}{
		{note: "listed", code: 400, target: errA, want: true},
		{note: "two codes, one sentinel", code: 413, target: errA, want: true},
		{note: "second of a row", code: 503, target: errC, want: true},
		{note: "another code's sentinel", code: 400, target: errB},
		{note: "unlisted code", code: 404, target: errA},
		{note: "nil target", code: 400},
	} {
		t.Run(tc.note, func(t *testing.T) {
			if got := codes.Match(tc.code, tc.target); got != tc.want {
				t.Fatalf("Match(%d, %v) = %v, want %v", tc.code, tc.target, got, tc.want)
			}
		})
	}
}
