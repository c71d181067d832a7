package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command a user sees has an Examples section in its --help, and
// every example names that command or one below it, with flags it has and
// as many arguments as it takes, so the examples cannot drift from the
// commands.
func TestEveryCommandHasExamples(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" || strings.HasPrefix(c.CommandPath(), "gated completion") {
			return
		}
		t.Run(c.CommandPath(), func(t *testing.T) {
			code, out, err := runGated(t, append(strings.Fields(c.CommandPath())[1:], "--help")...)
			if code != 0 {
				t.Fatalf("--help: exit %d (%v)", code, err)
			}
			_, section, ok := strings.Cut(out, "\nExamples:\n")
			if !ok {
				t.Fatalf("--help has no Examples section:\n%s", out)
			}
			section, _, _ = strings.Cut(section, "\n\n")
			for _, line := range strings.Split(section, "\n") {
				checkExample(t, c, line)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(rootCmd())
}

// checkExample fails unless line, an example of command c, runs gated
// with c or a command below it, flags that command has, and arguments it
// takes.
func checkExample(t *testing.T, c *cobra.Command, line string) {
	t.Helper()
	words, err := shellWords(line)
	if err != nil {
		t.Errorf("example %q: %v", line, err)
		return
	}
	start := -1
	for i, w := range words {
		if w == "gated" {
			start = i
			break
		}
	}
	if start < 0 {
		t.Errorf("example %q does not run gated", line)
		return
	}
	args := words[start+1:]
	root := rootCmd()
	found, rest, err := root.Find(args)
	if err != nil {
		t.Errorf("example %q: %v", line, err)
		return
	}
	if !strings.HasPrefix(found.CommandPath()+" ", c.CommandPath()+" ") {
		t.Errorf("example %q of %s runs %s", line, c.CommandPath(), found.CommandPath())
	}
	found.InitDefaultHelpFlag()
	found.InitDefaultVersionFlag()
	if err := found.ParseFlags(rest); err != nil {
		t.Errorf("example %q: %v", line, err)
		return
	}
	if found.Args != nil {
		if err := found.Args(found, found.Flags().Args()); err != nil {
			t.Errorf("example %q: %v", line, err)
		}
	}
}

// shellWords splits an example line as a shell would split a simple
// command line: words apart on blanks, '…' and "…" quoting, a # comment
// after a blank, and nothing after a pipe or a redirection (the rest of
// the pipeline is not gated's), but a pipe before gated starts again.
func shellWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	end := func() {
		if inWord {
			words = append(words, cur.String())
		}
		cur.Reset()
		inWord = false
	}
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; {
		case ch == ' ' || ch == '\t':
			end()
		case ch == '#' && !inWord:
			end()
			return words, nil
		case ch == '|' || ch == '>' || ch == '<' || ch == ';':
			end()
			if ch == '|' && !slices.Contains(words, "gated") {
				words = nil
				continue
			}
			return words, nil
		case ch == '"' || ch == '\'':
			j := strings.IndexByte(line[i+1:], ch)
			if j < 0 {
				return nil, fmt.Errorf("an unterminated %c", ch)
			}
			cur.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		default:
			cur.WriteByte(ch)
			inWord = true
		}
	}
	end()
	return words, nil
}

func TestShellWords(t *testing.T) {
	tests := []struct {
		line string
		want []string
	}{
		{line: "gated a --b c   # comment", want: []string{"gated", "a", "--b", "c"}},
		{line: `gated x --reason "two words" --y 'it''s'`, want: []string{"gated", "x", "--reason", "two words", "--y", "its"}},
		{line: "cat p.json | gated propose -f -", want: []string{"gated", "propose", "-f", "-"}},
		{line: "gated audit verify --json > heads.jsonl", want: []string{"gated", "audit", "verify", "--json"}},
		{line: "gated audit query --json | jq .x", want: []string{"gated", "audit", "query", "--json"}},
		{line: "gated a#b", want: []string{"gated", "a#b"}},
	}
	for _, tc := range tests {
		got, err := shellWords(tc.line)
		if err != nil || strings.Join(got, "\x00") != strings.Join(tc.want, "\x00") {
			t.Errorf("shellWords(%q) = %q, %v; want %q", tc.line, got, err, tc.want)
		}
	}
	if _, err := shellWords(`gated "open`); err == nil {
		t.Error(`shellWords("gated \"open") = nil error, want one`)
	}
}

// gated --version and gated version print one line: the version, the
// revision the build was made from, the Go release that built it and the
// protocols; the Makefile stamps the first two.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, out, err := runGated(t, args...)
		want := "gated dev (revision unknown, " + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ", plugin protocol 1, wire schema v1)\n"
		if code != 0 || out != want {
			t.Errorf("gated %s: exit %d (%v), printed %q; want %q", args[0], code, err, out, want)
		}
	}
	version, revision = "v1.4.0", "0123456789ab-modified"
	defer func() { version, revision = "dev", "" }()
	if got := versionLine(); !strings.HasPrefix(got, "gated v1.4.0 (revision 0123456789ab-modified, "+runtime.Version()+", ") {
		t.Errorf("stamped: %q", got)
	}
}
