package mcpgate

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/strictjson"
)

// Mapping is how the calls of one upstream tool become proposals: what
// the tool's name, annotations and the catalog give together.
type Mapping struct {
	// Tool is the tool's MCP name, as the agent calls it and as it is
	// forwarded.
	Tool string
	// Action is the proposal's action token.
	Action string
	// Class is the class the gate claims for the tool's calls.
	Class gated.Class
	// ClassFrom says where Class came from: "catalog" or "annotations".
	ClassFrom string
	// BlastRadius is the proposal's blast radius.
	BlastRadius gated.BlastRadius
	// Target maps target members to JSON Pointers into the arguments;
	// nil means the target is the whole arguments object.
	Target map[string]string
	// TargetFixed are members added to every target.
	TargetFixed map[string]any
	// ReasonArgument is the argument the reason is read from; it is
	// removed from the arguments before they are forwarded.
	ReasonArgument string
	// Reviewer is the persona asked for, if any.
	Reviewer string
	// Labels are the flow labels the catalog gives the tool, which every
	// proposal of its calls carries.
	Labels []string

	// schema is the tool's input schema, resolved, that Read holds the
	// arguments to; nil checks nothing (a Mapping built outside New).
	schema *jsonschema.Resolved
}

// ClassOf is the class a tool's annotations give: read for readOnlyHint,
// destructive for destructiveHint set true, write otherwise (no
// annotations, or destructiveHint unset or false). MCP's own default for
// an unset destructiveHint is true; gated takes write, which is reviewed
// all the same, and a catalog entry makes a tool destructive.
func ClassOf(a *mcp.ToolAnnotations) gated.Class {
	switch {
	case a == nil:
		return gated.ClassWrite
	case a.ReadOnlyHint:
		return gated.ClassRead
	case a.DestructiveHint != nil && *a.DestructiveHint:
		return gated.ClassDestructive
	}
	return gated.ClassWrite
}

// MappingOf gives the mapping of tool t under catalog c (nil: no
// overrides).
func MappingOf(t *mcp.Tool, c *Catalog) Mapping {
	m := Mapping{
		Tool:           t.Name,
		Action:         ActionName(t.Name),
		Class:          ClassOf(t.Annotations),
		ClassFrom:      "annotations",
		BlastRadius:    gated.BlastSingleDevice,
		ReasonArgument: DefaultReasonArgument,
	}
	if c == nil {
		return m
	}
	if c.BlastRadius != "" {
		m.BlastRadius = c.BlastRadius
	}
	if c.ReasonArgument != "" {
		m.ReasonArgument = c.ReasonArgument
	}
	r, ok := c.Tools[t.Name]
	if !ok {
		return m
	}
	return m.with(r)
}

// with is m overridden by rule r.
func (m Mapping) with(r ToolRule) Mapping {
	if r.Action != "" {
		m.Action = r.Action
	}
	if r.Class != "" {
		m.Class, m.ClassFrom = r.Class, "catalog"
	}
	if r.BlastRadius != "" {
		m.BlastRadius = r.BlastRadius
	}
	if r.ReasonArgument != "" {
		m.ReasonArgument = r.ReasonArgument
	}
	m.Target, m.TargetFixed, m.Reviewer, m.Labels = r.Target, r.TargetFixed, r.Reviewer, r.Labels
	return m
}

// Call is one tool call read through its mapping.
type Call struct {
	// Target is the proposal's target.
	Target map[string]any
	// Reason is the reason argument's value, "" when the call has none.
	Reason string
	// Arguments are the proposal's arguments: every argument of the
	// call but the reason, as read once.
	Arguments map[string]any
	// Forward is what is sent upstream on approval: Arguments encoded as
	// the proposal encodes them, so that the upstream server receives,
	// byte for byte, the arguments gated decided on.
	Forward json.RawMessage
}

// maxArgumentDepth bounds how deeply a call's arguments may nest.
const maxArgumentDepth = 64

