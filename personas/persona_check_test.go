package personas

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gated/gated/engine"
)

// TestCheckReportsEveryProblemWithItsLine checks that one run finds every
// problem of a file, each on the line an editor would jump to.
func TestCheckReportsEveryProblemWithItsLine(t *testing.T) {
	src := strings.Join([]string{
		"---",              // 1
		"name: Bad",        // 2
		"colour: blue",     // 3
		"max_turns: 99",    // 4
		"model: nope",      // 5
		"tools:",           // 6
		"  - get_proposal", // 7
		`  - "[x"`,         // 8
		"timeout: 1s",      // 9
		"---",              // 10
		"",                 // 11
	}, "\n")
	const file = "team/bad.md"
	p, problems := Check(file, []byte(src))
	if p != nil {
		t.Errorf("persona %#v returned despite errors", p)
	}
	want := []struct {
		line int
		sev  Severity
		frag string
	}{
		{3, SeverityWarning, `unknown frontmatter key "colour"`},
		{2, SeverityError, `name "Bad"`},
		{4, SeverityError, "max_turns 99"},
		{5, SeverityError, `model "nope"`},
		{8, SeverityError, `tools[1] "[x"`},
		{9, SeverityError, "below the 30s minimum"},
		{11, SeverityError, "body"},
	}
	if len(problems) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(problems), len(want), problemLines(problems))
	}
	for i, w := range want {
		got := problems[i]
		if got.File != file || got.Line != w.line || got.Severity != w.sev || !strings.Contains(got.Message, w.frag) {
			t.Errorf("problem %d = %+v, want %s:%d %s mentioning %q", i, got, file, w.line, w.sev, w.frag)
		}
	}
	if s := problems[1].String(); s != file+`:2: name "Bad" must match [a-z0-9_-]{1,64}` {
		t.Errorf("String() = %q", s)
	}
	// Parse reports the same errors, all of them, in one error.
	_, _, err := Parse(file, []byte(src))
	for _, w := range want[1:] {
		if err == nil || !strings.Contains(err.Error(), w.frag) {
			t.Errorf("Parse error %v does not mention %q", err, w.frag)
		}
	}
}

func TestCheckYAMLErrorLines(t *testing.T) {
	tests := []struct {
		note string
		src  string
		line int
		frag string
	}{
		{note: "value of the wrong type", src: "---\nname: x\nmax_turns: many\n---\nBody.\n", line: 3, frag: "cannot unmarshal"},
		{note: "list where a string belongs", src: "---\nname: x\nmodel:\n  - a\n---\nBody.\n", line: 4, frag: "cannot unmarshal"},
		{note: "tab indentation", src: "---\nname: x\ntools:\n\t- a\n---\nBody.\n", line: 4, frag: "frontmatter"},
		{note: "repeated key names the first on its file line", src: "---\nname: x\nname: y\n---\nBody.\n", line: 3, frag: `"name" already defined at line 2`},
		{note: "frontmatter is a list", src: "---\n- name: x\n---\nBody.\n", line: 2, frag: "mapping"},
		{note: "no opening line", src: "name: x\n---\nBody.\n", line: 1, frag: "must start with"},
		{note: "unclosed", src: "---\nname: x\n", line: 1, frag: "not closed"},
		// The YAML parser (not its scanner) counts lines from 0.
		{note: "unclosed flow list", src: "---\nname: x\ntools: [a, b\nmodel: m\n---\nBody.\n", line: 3, frag: "did not find expected ',' or ']'"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			_, problems := Check("f.md", []byte(tc.src))
			if len(problems) == 0 {
				t.Fatal("no problem reported")
			}
			if len(problems) != 1 {
				t.Errorf("want one problem, got:\n%s", problemLines(problems))
			}
			got := problems[0]
			if got.Line != tc.line || !got.IsError() || !strings.Contains(got.Message, tc.frag) {
				t.Errorf("problem %+v, want an error on line %d mentioning %q", got, tc.line, tc.frag)
			}
		})
	}
}

// TestKnownKeysMatchThePersona checks that the keys read from the
// frontmatter struct's tags are exactly the persona's fields (as the
// engine names them in JSON) plus timeout, so that a field added to one
// and not the other fails here instead of being warned about as unknown.
func TestKnownKeysMatchThePersona(t *testing.T) {
	want := map[string]bool{"timeout": true}
	for f := range reflect.TypeFor[engine.Persona]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "-" {
			want[name] = true
		}
	}
	if !reflect.DeepEqual(knownKeys, want) {
		t.Errorf("known keys %v, want %v", slices.Sorted(maps.Keys(knownKeys)), slices.Sorted(maps.Keys(want)))
	}
}

func TestYAMLKeys(t *testing.T) {
	type sample struct {
		Plain    string
		Tagged   string `yaml:"tagged_name"`
		Options  string `yaml:"with_options,omitempty"`
		Skipped  string `yaml:"-"`
		Inline   string `yaml:",omitempty"`
		internal string
	}
	_ = sample{}.internal
	got := yamlKeys(reflect.TypeFor[sample]())
	want := map[string]bool{"plain": true, "tagged_name": true, "with_options": true, "inline": true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func problemLines(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  %s [%s]\n", p, p.Severity)
	}
	return b.String()
}
