package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// readmeServeFlags reads the README's table of `gated serve` flags: for
// each flag its first column names, the first backticked value of its
// default column ("" when the column has none).
func readmeServeFlags(t *testing.T) map[string]string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "`gated serve`:\n")
	if start < 0 {
		t.Fatal("the README has no \"`gated serve`:\" flags table")
	}
	flagName := regexp.MustCompile("`(--[a-z0-9-]+)`")
	value := regexp.MustCompile("`([^`]*)`")
	flags := map[string]string{}
	inTable := false
	for _, line := range strings.Split(text[start:], "\n")[1:] {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 3 || strings.HasPrefix(cells[0], "---") || strings.TrimSpace(cells[0]) == "flag" {
			continue
		}
		def := ""
		if m := value.FindStringSubmatch(cells[1]); m != nil {
			def = m[1]
		}
		for _, m := range flagName.FindAllStringSubmatch(cells[0], -1) {
			if _, dup := flags[m[1]]; dup {
				t.Errorf("the README's serve flags table lists %s twice", m[1])
			}
			flags[m[1]] = def
		}
	}
	if len(flags) == 0 {
		t.Fatal("the README's serve flags table has no rows")
	}
	return flags
}

// TestReadmeServeFlags checks the README's flags table against gated
// serve's flags: every flag is listed, no listed flag is gone, and a
// listed default is the flag's default.
func TestReadmeServeFlags(t *testing.T) {
	readme := readmeServeFlags(t)
	cmd := serveCmd()
	var have []string
	cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		name := "--" + f.Name
		have = append(have, name)
		t.Run(name, func(t *testing.T) {
			def, ok := readme[name]
			if !ok {
				t.Fatalf("the README's serve flags table lacks %s (%s)", name, f.Usage)
			}
			if f.DefValue == "" || f.DefValue == "[]" {
				return // the README describes what an empty default means
			}
			if f.Value.Type() == "duration" {
				want, _ := time.ParseDuration(f.DefValue)
				if got, err := time.ParseDuration(def); err != nil || got != want {
					t.Errorf("the README gives %s the default %q; it is %s", name, def, f.DefValue)
				}
				return
			}
			if def != f.DefValue {
				t.Errorf("the README gives %s the default %q; it is %q", name, def, f.DefValue)
			}
		})
	})
	for name := range readme {
		if !slices.Contains(have, name) {
			t.Errorf("the README's serve flags table lists %s, which gated serve does not have", name)
		}
	}
}
