package personas

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated/engine"
)

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
			if got, want := r.Names(), builtinNames; !reflect.DeepEqual(got, want) {
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

	if got, want := r.Names(), withBuiltins("deep", "dup", "extra", "kept", "top"); !reflect.DeepEqual(got, want) {
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

// writeTree writes files (relative path -> content) under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, src := range files {
		path := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNewReport(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"a.md":           persona("A.", "name: alpha"),
		"b/dup.md":       persona("Second.", "description: the same name again", "name: alpha"),
		"c/broken.md":    persona("Broken.", "name: broken", "max_turns: 99"),
		"d/reviewer.md":  persona("Local reviewer.", "name: reviewer", "permission_mode: read-only"),
		"e/extra.md":     persona("Extra.", "name: extra", "colour: blue"),
		".git/x.md":      persona("Hidden directory.", "name: hidden-dir"),
		".#lock.md":      persona("Editor lock file.", "name: hidden-file"),
		"notes/read.txt": "not a persona",
	})
	r, rep, err := New(root)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if !rep.OK || !rep.Changed || rep.Root != root || rep.Error != "" {
		t.Errorf("report %+v, want OK and changed for %s", rep, root)
	}
	wantFiles := []string{filepath.Join(root, "a.md"), filepath.Join(root, "d/reviewer.md"), filepath.Join(root, "e/extra.md")}
	if !reflect.DeepEqual(rep.Files, wantFiles) {
		t.Errorf("files %q, want %q", rep.Files, wantFiles)
	}
	wantNames := withBuiltins("alpha", "extra")
	if !reflect.DeepEqual(rep.Personas, wantNames) || !reflect.DeepEqual(r.Names(), wantNames) {
		t.Errorf("personas %q / %q, want %q", rep.Personas, r.Names(), wantNames)
	}
	wantWarnings := []Problem{
		{File: filepath.Join(root, "b/dup.md"), Line: 3, Severity: SeverityWarning,
			Message: fmt.Sprintf("persona \"alpha\" is already defined by %s (skipped)", filepath.Join(root, "a.md"))},
		{File: filepath.Join(root, "d/reviewer.md"), Line: 2, Severity: SeverityWarning, Message: `replaces the built-in persona "reviewer"`},
		{File: filepath.Join(root, "e/extra.md"), Line: 3, Severity: SeverityWarning, Message: `unknown frontmatter key "colour" ignored`},
	}
	if !reflect.DeepEqual(rep.Warnings, wantWarnings) {
		t.Errorf("warnings\n%s\nwant\n%s", problemLines(rep.Warnings), problemLines(wantWarnings))
	}
	if len(rep.Errors) != 1 || rep.Errors[0].File != filepath.Join(root, "c/broken.md") || rep.Errors[0].Line != 3 ||
		!strings.Contains(rep.Errors[0].Message, "max_turns 99") {
		t.Errorf("errors\n%s\nwant one on c/broken.md:3 about max_turns", problemLines(rep.Errors))
	}
	e, ok := r.Snapshot().Entry("reviewer")
	if !ok || e.Origin != OriginFile || e.File != filepath.Join(root, "d/reviewer.md") {
		t.Errorf("reviewer entry %+v, want the file's", e)
	}
	if e, _ := r.Snapshot().Entry("dba"); e.Origin != OriginBuiltin {
		t.Errorf("dba entry %+v, want the built-in", e)
	}
}

