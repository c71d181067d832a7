package mcpgate

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/yamlpos"
)

// DefaultReasonArgument is the argument a call's reason is read from when
// the catalog names no other: the agent's model may pass _reason with any
// tool call, and the gate strips it before forwarding.
const DefaultReasonArgument = "_reason"

// MaxCatalogSize is the largest catalog file DecodeCatalog reads.
const MaxCatalogSize = 1 << 20

// Catalog is the operator's local description of an upstream server's
// tools: per-tool overrides of what the tool's name, annotations and
// arguments would otherwise give (docs/MCP.md, "The mapping"). It is read
// from YAML or JSON with DecodeCatalog.
type Catalog struct {
	// ReasonArgument is the argument that carries a call's reason, for
	// every tool without its own. Default DefaultReasonArgument.
	ReasonArgument string `yaml:"reason_argument" json:"reason_argument,omitempty"`
	// BlastRadius is the proposal's blast radius for every tool without
	// its own: single_device (default), cluster or tenant_wide.
	BlastRadius gated.BlastRadius `yaml:"blast_radius" json:"blast_radius,omitempty"`
	// Tools holds the overrides of each tool, by its MCP name.
	Tools map[string]ToolRule `yaml:"tools" json:"tools,omitempty"`
	// Prompts holds the overrides of the gets of each prompt, by its
	// name (default: action get_prompt, class read, the prompt's name and
	// arguments as the target).
	Prompts map[string]ToolRule `yaml:"prompts" json:"prompts,omitempty"`
	// Resources holds the overrides of the reads of each resource, by
	// its URI (default: action read_resource, class read, the URI as the
	// target).
	Resources map[string]ToolRule `yaml:"resources" json:"resources,omitempty"`
}

// ToolRule overrides the mapping of one tool. Every field is optional.
type ToolRule struct {
	// Action is the proposal's action token, [A-Za-z0-9_-]{1,128}, in
	// place of the one derived from the tool's name (ActionName).
	Action string `yaml:"action" json:"action,omitempty"`
	// Class is read, write or destructive, in place of the one the tool's
	// annotations give. The policy's own tool catalog still decides
	// whether a read claim is believed.
	Class gated.Class `yaml:"class" json:"class,omitempty"`
	// BlastRadius overrides the catalog's BlastRadius for this tool.
	BlastRadius gated.BlastRadius `yaml:"blast_radius" json:"blast_radius,omitempty"`
	// Target maps a member of the proposal's target to a JSON Pointer
	// (RFC 6901) into the call's arguments, e.g. {"host": "/host"}. A
	// pointer that names no argument refuses the call. Default: the
	// target is the whole arguments object.
	Target map[string]string `yaml:"target" json:"target,omitempty"`
	// TargetFixed are members added to every call's target, e.g.
	// {"tags": ["production"]}; a member of Target with the same name
	// is refused when the catalog is read.
	TargetFixed map[string]any `yaml:"target_fixed" json:"target_fixed,omitempty"`
	// ReasonArgument overrides the catalog's ReasonArgument for this
	// tool.
	ReasonArgument string `yaml:"reason_argument" json:"reason_argument,omitempty"`
	// Reviewer asks for a persona for this tool's proposals; the policy's
	// routes outrank it.
	Reviewer string `yaml:"reviewer" json:"reviewer,omitempty"`
	// Labels are the flow labels every proposal of this tool carries
	// (docs/POLICIES.md#flows): what it reads (private, secret, pii),
	// untrusted for untrusted output, egress for a call that communicates
	// outside. At most gated.MaxLabels, each [a-z0-9_-]{1,64}.
	Labels []string `yaml:"labels" json:"labels,omitempty"`
}

// DecodeCatalog reads a catalog from YAML or JSON (JSON is read as YAML),
// refusing unknown fields, duplicate keys, a bad class, action, blast
// radius, target pointer or reviewer, and input over MaxCatalogSize.
// Errors wrap ErrInvalidCatalog and name what is wrong.
func DecodeCatalog(data []byte) (*Catalog, error) {
	if len(data) > MaxCatalogSize {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidCatalog, len(data), MaxCatalogSize)
	}
	// yamlpos words syntax errors, and a second document, at a line.
	if _, err := yamlpos.Parse(data); err != nil {
		if errors.Is(err, yamlpos.ErrEmpty) {
			return &Catalog{}, nil
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidCatalog, err)
	}
	c := &Catalog{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCatalog, err)
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Catalog) check() error {
	if c.ReasonArgument != "" && !validArgumentName(c.ReasonArgument) {
		return fmt.Errorf("%w: reason_argument %q must be a non-blank name of at most 128 bytes", ErrInvalidCatalog, c.ReasonArgument)
	}
	if c.BlastRadius != "" && !validBlast(c.BlastRadius) {
		return fmt.Errorf("%w: blast_radius %q: want single_device, cluster or tenant_wide", ErrInvalidCatalog, c.BlastRadius)
	}
	for _, section := range []struct {
		name  string
		rules map[string]ToolRule
	}{{"tools", c.Tools}, {"prompts", c.Prompts}, {"resources", c.Resources}} {
		if err := checkRules(section.name, section.rules); err != nil {
			return err
		}
	}
	return nil
}

