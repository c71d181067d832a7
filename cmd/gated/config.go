package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/gated/gated/internal/yamlpos"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/plugins/sop"
)

// configHelp documents the --config file; it ends the root command's help.
const configHelp = `Configuration file (--config FILE, or GATED_CONFIG=FILE), YAML:

  nats_url: nats://nats.internal:4222   # any flag of the command, - or _ alike
  review_timeout: 90s
  policy_data: [limits.yaml]            # a list for a repeatable flag
  plugins_dir: plugins                  # executables pinned by gated-plugins.lock
  default_plugin: sop                   # serves personas that name no plugin
  operators: operators.yaml             # signed operator decisions (docs/OPERATORS.md)
  notify: notify.yaml                   # webhook notifications (docs/NOTIFICATIONS.md)
  plugins:                              # plugins pinned right here
    - name: acme
      path: bin/acme-reviewer           # relative to this file's directory
      sha256: 64 hex digits             # sha256sum bin/acme-reviewer
      args: [--quiet]
      env: {ACME_REGION: eu}            # or a list of K=V
      max_concurrency: 4
      start_timeout: 20s
      health_interval: 5s               # a check a plugin must answer within
      health_misses: 3                  # missed in a row: killed and relaunched

A flag on the command line wins over GATED_<FLAG> in the environment, which
wins over the file, which wins over the flag's default. Keys may be the
flags of any gated command; each command takes the ones it has. An unknown
key, a value of the wrong type or a bad value is an error naming the file
and line. File names (plugins_dir, plugins[].path, operators, notify, the nats_*
files) are relative to the file's directory; other values are taken as
they would be on the command line.`

// fileConfig is what a --config file holds besides flag values.
type fileConfig struct {
	// path is the file as named on the command line or in GATED_CONFIG.
	path string
	// plugins are the plugins the file pins, in file order, with absolute
	// paths and lower-case digests.
	plugins []plugins.Spec
}

// configValue is one flag value from the file.
type configValue struct {
	key  string // as written in the file
	flag string // the flag's name: key with _ replaced by -
	line int
	// list is set when the file gives a YAML sequence; values then holds
	// its items, else the single value.
	list   bool
	values []string
}

type configKey struct{}

// withConfig returns ctx carrying cfg, for commands to read back with
// configFrom.
func withConfig(ctx context.Context, cfg *fileConfig) context.Context {
	return context.WithValue(ctx, configKey{}, cfg)
}

// configFrom returns the configuration file loaded for the running
// command, or an empty one when there is none.
func configFrom(ctx context.Context) *fileConfig {
	if ctx != nil {
		if cfg, ok := ctx.Value(configKey{}).(*fileConfig); ok && cfg != nil {
			return cfg
		}
	}
	return &fileConfig{}
}

// loadConfigFile reads the file named by cmd's --config flag, if any, and
// sets every flag of cmd the command line and environment left unset.
// It returns the file's other content; with no --config, an empty one.
func loadConfigFile(cmd *cobra.Command) (*fileConfig, error) {
	f := cmd.Flags().Lookup("config")
	if f == nil || f.Value.String() == "" {
		return &fileConfig{}, nil
	}
	path := f.Value.String()
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError("--config: %w", err)
	}
	cfg, values, err := parseConfig(path, data)
	if err != nil {
		return nil, usageError("%w", err)
	}
	if err := applyConfig(cmd, cfg, values); err != nil {
		return nil, usageError("%w", err)
	}
	return cfg, nil
}