// TestNewSymlinkedRoot checks that a root that is a symbolic link to a
// directory, as mounted volumes often are, is read through.
func TestNewSymlinkedRoot(t *testing.T) {
	real := t.TempDir()
	writeTree(t, real, map[string]string{"x/linked.md": persona("Linked.", "name: linked")})
	link := filepath.Join(t.TempDir(), "personas")
	if err := os.Symlink(real, link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	r, rep, err := New(link)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.ByName("linked"); !ok {
		t.Fatalf("personas %q lack the linked one; report %+v", r.Names(), rep)
	}
	if want := filepath.Join(link, "x", "linked.md"); !slices.Equal(rep.Files, []string{want}) {
		t.Errorf("files %q, want %q", rep.Files, want)
	}
}

func TestNewUnreadableRoot(t *testing.T) {
	file := filepath.Join(t.TempDir(), "personas")
	if err := os.WriteFile(file, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, rep, err := New(file)
	if !errors.Is(err, ErrUnreadableRoot) {
		t.Fatalf("err = %v, want ErrUnreadableRoot", err)
	}
	if rep.OK {
		t.Error("report says OK")
	}
	if _, _, err := Load(file); !errors.Is(err, ErrUnreadableRoot) || !strings.Contains(err.Error(), file) {
		t.Errorf("Load: err = %v, want ErrUnreadableRoot naming %s", err, file)
	}
}

// TestReloadKeepsTheLastRegistry checks that a reload that cannot read the
// directory changes nothing, and that the next good one recovers.
func TestReloadKeepsTheLastRegistry(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "personas")
	writeTree(t, root, map[string]string{"kept.md": persona("Kept.", "name: kept")})
	r, _, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	before := r.Snapshot()

	// The directory is replaced by a file: the reload fails entirely.
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root, []byte("oops"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := r.Reload()
	if rep.OK || !strings.Contains(rep.Error, "not a directory") {
		t.Fatalf("report %+v, want a failure saying not a directory", rep)
	}
	if r.Snapshot() != before || !slices.Contains(rep.Personas, "kept") {
		t.Fatalf("a failed reload changed the registry: %q", r.Names())
	}

	// A directory that is simply gone is the built-ins, not a failure.
	if err := os.Remove(root); err != nil {
		t.Fatal(err)
	}
	rep = r.Reload()
	if !rep.OK || !rep.Changed || !reflect.DeepEqual(r.Names(), builtinNames) {
		t.Fatalf("report %+v, names %q: want the built-ins alone", rep, r.Names())
	}
}

func TestReloadUnreadableSubdirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads directories whatever their mode")
	}
	root := t.TempDir()
	writeTree(t, root, map[string]string{"a.md": persona("A.", "name: a"), "locked/b.md": persona("B.", "name: b")})
	r, _, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	locked := filepath.Join(root, "locked")
	if err := os.Chmod(locked, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(locked, 0o755) })
	rep := r.Reload()
	if rep.OK || !strings.Contains(rep.Error, "locked") {
		t.Errorf("report %+v, want a failure naming the locked directory", rep)
	}
	if _, ok := r.ByName("b"); !ok {
		t.Error("a partial reload dropped a persona that is still on disk")
	}
}

func TestReloadUnchangedKeepsTheSnapshot(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"a.md": persona("A.", "name: a")})
	r, _, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	before := r.Snapshot()
	if rep := r.Reload(); !rep.OK || rep.Changed {
		t.Errorf("report %+v, want OK and unchanged", rep)
	}
	if r.Snapshot() != before {
		t.Error("an unchanged reload swapped the snapshot")
	}
	writeTree(t, root, map[string]string{"a.md": persona("A, edited.", "name: a")})
	if rep := r.Reload(); !rep.OK || !rep.Changed {
		t.Errorf("report %+v, want OK and changed", rep)
	}
	if p, _ := r.ByName("a"); p.Prompt != "A, edited." {
		t.Errorf("prompt %q after the edit", p.Prompt)
	}
}

func readOnly(name, prompt string) *engine.Persona {
	return &engine.Persona{Name: name, PermissionMode: "read-only", Plugin: "sop", Prompt: prompt, Tools: []string{"get_proposal"}}
}

