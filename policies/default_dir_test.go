package policies

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestDefaultBundleAt(t *testing.T) {
	copyOf := func(t *testing.T) string {
		t.Helper()
		dir := t.TempDir()
		for _, name := range []string{"data.json", "flows.rego", "flows_test.rego", "gated.rego", "gated_test.rego", "hard_rules.rego", "hard_rules_test.rego",
			"holds.rego", "holds_test.rego", "operations.rego", "operations_test.rego", "runs.rego", "runs_test.rego"} {
			raw, err := defaultFS.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), raw, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	write := func(t *testing.T, dir, name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	all := []string{"flows.rego", "flows_test.rego", "gated.rego", "gated_test.rego", "hard_rules.rego", "hard_rules_test.rego",
		"holds.rego", "holds_test.rego", "operations.rego", "operations_test.rego", "runs.rego", "runs_test.rego"}
	tests := []struct {
		note    string
		dir     func(t *testing.T) string
		same    bool
		overlap []string
	}{
		{note: "the bundle's source directory", dir: func(*testing.T) string { return "." }, same: true, overlap: all},
		{note: "an exact copy", dir: copyOf, same: true, overlap: all},
		{note: "a copy with a dot file and a README", same: true, overlap: all, dir: func(t *testing.T) string {
			dir := copyOf(t)
			write(t, dir, ".hidden.rego", "package x")
			write(t, dir, "README.md", "notes")
			return dir
		}},
		{note: "an edited module", overlap: all, dir: func(t *testing.T) string {
			dir := copyOf(t)
			write(t, dir, "runs.rego", "package gated\n")
			return dir
		}},
		{note: "a module missing", overlap: slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s == "runs_test.rego" }),
			dir: func(t *testing.T) string {
				dir := copyOf(t)
				if err := os.Remove(filepath.Join(dir, "runs_test.rego")); err != nil {
					t.Fatal(err)
				}
				return dir
			}},
		{note: "one policy file more", overlap: all, dir: func(t *testing.T) string {
			dir := copyOf(t)
			write(t, dir, "mine.rego", "package gated\n")
			return dir
		}},
		{note: "a copy with more data below", same: true, overlap: all, dir: func(t *testing.T) string {
			dir := copyOf(t)
			write(t, dir, "testdata/cases.json", `{"a": 1}`)
			return dir
		}},
		{note: "a copy with a module below", overlap: all, dir: func(t *testing.T) string {
			dir := copyOf(t)
			write(t, dir, "more/mine.rego", "package gated\n")
			return dir
		}},
		{note: "a copy with its data edited", overlap: all, dir: func(t *testing.T) string {
			dir := copyOf(t)
			write(t, dir, "data.json", `{}`)
			return dir
		}},
		{note: "a copy one level down", dir: func(t *testing.T) string {
			dir := t.TempDir()
			src := copyOf(t)
			if err := os.Rename(src, filepath.Join(dir, "sub")); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
		{note: "a user directory", overlap: []string{"gated.rego"}, dir: func(t *testing.T) string {
			dir := t.TempDir()
			write(t, dir, "gated.rego", "package gated\n")
			write(t, dir, "data.yaml", "gated: {}\n")
			return dir
		}},
		{note: "no directory", dir: func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			same, overlap := DefaultBundleAt(tc.dir(t))
			if same != tc.same || !slices.Equal(overlap, tc.overlap) {
				t.Errorf("DefaultBundleAt = %v, %v; want %v, %v", same, overlap, tc.same, tc.overlap)
			}
		})
	}
}
