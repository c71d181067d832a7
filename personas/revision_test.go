package personas_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/gated/gated/personas"
)

// TestPersonaRevision: a persona's revision is a digest of its file as
// loaded, the same for the same bytes and different for any edit, and
// every built-in persona has one.
func TestPersonaRevision(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("builtin", "reviewer.md"))
	if err != nil {
		t.Fatal(err)
	}
	parse := func(t *testing.T, src []byte) string {
		t.Helper()
		p, _, err := personas.Parse("reviewer.md", src)
		if err != nil {
			t.Fatal(err)
		}
		return p.Revision
	}
	first := parse(t, src)
	tests := []struct {
		note string
		src  []byte
		same bool
	}{
		{note: "the same bytes", src: bytes.Clone(src), same: true},
		{note: "a body edit", src: append(bytes.Clone(src), "\nReject when unsure.\n"...)},
		{note: "a frontmatter edit", src: bytes.Replace(src, []byte("max_turns: "), []byte("max_turns:  "), 1)},
	}
	if len(first) != 32 {
		t.Fatalf("revision %q, want 32 hex digits", first)
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			if got := parse(t, tc.src); (got == first) != tc.same {
				t.Errorf("revision %q against %q: same %v, want %v", got, first, got == first, tc.same)
			}
		})
	}
	reg, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range reg.Names() {
		if p, _ := reg.Persona(name); p.Revision == "" {
			t.Errorf("built-in persona %s has no revision", name)
		}
	}
	if p, _ := reg.Persona("reviewer"); p.Revision != first {
		t.Errorf("built-in reviewer revision %q, want the digest of its file %q", p.Revision, first)
	}
}