func TestReplaceRemove(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"file.md": persona("From the file.", "name: file")})
	r, _, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	start := r.Snapshot()

	// Replace adds a persona, and takes a copy of it.
	p := readOnly("added", "Added.")
	if err := r.Replace(p); err != nil {
		t.Fatalf("Replace: %v", err)
	}
	p.Prompt, p.Tools[0] = "changed by the caller", "run_shell"
	got, ok := r.ByName("added")
	if !ok || got.Prompt != "Added." || got.Tools[0] != "get_proposal" || got.MaxTurns != DefaultMaxTurns {
		t.Fatalf("added = %#v, %v; want the persona as it was replaced, max_turns defaulted", got, ok)
	}
	if e, _ := r.Snapshot().Entry("added"); e.Origin != OriginReplaced || e.File != "" {
		t.Errorf("entry %+v, want origin replaced without a file", e)
	}
	// Copy on write: the snapshot taken before does not change.
	if _, ok := start.ByName("added"); ok {
		t.Error("Replace changed a snapshot taken before it")
	}

	// Replace overrides a built-in and a file.
	for _, name := range []string{"reviewer", "file"} {
		if err := r.Replace(readOnly(name, "Replaced "+name+".")); err != nil {
			t.Fatal(err)
		}
		if got, _ := r.ByName(name); got.Prompt != "Replaced "+name+"." {
			t.Errorf("%s prompt %q after Replace", name, got.Prompt)
		}
	}

	// Invalid personas are refused and change nothing.
	invalid := []struct {
		note string
		p    *engine.Persona
		frag string
	}{
		{"nil", nil, "nil"},
		{"bad name", readOnly("Bad Name", "x"), "name"},
		{"no prompt", readOnly("empty", " "), "body"},
		{"too many turns", &engine.Persona{Name: "t", Prompt: "x", MaxTurns: MaxTurnsLimit + 1}, "max_turns"},
		{"unknown provider", &engine.Persona{Name: "m", Prompt: "x", Model: "azure/gpt"}, "provider"},
		{"bad pattern", &engine.Persona{Name: "g", Prompt: "x", DisallowedTools: []string{"[x"}}, "disallowed_tools[0]"},
		{"short timeout", &engine.Persona{Name: "d", Prompt: "x", Timeout: time.Second}, "minimum"},
	}
	for _, tc := range invalid {
		t.Run(tc.note, func(t *testing.T) {
			before := r.Snapshot()
			err := r.Replace(tc.p)
			if !errors.Is(err, ErrInvalidPersona) || !strings.Contains(err.Error(), tc.frag) {
				t.Errorf("err = %v, want ErrInvalidPersona mentioning %q", err, tc.frag)
			}
			if r.Snapshot() != before {
				t.Error("a refused Replace changed the registry")
			}
		})
	}

	// Remove reports whether the persona was there.
	if !r.Remove("dba") {
		t.Error("Remove(dba) = false for a loaded persona")
	}
	if r.Remove("dba") {
		t.Error("Remove(dba) = true the second time")
	}
	if _, ok := r.ByName("dba"); ok {
		t.Error("dba still served after Remove")
	}
	if !slices.Contains(start.Names(), "dba") {
		t.Error("Remove changed a snapshot taken before it")
	}

	// The changes outlast a reload, which rereads everything else.
	writeTree(t, root, map[string]string{"new.md": persona("New.", "name: new")})
	if rep := r.Reload(); !rep.OK {
		t.Fatalf("reload %+v", rep)
	}
	if want := without(withBuiltins("added", "file", "new"), "dba"); !reflect.DeepEqual(r.Names(), want) {
		t.Errorf("names after reload %q, want %q", r.Names(), want)
	}
	if got, _ := r.ByName("reviewer"); got.Prompt != "Replaced reviewer." {
		t.Errorf("reviewer prompt %q: the reload undid Replace", got.Prompt)
	}

	// Replace puts a removed name back.
	if err := r.Replace(readOnly("dba", "Local dba.")); err != nil {
		t.Fatal(err)
	}
	if got, ok := r.ByName("dba"); !ok || got.Prompt != "Local dba." {
		t.Errorf("dba = %v, %v after Replace", got, ok)
	}
}

// TestRegistryReadersDuringReloads reads while reloads and edits swap the
// registry. Every snapshot a reader takes must be one whole load: the
// three files of one generation, never a mix. Run with -race.
func TestRegistryReadersDuringReloads(t *testing.T) {
	root := t.TempDir()
	names := []string{"one", "two", "three"}
	generation := func(g int) {
		files := map[string]string{}
		for _, n := range names {
			files[n+".md"] = persona(fmt.Sprintf("generation %d", g), "name: "+n)
		}
		writeTree(t, root, files)
	}
	generation(0)
	r, _, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := r.Snapshot()
				first, ok := s.ByName("one")
				if !ok {
					errs <- fmt.Errorf("snapshot without one: %q", s.Names())
					return
				}
				for _, n := range names {
					p, ok := s.ByName(n)
					if !ok || p.Prompt != first.Prompt {
						errs <- fmt.Errorf("snapshot mixes loads: one says %q, %s says %v", first.Prompt, n, p)
						return
					}
				}
				// The registry's own lookups see whole personas too.
				if p, ok := r.ByName("two"); !ok || !strings.HasPrefix(p.Prompt, "generation ") {
					errs <- fmt.Errorf("ByName(two) = %v, %v", p, ok)
					return
				}
				_ = r.Names()
			}
		})
	}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				_ = r.Replace(readOnly("edited", "x"))
			} else {
				r.Remove("edited")
			}
		}
	})
	for g := 1; g <= 40; g++ {
		generation(g)
		if rep := r.Reload(); !rep.OK || !rep.Changed {
			t.Errorf("reload %d: %+v", g, rep)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if p, _ := r.ByName("three"); p.Prompt != "generation 40" {
		t.Errorf("after the last reload three says %q", p.Prompt)
	}
}

// BenchmarkByName measures the lookup every decision makes: an atomic
// load and a map read, with no lock and no allocation.
func BenchmarkByName(b *testing.B) {
	r, err := Builtin()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := r.ByName("dba"); !ok {
				b.Fatal("no dba")
			}
		}
	})
}