// checkRules checks the rules of one section of the catalog.
func checkRules(section string, rules map[string]ToolRule) error {
	names := make([]string, 0, len(rules))
	for name := range rules {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		r := rules[name]
		where := fmt.Sprintf("%s[%q]", section, name)
		switch {
		case strings.TrimSpace(name) == "":
			return fmt.Errorf("%w: %s: an entry with a blank name", ErrInvalidCatalog, section)
		case r.Action != "" && !gated.ValidAction(r.Action):
			return fmt.Errorf("%w: %s.action %q must match [A-Za-z0-9_-]{1,128}", ErrInvalidCatalog, where, r.Action)
		case r.Class != "" && r.Class != gated.ClassRead && r.Class != gated.ClassWrite && r.Class != gated.ClassDestructive:
			return fmt.Errorf("%w: %s.class %q: want read, write or destructive", ErrInvalidCatalog, where, r.Class)
		case r.BlastRadius != "" && !validBlast(r.BlastRadius):
			return fmt.Errorf("%w: %s.blast_radius %q: want single_device, cluster or tenant_wide", ErrInvalidCatalog, where, r.BlastRadius)
		case r.ReasonArgument != "" && !validArgumentName(r.ReasonArgument):
			return fmt.Errorf("%w: %s.reason_argument %q must be a non-blank name of at most 128 bytes", ErrInvalidCatalog, where, r.ReasonArgument)
		case r.Reviewer != "" && !gated.ValidTenant(r.Reviewer):
			return fmt.Errorf("%w: %s.reviewer %q must be a persona name matching [a-z0-9_-]{1,64}", ErrInvalidCatalog, where, r.Reviewer)
		case len(r.Labels) > gated.MaxLabels:
			return fmt.Errorf("%w: %s.labels: %d labels, more than %d", ErrInvalidCatalog, where, len(r.Labels), gated.MaxLabels)
		}
		for i, l := range r.Labels {
			if !gated.ValidLabel(l) {
				return fmt.Errorf("%w: %s.labels[%d] %q must match [a-z0-9_-]{1,64}", ErrInvalidCatalog, where, i, l)
			}
		}
		for member, ptr := range r.Target {
			if strings.TrimSpace(member) == "" {
				return fmt.Errorf("%w: %s.target has a blank member name", ErrInvalidCatalog, where)
			}
			if _, err := parsePointer(ptr); err != nil {
				return fmt.Errorf("%w: %s.target[%q]: %v", ErrInvalidCatalog, where, member, err)
			}
			if _, dup := r.TargetFixed[member]; dup {
				return fmt.Errorf("%w: %s: member %q is both in target and in target_fixed", ErrInvalidCatalog, where, member)
			}
		}
		if r.TargetFixed != nil {
			// YAML may give maps with keys that are not strings; the
			// proposal is JSON, so the fixed members must be too.
			raw, err := json.Marshal(r.TargetFixed)
			if err != nil {
				return fmt.Errorf("%w: %s.target_fixed is not a JSON object: %v", ErrInvalidCatalog, where, err)
			}
			var fixed map[string]any
			if err := json.Unmarshal(raw, &fixed); err != nil {
				return fmt.Errorf("%w: %s.target_fixed: %v", ErrInvalidCatalog, where, err)
			}
			r.TargetFixed = fixed
			rules[name] = r
		}
	}
	return nil
}

func validBlast(b gated.BlastRadius) bool {
	return b == gated.BlastSingleDevice || b == gated.BlastCluster || b == gated.BlastTenantWide
}

func validArgumentName(s string) bool {
	return strings.TrimSpace(s) != "" && len(s) <= 128
}

// maxActionLen is the longest action token: [A-Za-z0-9_-]{1,128}.
const maxActionLen = 128

// ActionName maps an MCP tool name onto the action token rules: every
// byte outside [A-Za-z0-9_-] becomes "_", and a name longer than 128
// bytes keeps its first 119 and ends in "-" and 8 hex digits of its
// SHA-256, so that long names that share a prefix stay apart. Distinct
// names can still map onto one action (a.b and a_b); New refuses that.
func ActionName(tool string) string {
	b := []byte(tool)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	if len(b) > maxActionLen {
		sum := sha256.Sum256([]byte(tool))
		b = append(b[:maxActionLen-9], '-')
		b = append(b, hex.EncodeToString(sum[:4])...)
	}
	return string(b)
}
