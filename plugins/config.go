package plugins

// The plugins section of gated's --config file.

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gated/gated/internal/digest"
	"github.com/gated/gated/internal/yamlpos"
)

// ParseConfig reads the plugins section: a list of plugins, each pinned
// by its SHA-256; none may take the name of the bundled reviewer.
func ParseConfig(path, base string, n *yaml.Node, bundled string) ([]Spec, error) {
	if yamlpos.IsNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s:%d: plugins: want a list of plugins", path, n.Line)
	}
	var specs []Spec
	lines := map[string]int{}
	for i, item := range n.Content {
		item = yamlpos.Deref(item)
		at := fmt.Sprintf("plugins[%d]", i)
		s, err := parsePlugin(path, base, at, item)
		if err != nil {
			return nil, err
		}
		if s.Name == bundled {
			return nil, fmt.Errorf("%s:%d: %s.name: %q is the bundled reviewer; choose another name", path, item.Line, at, s.Name)
		}
		if line, dup := lines[s.Name]; dup {
			return nil, fmt.Errorf("%s:%d: %s.name: plugin %q is already configured at line %d", path, item.Line, at, s.Name, line)
		}
		lines[s.Name] = item.Line
		specs = append(specs, s)
	}
	return specs, nil
}

func parsePlugin(path, base, at string, n *yaml.Node) (Spec, error) {
	var s Spec
	if n.Kind != yaml.MappingNode {
		return s, fmt.Errorf("%s:%d: %s: want a mapping with name, path and sha256", path, n.Line, at)
	}
	bad := func(line int, key, format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s.%s: %s", path, line, at, key, fmt.Sprintf(format, args...))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], yamlpos.Deref(n.Content[i+1])
		key := strings.ReplaceAll(k.Value, "-", "_")
		if seen[key] {
			return s, bad(k.Line, k.Value, "already set")
		}
		seen[key] = true
		scalar := func() (string, error) {
			if v.Kind != yaml.ScalarNode || yamlpos.IsNull(v) {
				return "", bad(v.Line, k.Value, "want a single value")
			}
			return v.Value, nil
		}
		var err error
		switch key {
		case "name":
			if s.Name, err = scalar(); err == nil {
				if cerr := CheckName(s.Name); cerr != nil {
					err = bad(v.Line, k.Value, "%v", cerr)
				}
			}
		case "path":
			if s.Path, err = scalar(); err == nil {
				switch {
				case s.Path == "":
					err = bad(v.Line, k.Value, "must not be empty")
				case !filepath.IsAbs(s.Path):
					s.Path = filepath.Join(base, s.Path)
				}
			}
		case "sha256":
			if s.SHA256, err = scalar(); err == nil {
				s.SHA256 = strings.ToLower(s.SHA256)
				if !digest.ValidSHA256(s.SHA256) {
					err = bad(v.Line, k.Value, "%q is not 64 lower-case hex digits (sha256sum FILE prints it)", v.Value)
				}
			}
		case "args":
			s.Args, err = stringList(v)
			if err != nil {
				err = bad(v.Line, k.Value, "%v", err)
			}
		case "env":
			s.Env, err = envList(v)
			if err != nil {
				err = bad(v.Line, k.Value, "%v", err)
			}
		case "max_concurrency":
			var raw string
			if raw, err = scalar(); err == nil {
				s.MaxConcurrency, err = strconv.Atoi(raw)
				if err != nil || s.MaxConcurrency < 0 {
					err = bad(v.Line, k.Value, "%q: want a whole number, 0 or more (0: the plugin's own limit)", raw)
				}
			}
		case "start_timeout":
			var raw string
			if raw, err = scalar(); err == nil {
				s.StartTimeout, err = time.ParseDuration(raw)
				if err != nil || s.StartTimeout <= 0 {
					err = bad(v.Line, k.Value, "%q: want a positive duration such as 20s", raw)
				}
			}
		case "health_interval":
			var raw string
			if raw, err = scalar(); err == nil {
				s.HealthInterval, err = time.ParseDuration(raw)
				if err != nil || s.HealthInterval <= 0 {
					err = bad(v.Line, k.Value, "%q: want a positive duration such as 5s", raw)
				}
			}
		case "health_misses":
			var raw string
			if raw, err = scalar(); err == nil {
				s.HealthMisses, err = strconv.Atoi(raw)
				if err != nil || s.HealthMisses < 1 {
					err = bad(v.Line, k.Value, "%q: want a whole number, 1 or more", raw)
				}
			}
		default:
			err = bad(k.Line, k.Value, "unknown key; a plugin has name, path, sha256, args, env, max_concurrency, start_timeout, health_interval and health_misses")
		}
		if err != nil {
			return s, err
		}
	}
	for _, req := range []struct{ key, val string }{{"name", s.Name}, {"path", s.Path}, {"sha256", s.SHA256}} {
		if req.val == "" {
			return s, fmt.Errorf("%s:%d: %s: %s is required", path, n.Line, at, req.key)
		}
	}
	return s, nil
}

// stringList reads a YAML list of plain values.
func stringList(n *yaml.Node) ([]string, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, errors.New("want a list")
	}
	out := make([]string, 0, len(n.Content))
	for i, item := range n.Content {
		item = yamlpos.Deref(item)
		if item.Kind != yaml.ScalarNode || yamlpos.IsNull(item) {
			return nil, fmt.Errorf("item %d (line %d) is not a plain value", i, item.Line)
		}
		out = append(out, item.Value)
	}
	return out, nil
}

// envList reads a plugin's environment: a mapping, or a list of K=V. A
// mapping comes out sorted by key.
func envList(n *yaml.Node) ([]string, error) {
	var env []string
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], yamlpos.Deref(n.Content[i+1])
			if k.Value == "" || strings.Contains(k.Value, "=") {
				return nil, fmt.Errorf("%q (line %d): not a variable name", k.Value, k.Line)
			}
			if v.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("%s (line %d): want a plain value", k.Value, v.Line)
			}
			val := v.Value
			if yamlpos.IsNull(v) {
				val = ""
			}
			env = append(env, k.Value+"="+val)
		}
		sort.Strings(env)
	case yaml.SequenceNode:
		var err error
		if env, err = stringList(n); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("want a mapping of names to values, or a list of NAME=VALUE")
	}
	for _, kv := range env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: want NAME=VALUE", kv)
		}
	}
	return env, nil
}
