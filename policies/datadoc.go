package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gated/gated/internal/strictjson"
	"github.com/gated/gated/internal/yamlpos"
	"github.com/open-policy-agent/opa/v1/ast"
	"go.yaml.in/yaml/v3"
)

// maxDataDepth is how deeply a data document may nest objects and arrays.
const maxDataDepth = 1000

// maxAliasNodes and maxAliasText cap how many nodes, and how many bytes of
// scalar text, YAML aliases may expand to, against "billion laughs"
// documents.
const (
	maxAliasNodes = 100_000
	maxAliasText  = maxFileSize
)

var errEmpty = &fileError{msg: "is empty"}

// parseDataJSON parses a JSON data document. Numbers stay json.Number;
// duplicate keys, trailing data and empty input are errors, positioned at
// line and column.
func parseDataJSON(raw []byte) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errEmpty
	}
	v, err := strictjson.ReadValue(raw, strictjson.ValueOptions{MaxDepth: maxDataDepth, Number: regoNumber})
	if err == nil {
		return v, nil
	}
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return nil, errorAt(raw, se.Offset-1, "%s", se.Error())
	}
	ve, ok := errors.AsType[*strictjson.ValueError](err)
	switch {
	case !ok:
		return nil, &fileError{msg: err.Error()}
	case errors.Is(err, strictjson.ErrDuplicateKey):
		line, _ := strictjson.Position(raw, ve.First)
		return nil, errorAt(raw, ve.Offset, "duplicate key %q (first at line %d)", ve.Key, line)
	case errors.Is(err, strictjson.ErrTooDeep):
		return nil, errorAt(raw, ve.Offset, "nested deeper than %d levels", maxDataDepth)
	}
	return nil, errorAt(raw, ve.Offset, "%s", ve.Err)
}

// regoNumber refuses a number Rego cannot hold: Rego refuses exponents
// beyond about ±10^30000, which JSON allows.
func regoNumber(n json.Number) error {
	if _, err := ast.NumberChecked(string(n)); err != nil {
		return errors.New("number too large or too small for Rego")
	}
	return nil
}

// errorAt is an error at byte offset off of raw.
func errorAt(raw []byte, off int64, format string, args ...any) *fileError {
	line, col := strictjson.Position(raw, off)
	return &fileError{line: line, col: col, msg: fmt.Sprintf(format, args...)}
}

// parseDataYAML parses a single-document YAML data document into the values
// JSON has: objects with string keys, arrays, strings, booleans, null and
// json.Number. Timestamps stay the strings they were written as; aliases
// are expanded. Errors are positioned at a line.
func parseDataYAML(raw []byte) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errEmpty
	}
	root, err := yamlpos.Parse(raw)
	if errors.Is(err, yamlpos.ErrEmpty) {
		return nil, errEmpty // comments only
	}
	if e, ok := errors.AsType[*yamlpos.Error](err); ok {
		return nil, &fileError{line: e.Line, msg: e.Msg}
	}
	if err != nil {
		return nil, &fileError{msg: err.Error()}
	}
	c := &yamlConverter{active: map[*yaml.Node]bool{}}
	return c.value(root, 0, false)
}

// yamlConverter turns yaml.Nodes into data values.
type yamlConverter struct {
	expanded     int                 // nodes converted through aliases
	expandedText int                 // bytes of scalars converted through aliases
	active       map[*yaml.Node]bool // anchored nodes being converted
}

