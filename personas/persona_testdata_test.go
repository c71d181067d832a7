package personas

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// TestParseTestdata parses every file under testdata: valid_* files must
// parse, invalid_* files must not. The same files seed FuzzParse.
func TestParseTestdata(t *testing.T) {
	files := testdataFiles(t)
	var valid, invalid int
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			p, _, err := Parse(file, src)
			switch {
			case strings.HasPrefix(name, "valid_"):
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				wantInvariants(t, p)
			case strings.HasPrefix(name, "invalid_"):
				wantParseError(t, file, p, err, "")
			default:
				t.Fatalf("testdata file %s must be named valid_* or invalid_*", name)
			}
		})
		if strings.HasPrefix(name, "valid_") {
			valid++
		} else {
			invalid++
		}
	}
	if valid < 3 || invalid < 3 {
		t.Fatalf("found %d valid and %d invalid testdata files, want at least 3 of each", valid, invalid)
	}
}

func FuzzParse(f *testing.F) {
	for _, file := range testdataFiles(f) {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	builtins, err := fs.Glob(builtinFS, "builtin/*.md")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range builtins {
		src, err := builtinFS.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	f.Add([]byte(fullPersona))
	f.Add([]byte(strings.ReplaceAll(fullPersona, "\n", "\r\n")))
	f.Fuzz(func(t *testing.T, src []byte) {
		const file = "fuzz.md"
		p, warnings, err := Parse(file, src)
		cp, problems := Check(file, src)
		if (cp == nil) != (err != nil) {
			t.Fatalf("Check gave persona %v, Parse gave error %v: they must agree", cp != nil, err)
		}
		// YAML also breaks lines at a lone CR.
		lines := strings.Count(strings.ReplaceAll(string(src), "\r\n", "\n"), "\n") + strings.Count(strings.ReplaceAll(string(src), "\r\n", ""), "\r") + 2
		for _, pr := range problems {
			if pr.File != file || pr.Line < 0 || pr.Line > lines || pr.Message == "" {
				t.Errorf("problem %+v: want file %s, a line in 0..%d and a message", pr, file, lines)
			}
			if pr.Severity != SeverityError && pr.Severity != SeverityWarning {
				t.Errorf("problem %+v has severity %q", pr, pr.Severity)
			}
		}
		if err != nil {
			wantParseError(t, file, p, err, "")
			if warnings != nil {
				t.Errorf("warnings %q returned with an error", warnings)
			}
			return
		}
		wantInvariants(t, p)
		for _, w := range warnings {
			if !strings.Contains(w, file) {
				t.Errorf("warning %q does not name the file", w)
			}
		}
	})
}

// testdataFiles lists the persona files under testdata.
func testdataFiles(tb testing.TB) []string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.md"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(files) == 0 {
		tb.Fatal("no testdata/*.md files")
	}
	return files
}

// wantInvariants checks what every successfully parsed persona guarantees.
func wantInvariants(t *testing.T, p *engine.Persona) {
	t.Helper()
	if p == nil {
		t.Fatal("nil persona without an error")
	}
	if !gated.ValidTenant(p.Name) {
		t.Errorf("name %q is not valid", p.Name)
	}
	if p.MaxTurns < 1 || p.MaxTurns > MaxTurnsLimit {
		t.Errorf("max_turns %d, want 1..%d", p.MaxTurns, MaxTurnsLimit)
	}
	if p.Prompt == "" {
		t.Error("empty prompt")
	}
	if p.Prompt != strings.TrimSpace(p.Prompt) {
		t.Errorf("prompt %q is not trimmed", p.Prompt)
	}
	if p.Timeout < 0 {
		t.Errorf("negative timeout %v", p.Timeout)
	}
}
