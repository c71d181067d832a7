package personas

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gated/gated/engine"
)

func TestBuiltinReviewer(t *testing.T) {
	r, err := Builtin()
	if err != nil {
		t.Fatalf("Builtin: %v", err)
	}
	p, ok := r.Persona("reviewer")
	if !ok {
		t.Fatalf("no built-in reviewer; have %q", r.Names())
	}
	if p.PermissionMode != "read-only" {
		t.Errorf("permission_mode %q, want read-only", p.PermissionMode)
	}
	if p.Plugin != "sop" {
		t.Errorf("plugin %q, want sop", p.Plugin)
	}
	wantGates := []string{"sop_covers", "no_parallel_operation", "rollback_known"}
	if !reflect.DeepEqual(p.RequiredGates, wantGates) {
		t.Errorf("required_gates %q, want %q", p.RequiredGates, wantGates)
	}
	if p.MaxTurns != 5 {
		t.Errorf("max_turns %d, want 5", p.MaxTurns)
	}
	if !slices.Contains(p.DisallowedTools, "*_skill") {
		t.Errorf("disallowed_tools %q do not include *_skill", p.DisallowedTools)
	}
	if p.CriticalReminder == "" {
		t.Error("no critical_reminder")
	}
	// The body must state each gate and that doubt means reject.
	for _, want := range append(wantGates, "unsure", "reject") {
		if !strings.Contains(p.Prompt, want) {
			t.Errorf("prompt does not mention %q", want)
		}
	}
}

func TestBuiltinReturnsFreshRegistry(t *testing.T) {
	a, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	pa, _ := a.Persona("reviewer")
	pa.PermissionMode = "default"
	b, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	if pb, _ := b.Persona("reviewer"); pb.PermissionMode != "read-only" {
		t.Errorf("a change to one registry leaked into the next: permission_mode %q", pb.PermissionMode)
	}
}

func TestRegistryPersonaUnknown(t *testing.T) {
	r, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := r.Persona("no-such-persona"); ok || p != nil {
		t.Errorf("Persona(no-such-persona) = %v, %v; want nil, false", p, ok)
	}
}

func TestLoadBuiltinsOnly(t *testing.T) {
	tests := []struct {
		note string
		root func(t *testing.T) string
	}{
		{note: "empty root", root: func(*testing.T) string { return "" }},
		{note: "missing dir", root: func(t *testing.T) string { return filepath.Join(t.TempDir(), "absent") }},
		{note: "empty dir", root: func(t *testing.T) string { return t.TempDir() }},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			r, warnings, err := Load(tc.root(t))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if len(warnings) != 0 {
				t.Errorf("warnings %q, want none", warnings)
			}
			if got, want := r.Names(), []string{"reviewer"}; !reflect.DeepEqual(got, want) {
				t.Errorf("names %q, want %q", got, want)
			}
		})
	}
}

