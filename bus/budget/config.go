package budget

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/yamlpos"
)

// LoadConfig reads and checks the budgets file at path.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return ParseConfig(path, data)
}

// ParseConfig decodes a budgets file; name is what errors call it. Every
// error wraps ErrInvalidConfig and names the file and line. The file is
//
//	defaults:                # every tenant; each key optional
//	  tenant: {proposals: 600/1m, reads: 6000/1m, tokens: 5000000/1h, reviews_in_flight: 128, holds_pending: 500}
//	  agent:  {proposals: 60/1m, ...}
//	tenants:
//	  acme:
//	    tenant: {...}
//	    agent: {...}         # each agent of acme
//	    agents:
//	      deploy-bot: {...}  # this agent's own overrides
//
// A limit is a whole number of at least 1 (a rate: COUNT/INTERVAL, with
// an interval from 1s to 24h), or unlimited.
func ParseConfig(name string, data []byte) (*Config, error) {
	p := parser{name: name}
	cfg := &Config{Path: name, tenants: map[string]tenantConfig{}}
	root, err := yamlpos.Parse(data)
	if errors.Is(err, yamlpos.ErrEmpty) {
		return cfg, nil // the built-in defaults
	}
	if e, ok := errors.AsType[*yamlpos.Error](err); ok {
		if errors.Is(e, yamlpos.ErrMoreThanOneDocument) {
			return nil, p.fail(e.Line, "a budgets file holds one YAML document")
		}
		return nil, p.fail(e.Line, "%s", e.Msg)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidConfig, name, err)
	}
	if yamlpos.IsNull(root) {
		return cfg, nil
	}
	err = p.mapping(root, "", func(k, v *yaml.Node) error {
		switch k.Value {
		case "defaults":
			t, err := p.tenant(v, "defaults", false)
			cfg.defaults = t
			return err
		case "tenants":
			return p.mapping(v, "tenants", func(tk, tv *yaml.Node) error {
				if !gated.ValidTenant(tk.Value) {
					return p.fail(tk.Line, "tenants.%s: not a tenant token ([a-z0-9_-]{1,64})", clip(tk.Value))
				}
				t, err := p.tenant(tv, "tenants."+tk.Value, true)
				cfg.tenants[tk.Value] = t
				return err
			})
		}
		return p.fail(k.Line, "%s: unknown key; a budgets file has defaults and tenants", clip(k.Value))
	})
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

type parser struct{ name string }

func (p parser) fail(line int, format string, args ...any) error {
	return fmt.Errorf("%w: %s:%d: %s", ErrInvalidConfig, p.name, line, fmt.Sprintf(format, args...))
}

// mapping calls fn on each key and value of n, a mapping, refusing keys
// given twice and keys that are not plain names.
func (p parser) mapping(n *yaml.Node, at string, fn func(k, v *yaml.Node) error) error {
	n = yamlpos.Deref(n)
	if n.Kind != yaml.MappingNode {
		where := at
		if where == "" {
			where = "the file"
		}
		return p.fail(n.Line, "%s: want a mapping", where)
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], yamlpos.Deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			return p.fail(k.Line, "%s: a key must be a plain name", at)
		}
		if line, dup := seen[k.Value]; dup {
			return p.fail(k.Line, "%s: already set at line %d", join(at, clip(k.Value)), line)
		}
		seen[k.Value] = k.Line
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// tenant reads a tenant section (or the defaults): tenant, agent and,
// when agents is true, agents.
func (p parser) tenant(n *yaml.Node, at string, agents bool) (tenantConfig, error) {
	var t tenantConfig
	err := p.mapping(n, at, func(k, v *yaml.Node) error {
		var err error
		switch k.Value {
		case "tenant":
			t.tenant, err = p.limits(v, at+".tenant")
			return err
		case "agent":
			t.agent, err = p.limits(v, at+".agent")
			return err
		case "agents":
			if !agents {
				break
			}
			t.agents = map[string]partial{}
			return p.mapping(v, at+".agents", func(ak, av *yaml.Node) error {
				l, err := p.limits(av, at+".agents."+clip(ak.Value))
				t.agents[ak.Value] = l
				return err
			})
		}
		keys := "tenant and agent"
		if agents {
			keys = "tenant, agent and agents"
		}
		return p.fail(k.Line, "%s: unknown key; a section has %s", join(at, clip(k.Value)), keys)
	})
	return t, err
}

// limits reads one scope's limits.
func (p parser) limits(n *yaml.Node, at string) (partial, error) {
	var l partial
	err := p.mapping(n, at, func(k, v *yaml.Node) error {
		key := join(at, clip(k.Value))
		if v.Kind != yaml.ScalarNode || yamlpos.IsNull(v) {
			return p.fail(v.Line, "%s: want a single value", key)
		}
		switch k.Value {
		case "proposals", "reads", "tokens":
			r, err := parseRate(v.Value)
			if err != nil {
				return p.fail(v.Line, "%s: %v", key, err)
			}
			switch k.Value {
			case "proposals":
				l.proposals = &r
			case "reads":
				l.reads = &r
			default:
				l.tokens = &r
			}
			return nil
		case "reviews_in_flight", "holds_pending":
			var n int64
			if strings.TrimSpace(v.Value) != "unlimited" {
				var err error
				if n, err = parseCount(v.Value); err != nil {
					return p.fail(v.Line, "%s: %v", key, err)
				}
			}
			if k.Value == "reviews_in_flight" {
				l.reviews = &n
			} else {
				l.holds = &n
			}
			return nil
		}
		return p.fail(k.Line, "%s: unknown limit; limits are proposals, reads, tokens, reviews_in_flight and holds_pending", key)
	})
	return l, err
}

func join(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}

// clip shortens a key quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return strings.ToValidUTF8(s[:64], "") + "…"
	}
	return s
}

func sortStrings(s []string) { sort.Strings(s) }
