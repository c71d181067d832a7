package server

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/gated/gated/personas"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/plugins/llm"
	"github.com/gated/gated/plugins/sop"
)

// PluginSpecs returns the plugins serve runs: the bundled sop reviewer,
// the bundled llm reviewer when something routes to it, the config file's
// plugins, then the plugin directory's (pinned by its lock file), and the
// default plugin, which must be one of them. A name configured twice is
// an error naming both places.
func PluginSpecs(ctx context.Context, o Config) ([]plugins.Spec, string, error) {
	bundled, err := plugins.Bundled(sop.Name)
	if err != nil {
		return nil, "", err
	}
	specs := []plugins.Spec{bundled}
	from := map[string]string{sop.Name: "the bundled reviewers"}
	if use, err := wantsLLM(o); err != nil {
		return nil, "", err
	} else if use {
		spec, err := plugins.Bundled(llm.Name)
		if err != nil {
			return nil, "", err
		}
		// A plugin's environment is minimal: pass the providers' keys and
		// addresses, and nothing else of gated's.
		spec.Env = llm.Environ()
		spec.MaxConcurrency = o.LLMMaxConcurrency
		specs = append(specs, spec)
		from[llm.Name] = "the bundled reviewers"
	}
	add := func(where string, more []plugins.Spec) error {
		for _, s := range more {
			if prev, dup := from[s.Name]; dup {
				return usageError("plugin %q is configured twice: in %s and in %s", s.Name, prev, where)
			}
			from[s.Name] = where
			specs = append(specs, s)
		}
		return nil
	}
	if err := add("config file "+o.ConfigFile, o.ConfigPlugins); err != nil {
		return nil, "", err
	}
	if o.PluginsDir != "" {
		dirSpecs, err := plugins.DirSpecs(o.PluginsDir)
		if err != nil {
			return nil, "", err
		}
		if err := add("plugin directory "+o.PluginsDir, dirSpecs); err != nil {
			return nil, "", err
		}
	}
	if _, ok := from[o.DefaultPlugin]; !ok {
		names := make([]string, 0, len(from))
		for n := range from {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, "", usageError("--default-plugin %q is not a configured plugin (have: %s)", o.DefaultPlugin, strings.Join(names, ", "))
	}
	return specs, o.DefaultPlugin, nil
}

// wantsLLM reports whether serve should run the bundled llm reviewer: it
// is the default plugin, or a persona (built in or under --personas) names
// it. It needs no key to start, but it is one more process, so a gated
// that never routes to it does not run it. A persona naming llm that
// appears on a later reload is blocked until gated restarts.
func wantsLLM(o Config) (bool, error) {
	if o.DefaultPlugin == llm.Name {
		return true, nil
	}
	reg, _, err := personas.Load(o.PersonasDir)
	if err != nil {
		return false, fmt.Errorf("loading personas: %w", err)
	}
	for _, name := range reg.Names() {
		if p, ok := reg.Persona(name); ok && p.Plugin == llm.Name {
			return true, nil
		}
	}
	return false, nil
}
