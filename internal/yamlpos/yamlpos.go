// Package yamlpos reads the YAML files gated takes from people (the config
// file, the operators file, policy data and persona frontmatter) into
// yaml.Nodes, and words every YAML error at a 1-based line of the input,
// so each of those files reports a mistake on the line an editor shows.
package yamlpos

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// ErrEmpty is returned by Parse for input that holds no YAML document:
// nothing, white space or comments only.
var ErrEmpty = errors.New("holds no YAML document")

// ErrMoreThanOneDocument is wrapped by the *Error Parse returns when the
// input holds a second document; its Line is where that one starts.
var ErrMoreThanOneDocument = errors.New("holds more than one YAML document")

// Error is a YAML problem at a 1-based line of the input. Line is 0 when
// the YAML library gives no line.
type Error struct {
	Line int
	Msg  string
	Err  error // the sentinel this error wraps, if any
}

// Error reports the problem as "line N: msg", or msg without a line.
func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

// Unwrap returns the sentinel e wraps, if any.
func (e *Error) Unwrap() error { return e.Err }

// Parse decodes data, which must hold exactly one YAML document, and
// returns its root node with aliases followed: for a document, its only
// content node. Errors are ErrEmpty, or an *Error at the offending line
// (wrapping ErrMoreThanOneDocument for a second document).
func Parse(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, ErrEmpty
		}
		return nil, Errors(data, err)[0]
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, &Error{Line: extra.Line, Msg: ErrMoreThanOneDocument.Error(), Err: ErrMoreThanOneDocument}
	case !errors.Is(err, io.EOF):
		return nil, Errors(data, err)[0]
	}
	root := Deref(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = Deref(root.Content[0])
	}
	return root, nil
}

// yamlLine splits yaml.v3's "yaml: line N: msg" (the line and the prefix
// are each optional).
var yamlLine = regexp.MustCompile(`(?s)^(?:yaml: )?(?:line (\d+): )?(.*)$`)

// parserProblems are the problems yaml.v3's parser (as opposed to its
// scanner) reports. For these it gives the 0-based line of the construct
// it was parsing, and leaves the line out when that is 0; scanner errors
// and decoding errors get 1-based lines.
var parserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"found undefined tag handle":             true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found duplicate %TAG directive":         true,
}

// Errors turns an error of yaml.v3 reading data into one *Error per
// problem it reports (a *yaml.TypeError may hold several), each at its
// 1-based line. A problem at the end of input that lacks a final newline,
// which yaml.v3 places on the line after, is put on the last line. It
// returns at least one.
func Errors(data []byte, err error) []*Error {
	msgs := []string{err.Error()}
	if typ, ok := errors.AsType[*yaml.TypeError](err); ok && len(typ.Errors) > 0 {
		msgs = typ.Errors
	}
	out := make([]*Error, 0, len(msgs))
	for _, msg := range msgs {
		m := yamlLine.FindStringSubmatch(msg) // always matches
		line, _ := strconv.Atoi(m[1])         // 0 when absent
		if parserProblems[m[2]] {
			line++
		}
		line = min(line, lineCount(data))
		out = append(out, &Error{Line: line, Msg: m[2]})
	}
	return out
}

// lineCount is the number of lines of data a cursor can be on: after a
// final newline, the empty line that follows counts, as it does in editors.
func lineCount(data []byte) int {
	return bytes.Count(data, []byte("\n")) + 1
}

// Deref follows aliases from n to the node they name.
func Deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// IsNull reports whether n is absent or a YAML null (~, null, or nothing).
func IsNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}
