package yamlpos

import (
	"errors"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		note string
		in   string
		kind yaml.Kind // of the root, when there is no error
		line int       // of the error
		msg  string
		is   error
	}{
		{note: "mapping", in: "a: 1\n", kind: yaml.MappingNode},
		{note: "list", in: "- a\n", kind: yaml.SequenceNode},
		{note: "alias root", in: "&x [1]\n", kind: yaml.SequenceNode},
		{note: "empty", in: "", is: ErrEmpty},
		{note: "comments only", in: "# nothing\n", is: ErrEmpty},
		{note: "two documents", in: "a: 1\n---\nb: 2\n", line: 2, msg: "holds more than one YAML document", is: ErrMoreThanOneDocument},
		{note: "scanner error", in: "a: 1\n b: 2\nc: 3\n", line: 2, msg: "mapping values are not allowed in this context"},
		{note: "scanner error at the end", in: "a: 1\nb: \"x\n", line: 2, msg: "found unexpected end of stream"},
		{note: "parser error on line 2", in: "a: 1\nb: [1, 2\nc: 3\n", line: 2, msg: "did not find expected ',' or ']'"},
		{note: "parser error on line 1", in: "a: [1, }", line: 1, msg: "did not find expected node content"},
		{note: "parser error in a list", in: "a:\n  - x\n  y: 2\n", line: 2, msg: "did not find expected '-' indicator"},
		{note: "parser error in the second document", in: "a: 1\n---\nb: [1\n", line: 3, msg: "did not find expected ',' or ']'"},
		{note: "end of input without a newline is on the last line", in: "a: 1\nb: [", line: 2, msg: "did not find expected node content"},
		{note: "end of input after a newline is on the line after", in: "a: 1\nb: [\n", line: 3, msg: "did not find expected node content"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			root, err := Parse([]byte(tc.in))
			if tc.msg == "" && tc.is == nil {
				if err != nil || root.Kind != tc.kind {
					t.Fatalf("Parse = %v, %v; want a root of kind %v", root, err, tc.kind)
				}
				return
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("Parse error %v, want %v", err, tc.is)
			}
			if tc.msg != "" {
				e, ok := errors.AsType[*Error](err)
				if !ok || e.Line != tc.line || e.Msg != tc.msg {
					t.Fatalf("Parse error %#v, want line %d: %s", err, tc.line, tc.msg)
				}
			}
		})
	}
}

func TestErrorsOfATypeError(t *testing.T) {
	var v struct {
		A int `yaml:"a"`
		B int `yaml:"b"`
	}
	err := yaml.Unmarshal([]byte("a: x\nb: y\n"), &v)
	got := Errors([]byte("a: x\nb: y\n"), err)
	if len(got) != 2 || got[0].Line != 1 || got[1].Line != 2 || got[0].Error() != "line 1: cannot unmarshal !!str `x` into int" {
		t.Fatalf("Errors = %v, want one per line", got)
	}
}

func TestIsNull(t *testing.T) {
	for _, tc := range []struct {
		note string
		in   string
		want bool
	}{
		{note: "tilde", in: "a: ~", want: true},
		{note: "null", in: "a: null", want: true},
		{note: "nothing", in: "a:", want: true},
		{note: "quoted null", in: `a: "null"`},
		{note: "empty list", in: "a: []"},
		{note: "alias of null", in: "x: &n ~\na: *n", want: true},
	} {
		t.Run(tc.note, func(t *testing.T) {
			root, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			v := root.Content[len(root.Content)-1]
			if got := IsNull(Deref(v)); got != tc.want {
				t.Fatalf("IsNull(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzParse checks that Parse never panics, agrees with yaml.v3 on what is
// valid, and puts every error on a line of the input.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"a: 1\n", "", "a: 1\n---\nb: 2\n", "a: [1, }", "a: 1\nb: [1, 2\nc: 3\n", "a:\n  - x\n  y: 2\n", "\t- a\n", "*x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		root, err := Parse(data)
		if err == nil {
			if root == nil {
				t.Fatal("Parse returned no root and no error")
			}
			var n yaml.Node
			if uerr := yaml.Unmarshal(data, &n); uerr != nil {
				t.Fatalf("Parse accepted %q; yaml.Unmarshal says %v", data, uerr)
			}
			return
		}
		if e, ok := errors.AsType[*Error](err); ok {
			if lines := lineCount(data); e.Line < 0 || e.Line > lines {
				t.Fatalf("Parse(%q) error at line %d of %d: %v", data, e.Line, lines, err)
			}
		} else if !errors.Is(err, ErrEmpty) {
			t.Fatalf("Parse(%q) error %v is neither *Error nor ErrEmpty", data, err)
		}
	})
}