// value converts n, inside depth mappings and sequences; aliased says
// whether n is reached through an alias.
func (c *yamlConverter) value(n *yaml.Node, depth int, aliased bool) (any, error) {
	if (n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode) && depth >= maxDataDepth {
		return nil, &fileError{line: n.Line, msg: fmt.Sprintf("nested deeper than %d levels", maxDataDepth)}
	}
	if aliased {
		if err := c.expand(n); err != nil {
			return nil, err
		}
	}
	if n.Anchor != "" {
		c.active[n] = true
		defer delete(c.active, n)
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil || c.active[n.Alias] {
			return nil, &fileError{line: n.Line, msg: fmt.Sprintf("alias *%s refers to a value that contains it", n.Value)}
		}
		return c.value(n.Alias, depth, true)
	case yaml.ScalarNode:
		return scalar(n)
	case yaml.MappingNode:
		if tag := n.ShortTag(); tag != "!!map" {
			return nil, unsupportedTag(n, tag)
		}
		return c.mapping(n, depth, aliased)
	case yaml.SequenceNode:
		if tag := n.ShortTag(); tag != "!!seq" {
			return nil, unsupportedTag(n, tag)
		}
		arr := make([]any, 0, len(n.Content))
		for _, item := range n.Content {
			v, err := c.value(item, depth+1, aliased)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		return arr, nil
	}
	return nil, &fileError{line: n.Line, msg: "unexpected YAML node"}
}

// expand counts n, reached through an alias, against the alias limits.
func (c *yamlConverter) expand(n *yaml.Node) error {
	c.expanded++
	if n.Kind == yaml.ScalarNode {
		c.expandedText += len(n.Value)
	}
	switch {
	case c.expanded > maxAliasNodes:
		return &fileError{line: n.Line, msg: fmt.Sprintf("aliases expand to more than %d values", maxAliasNodes)}
	case c.expandedText > maxAliasText:
		return &fileError{line: n.Line, msg: fmt.Sprintf("aliases expand to more than %d MiB of text", maxAliasText>>20)}
	}
	return nil
}

// mapping converts a mapping. Merge keys ("<<: *base") add the keys the
// mapping does not set itself, the first merged mapping winning, as
// yaml.v3 does.
func (c *yamlConverter) mapping(n *yaml.Node, depth int, aliased bool) (any, error) {
	obj := make(map[string]any, len(n.Content)/2)
	lines := make(map[string]int, len(n.Content)/2)
	var merge *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		key, err := c.key(kn)
		if err != nil {
			return nil, err
		}
		if first, dup := lines[key]; dup {
			return nil, &fileError{line: kn.Line, msg: fmt.Sprintf("duplicate key %q (first at line %d)", key, first)}
		}
		lines[key] = kn.Line
		if kn.ShortTag() == "!!merge" {
			merge = vn
			continue
		}
		if obj[key], err = c.value(vn, depth+1, aliased); err != nil {
			return nil, err
		}
	}
	if merge == nil {
		return obj, nil
	}
	return obj, c.merge(obj, merge, depth, aliased)
}

// merge adds the keys of the mapping or mappings of a merge key's value
// that obj does not have yet.
func (c *yamlConverter) merge(obj map[string]any, n *yaml.Node, depth int, aliased bool) error {
	sources := []*yaml.Node{n}
	if n.Kind == yaml.SequenceNode {
		sources = n.Content
	}
	for _, src := range sources {
		v, err := c.value(src, depth, aliased)
		if err != nil {
			return err
		}
		m, ok := v.(map[string]any)
		if !ok {
			return &fileError{line: src.Line, msg: "a merge key (<<) needs a mapping or a sequence of mappings"}
		}
		for k, v := range m {
			if _, set := obj[k]; !set {
				obj[k] = v
			}
		}
	}
	return nil
}

// key reads a mapping key, which must be a string. A timestamp key stays
// the string it was written as, as timestamp values do.
func (c *yamlConverter) key(n *yaml.Node) (string, error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!str", "!!timestamp", "!!merge":
			return n.Value, nil
		}
		return "", &fileError{line: n.Line, msg: fmt.Sprintf("key %s is not a string: quote it", n.Value)}
	}
	return "", &fileError{line: n.Line, msg: "a key must be a string, not a mapping or sequence"}
}

// scalar converts a scalar by its resolved tag, using yaml.v3's own
// reading of numbers and booleans.
func scalar(n *yaml.Node) (any, error) {
	switch tag := n.ShortTag(); tag {
	case "!!str", "!!timestamp":
		return n.Value, nil
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, &fileError{line: n.Line, msg: strings.TrimPrefix(err.Error(), "yaml: ")}
		}
		return b, nil
	case "!!int", "!!float":
		return number(n)
	default:
		return nil, unsupportedTag(n, tag)
	}
}

// number converts an !!int or !!float scalar to a json.Number.
func number(n *yaml.Node) (any, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, &fileError{line: n.Line, msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	switch v := v.(type) {
	case int:
		return json.Number(strconv.Itoa(v)), nil
	case int64:
		return json.Number(strconv.FormatInt(v, 10)), nil
	case uint64:
		return json.Number(strconv.FormatUint(v, 10)), nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, &fileError{line: n.Line, msg: fmt.Sprintf("%s is not a finite number", n.Value)}
		}
		b, err := json.Marshal(v)
		return json.Number(b), err
	}
	return nil, &fileError{line: n.Line, msg: fmt.Sprintf("cannot read %q as a number", n.Value)}
}

func unsupportedTag(n *yaml.Node, tag string) error {
	return &fileError{line: n.Line, msg: fmt.Sprintf("unsupported YAML tag %s", tag)}
}