// parseConfig decodes a configuration file. It checks the shape of every
// value and the whole plugins section, but not which flags exist: that
// is applyConfig's part.
func parseConfig(path string, data []byte) (*fileConfig, []configValue, error) {
	cfg := &fileConfig{path: path}
	root, err := yamlpos.Parse(data)
	if errors.Is(err, yamlpos.ErrEmpty) {
		return cfg, nil, nil // an empty file sets nothing
	}
	if e, ok := errors.AsType[*yamlpos.Error](err); ok {
		if errors.Is(e, yamlpos.ErrMoreThanOneDocument) {
			return nil, nil, fmt.Errorf("%s:%d: a config file holds one YAML document", path, e.Line)
		}
		return nil, nil, fmt.Errorf("%s:%d: %s", path, e.Line, e.Msg)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if yamlpos.IsNull(root) {
		return cfg, nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("%s:%d: the config must be a mapping of keys to values", path, root.Line)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	base := filepath.Dir(abs)

	var values []configValue
	seen := map[string]int{} // flag name → line
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], yamlpos.Deref(root.Content[i+1])
		key := k.Value
		if k.Kind != yaml.ScalarNode || key == "" {
			return nil, nil, fmt.Errorf("%s:%d: a key must be a plain name", path, k.Line)
		}
		name := strings.ReplaceAll(key, "_", "-")
		if line, dup := seen[name]; dup {
			return nil, nil, fmt.Errorf("%s:%d: %s: already set at line %d", path, k.Line, key, line)
		}
		seen[name] = k.Line
		switch name {
		case "plugins":
			specs, err := plugins.ParseConfig(path, base, v, sop.Name)
			if err != nil {
				return nil, nil, err
			}
			cfg.plugins = specs
			continue
		case "config":
			return nil, nil, fmt.Errorf("%s:%d: %s: a config file cannot name another one", path, k.Line, key)
		}
		cv := configValue{key: key, flag: name, line: k.Line}
		switch {
		case v.Kind == yaml.ScalarNode && !yamlpos.IsNull(v):
			cv.values = []string{v.Value}
		case v.Kind == yaml.SequenceNode:
			cv.list = true
			for _, item := range v.Content {
				item = yamlpos.Deref(item)
				if item.Kind != yaml.ScalarNode || yamlpos.IsNull(item) {
					return nil, nil, fmt.Errorf("%s:%d: %s: list items must be plain values", path, item.Line, key)
				}
				cv.values = append(cv.values, item.Value)
			}
		case yamlpos.IsNull(v):
			return nil, nil, fmt.Errorf("%s:%d: %s: no value; remove the key to keep the default", path, k.Line, key)
		default:
			return nil, nil, fmt.Errorf("%s:%d: %s: want a value or a list of values, not a mapping", path, v.Line, key)
		}
		values = append(values, cv)
	}
	return cfg, values, nil
}

// applyConfig sets cmd's flags from values, leaving alone the ones the
// command line or the environment already set. A key that is a flag of
// another gated command only has its value checked, so one file can serve
// every command; a key that is no flag of any command is an error.
func applyConfig(cmd *cobra.Command, cfg *fileConfig, values []configValue) error {
	others := allFlags(cmd.Root())
	base := ""
	if len(values) > 0 {
		abs, err := filepath.Abs(cfg.path)
		if err != nil {
			return fmt.Errorf("%s: %w", cfg.path, err)
		}
		base = filepath.Dir(abs)
	}
	for _, cv := range values {
		f := cmd.Flags().Lookup(cv.flag)
		apply := true
		switch {
		case cv.flag == "help":
			f = nil
		case f == nil:
			f, apply = others[cv.flag], false
		case f.Changed:
			continue
		}
		if f == nil {
			return fmt.Errorf("%s:%d: %s: unknown key; keys are plugins and the flags of gated's commands (see --help)", cfg.path, cv.line, cv.key)
		}
		vals := cv.values
		if isPathFlag(f) {
			vals = make([]string, len(cv.values))
			for i, v := range cv.values {
				vals[i] = v
				if v != "" && v != "-" && !filepath.IsAbs(v) {
					vals[i] = filepath.Join(base, v)
				}
			}
		}
		if err := setFlag(cmd.Flags(), f, cv.list, vals, apply); err != nil {
			return fmt.Errorf("%s:%d: %s: %w", cfg.path, cv.line, cv.key, err)
		}
	}
	return nil
}

// setFlag gives f vals. With apply false it only checks them: f then
// belongs to a command that is not running, so setting it has no effect.
func setFlag(fs *pflag.FlagSet, f *pflag.Flag, list bool, vals []string, apply bool) error {
	if list {
		sv, ok := f.Value.(pflag.SliceValue)
		if !ok {
			return fmt.Errorf("want a single %s value, not a list", f.Value.Type())
		}
		if err := sv.Replace(vals); err != nil {
			return fmt.Errorf("invalid value %q: %v", vals, err)
		}
		f.Changed = f.Changed || apply
		return nil
	}
	var err error
	if apply {
		err = fs.Set(f.Name, vals[0])
	} else {
		err = f.Value.Set(vals[0])
	}
	if err != nil {
		return fmt.Errorf("invalid %s value %q: %v", f.Value.Type(), vals[0], err)
	}
	return nil
}

// allFlags maps every flag name of every command under root to one of its
// flags.
func allFlags(root *cobra.Command) map[string]*pflag.Flag {
	out := map[string]*pflag.Flag{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		add := func(f *pflag.Flag) {
			if _, ok := out[f.Name]; !ok {
				out[f.Name] = f
			}
		}
		c.Flags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return out
}

// isPathFlag reports whether f names a file or directory (cobra's
// MarkFlagFilename or MarkFlagDirname), whose relative values in the
// config file are relative to the file.
func isPathFlag(f *pflag.Flag) bool {
	_, file := f.Annotations[cobra.BashCompFilenameExt]
	_, dir := f.Annotations[cobra.BashCompSubdirsInDir]
	return file || dir
}