func TestLoadTree(t *testing.T) {
	root := t.TempDir()
	write := func(rel, src string) string {
		t.Helper()
		path := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("top.md", persona("Top level.", "name: top"))
	write("team/db/deep.md", persona("Nested two levels down.", "name: deep", "max_turns: 3"))
	write("team/notes.txt", persona("Not markdown.", "name: from-txt"))
	write("team/deep.md.bak", persona("A backup.", "name: from-bak"))
	// A directory whose name ends in .md is walked, not read as a file.
	write("team/archive.md/kept.md", persona("Inside a .md directory.", "name: kept"))
	broken := write("team/broken.md", "no frontmatter here\n")
	// WalkDir visits entries in lexical order, so a/ comes before b/.
	write("a/dup.md", persona("First.", "name: dup"))
	second := write("b/dup.md", persona("Second.", "name: dup"))
	override := write("ops/reviewer.md", persona("A local reviewer.", "name: reviewer", "permission_mode: read-only"))
	unknown := write("ops/extra.md", persona("Extra keys.", "name: extra", "colour: blue"))

	r, warnings, err := Load(root)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}

	if got, want := r.Names(), []string{"deep", "dup", "extra", "kept", "reviewer", "top"}; !reflect.DeepEqual(got, want) {
		t.Errorf("names %q, want %q", got, want)
	}
	if p, ok := r.Persona("deep"); !ok || p.MaxTurns != 3 || p.Prompt != "Nested two levels down." {
		t.Errorf("deep = %#v, %v; want the nested file", p, ok)
	}
	if p, ok := r.Persona("dup"); !ok || p.Prompt != "First." {
		t.Errorf("dup = %#v, %v; want the first file in walk order", p, ok)
	}
	if p, ok := r.Persona("reviewer"); !ok || p.Prompt != "A local reviewer." {
		t.Errorf("reviewer = %#v, %v; want the file's persona to replace the built-in", p, ok)
	}

	wantWarnings := []struct {
		note  string
		frags []string
	}{
		{"broken file is skipped", []string{broken, "skipped"}},
		{"duplicate is skipped", []string{second, `"dup"`, "skipped"}},
		{"built-in is replaced", []string{override, "built-in", `"reviewer"`}},
		{"unknown key", []string{unknown, `"colour"`}},
	}
	for _, w := range wantWarnings {
		t.Run(w.note, func(t *testing.T) {
			if !slices.ContainsFunc(warnings, func(s string) bool { return containsAll(s, w.frags...) }) {
				t.Errorf("no warning mentions all of %q in %q", w.frags, warnings)
			}
		})
	}
	if len(warnings) != len(wantWarnings) {
		t.Errorf("got %d warnings %q, want %d", len(warnings), warnings, len(wantWarnings))
	}

	// Loading a directory must not change what Builtin returns.
	b, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := b.Persona("reviewer"); p.Prompt == "A local reviewer." {
		t.Error("Load changed the built-in reviewer")
	}
}

func TestLoadExamples(t *testing.T) {
	r, warnings, err := Load(filepath.Join("..", "examples", "personas"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings %q, want none", warnings)
	}
	p, ok := r.Persona("operator")
	if !ok {
		t.Fatalf("no operator persona; have %q", r.Names())
	}
	if p.PermissionMode != "default" {
		t.Errorf("operator permission_mode %q, want default", p.PermissionMode)
	}
	if _, ok := r.Persona("reviewer"); !ok {
		t.Error("built-in reviewer missing after loading examples")
	}
}

func TestComposeSystemPrompt(t *testing.T) {
	tests := []struct {
		note string
		base string
		p    *engine.Persona
		want string
	}{
		{
			note: "base, body, reminder",
			base: "Base.",
			p:    &engine.Persona{Prompt: "Body.", CriticalReminder: "Reject when unsure."},
			want: "Base.\n\nBody.\n\n<critical-reminder>\nReject when unsure.\n</critical-reminder>",
		},
		{
			note: "no reminder, no block",
			base: "Base.",
			p:    &engine.Persona{Prompt: "Body."},
			want: "Base.\n\nBody.",
		},
		{
			note: "base is trimmed",
			base: "\n  Base.\n\n",
			p:    &engine.Persona{Prompt: "Body."},
			want: "Base.\n\nBody.",
		},
		{
			note: "empty base",
			base: "",
			p:    &engine.Persona{Prompt: "Body.", CriticalReminder: "R."},
			want: "Body.\n\n<critical-reminder>\nR.\n</critical-reminder>",
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			if got := ComposeSystemPrompt(tc.base, tc.p); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestComposeSystemPromptBuiltinReviewer(t *testing.T) {
	r, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	p, _ := r.Persona("reviewer")
	got := ComposeSystemPrompt(BasePrompt, p)
	base := strings.Index(got, BasePrompt)
	body := strings.Index(got, p.Prompt)
	block := strings.Index(got, "<critical-reminder>\n"+p.CriticalReminder+"\n</critical-reminder>")
	if base != 0 || body <= base || block <= body {
		t.Errorf("want base at 0 < body < reminder block, got %d, %d, %d in %q", base, body, block, got)
	}
	if !strings.HasSuffix(got, "</critical-reminder>") {
		t.Errorf("prompt does not end with the reminder block: %q", got)
	}
}

func containsAll(s string, frags ...string) bool {
	for _, f := range frags {
		if !strings.Contains(s, f) {
			return false
		}
	}
	return true
}