// Read reads a call's raw arguments: a JSON object, or nothing. They are
// read once, and refused when an object at any depth names a key twice,
// or names two keys equal under case folding (strings.EqualFold): readers
// disagree on which of such members counts (encoding/json matches names
// without case and keeps the last, a server in another language may keep
// the first), and the upstream could act on a value the reviewer never
// judged. Arguments the tool's input schema does not allow are refused
// too. What is forwarded is Call.Forward, encoded from what was read, and
// the proposal carries the same arguments. Errors wrap ErrBadArguments.
func (m *Mapping) Read(raw json.RawMessage) (Call, error) {
	args := map[string]any{}
	if s := strings.TrimSpace(string(raw)); s != "" && s != "null" {
		v, err := strictjson.ReadValue(raw, strictjson.ValueOptions{MaxDepth: maxArgumentDepth})
		if err != nil {
			return Call{}, fmt.Errorf("%w: %v", ErrBadArguments, err)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return Call{}, fmt.Errorf("%w: the arguments of %s are not a JSON object", ErrBadArguments, m.Tool)
		}
		if err := strictjson.CheckFolded(obj); err != nil {
			return Call{}, fmt.Errorf("%w: the arguments of %s: %v", ErrBadArguments, m.Tool, err)
		}
		args = obj
	}
	var c Call
	if r, ok := args[m.ReasonArgument]; ok {
		s, isString := r.(string)
		if !isString {
			return Call{}, fmt.Errorf("%w: argument %s of %s must be a string, the reason for the call", ErrBadArguments, m.ReasonArgument, m.Tool)
		}
		c.Reason = s
		delete(args, m.ReasonArgument)
	}
	fwd, err := json.Marshal(args)
	if err != nil {
		return Call{}, fmt.Errorf("%w: re-encoding the arguments of %s: %v", ErrBadArguments, m.Tool, err)
	}
	if err := m.allowed(fwd); err != nil {
		return Call{}, err
	}
	c.Arguments, c.Forward = args, fwd
	if m.Target == nil {
		c.Target = args
	} else {
		c.Target = make(map[string]any, len(m.Target)+len(m.TargetFixed))
		// In member order, so that a call missing several arguments is
		// always refused naming the same one.
		for _, member := range slices.Sorted(maps.Keys(m.Target)) {
			ptr := m.Target[member]
			v, err := resolvePointer(args, ptr)
			if err != nil {
				return Call{}, fmt.Errorf("%w: target member %s of %s (%s): %v", ErrBadArguments, member, m.Tool, ptr, err)
			}
			c.Target[member] = v
		}
	}
	if len(m.TargetFixed) > 0 {
		if m.Target == nil {
			// The arguments are the target: a copy, so the fixed
			// members are not forwarded.
			t := make(map[string]any, len(args)+len(m.TargetFixed))
			for k, v := range args {
				t[k] = v
			}
			c.Target = t
		}
		for k, v := range m.TargetFixed {
			c.Target[k] = v
		}
	}
	return c, nil
}

// parsePointer splits a JSON Pointer (RFC 6901) into its unescaped
// tokens. "" is the whole document.
func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("JSON Pointer %q must be empty or begin with /", p)
	}
	parts := strings.Split(p[1:], "/")
	for i, s := range parts {
		for j := 0; j < len(s); j++ {
			if s[j] == '~' && (j+1 == len(s) || (s[j+1] != '0' && s[j+1] != '1')) {
				return nil, fmt.Errorf("JSON Pointer %q: ~ must be followed by 0 or 1", p)
			}
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return parts, nil
}

// errNoArgument is the error of a pointer that names nothing.
var errNoArgument = errors.New("no such argument")

// resolvePointer returns what pointer p names in the arguments.
func resolvePointer(args map[string]any, p string) (any, error) {
	tokens, err := parsePointer(p)
	if err != nil {
		return nil, err
	}
	var cur any = args
	for _, tok := range tokens {
		switch v := cur.(type) {
		case map[string]any:
			next, ok := v[tok]
			if !ok {
				return nil, errNoArgument
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v) || (len(tok) > 1 && tok[0] == '0') || tok[0] == '+' {
				return nil, errNoArgument
			}
			cur = v[i]
		default:
			return nil, errNoArgument
		}
	}
	return cur, nil
}

// resolveSchema resolves an upstream tool's input schema, which Read
// holds every call's arguments to. A schema that cannot be resolved (a
// reference to another document, a malformed keyword) is an error: the
// gate would not know which arguments the tool allows.
func resolveSchema(t *mcp.Tool) (*jsonschema.Resolved, error) {
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("reading the input schema of upstream tool %q: %w", t.Name, err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("upstream tool %q: its input schema is not a JSON Schema: %w", t.Name, err)
	}
	r, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("upstream tool %q: its input schema cannot be used to check calls: %w", t.Name, err)
	}
	return r, nil
}

// allowed holds the arguments to be forwarded, fwd, to the tool's input
// schema. The schema reads numbers as JSON does, so they are read from
// fwd again for it; what is forwarded stays fwd.
func (m *Mapping) allowed(fwd json.RawMessage) error {
	if m.schema == nil {
		return nil
	}
	var v any
	if err := json.Unmarshal(fwd, &v); err != nil {
		return fmt.Errorf("%w: the arguments of %s: %v", ErrBadArguments, m.Tool, err)
	}
	if err := m.schema.Validate(v); err != nil {
		return fmt.Errorf("%w: the arguments of %s do not fit its input schema: %v", ErrBadArguments, m.Tool, err)
	}
	return nil
}
