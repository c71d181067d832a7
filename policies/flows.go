package policies

import (
	"fmt"
	"slices"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/gated/gated"
)

// Bounds and defaults of data.gated.config.flows.
const (
	// DefaultFlowWindow is how long an executed action's labels stay in
	// its agent's flow state when the data sets no window.
	DefaultFlowWindow = time.Hour
	// DefaultFlowRecent and MaxFlowRecent bound how many executed actions
	// an agent's flow state keeps (max_recent): the oldest go first.
	DefaultFlowRecent = 32
	MaxFlowRecent     = 256
	// MaxFlowWindow is the longest window the flow state keeps.
	MaxFlowWindow = 7 * 24 * time.Hour
)

// FlowConfig is the flow configuration of a bundle's data,
// data.gated.config.flows (docs/POLICIES.md#flows).
type FlowConfig struct {
	// Labels are the labels of each action, by its exact name.
	Labels map[string][]string
	// Window is how long an executed action counts in its agent's state.
	Window time.Duration
	// MaxRecent is how many executed actions an agent's state keeps.
	MaxRecent int
	// On says that data turns a flow rule on (rules.<name> set and not
	// false): the flow state is then read for every proposal.
	On bool
}

// LabelsOf is the effective labels of an action that carried extra:
// the data's for action and extra, sorted, each once.
func (f *FlowConfig) LabelsOf(action string, extra []string) []string {
	out := append(slices.Clone(f.Labels[action]), extra...)
	slices.Sort(out)
	return slices.Compact(out)
}

// flowsOf reads data.gated.config.flows; every member is optional.
func flowsOf(data map[string]any) (*FlowConfig, error) {
	f := &FlowConfig{Labels: map[string][]string{}, Window: DefaultFlowWindow, MaxRecent: DefaultFlowRecent}
	g, _ := data["gated"].(map[string]any)
	cfg, _ := g["config"].(map[string]any)
	raw, ok := cfg["flows"]
	if !ok {
		return f, nil
	}
	var doc struct {
		Labels    map[string][]string `json:"labels"`
		Window    string              `json:"window"`
		MaxRecent int                 `json:"max_recent"`
		Rules     map[string]any      `json:"rules"`
	}
	if err := roundTrip(raw, &doc); err != nil {
		return nil, fmt.Errorf("%w: data.gated.config.flows must be {labels: {action: [labels]}, window: duration, max_recent: number, rules: {name: on}}: %w", ErrInvalidBundle, err)
	}
	for action, labels := range doc.Labels {
		if len(labels) > gated.MaxLabels {
			return nil, fmt.Errorf("%w: data.gated.config.flows.labels[%q]: %d labels, more than %d", ErrInvalidBundle, action, len(labels), gated.MaxLabels)
		}
		for _, l := range labels {
			if !gated.ValidLabel(l) {
				return nil, fmt.Errorf("%w: data.gated.config.flows.labels[%q]: %q must match [a-z0-9_-]{1,64}", ErrInvalidBundle, action, l)
			}
		}
		f.Labels[action] = labels
	}
	if doc.Window != "" {
		w, err := time.ParseDuration(doc.Window)
		if err != nil || w <= 0 || w > MaxFlowWindow {
			return nil, fmt.Errorf("%w: data.gated.config.flows.window: %q: want a duration such as \"1h\", at most %s", ErrInvalidBundle, doc.Window, MaxFlowWindow)
		}
		f.Window = w
	}
	switch {
	case doc.MaxRecent < 0 || doc.MaxRecent > MaxFlowRecent:
		return nil, fmt.Errorf("%w: data.gated.config.flows.max_recent: %d: want 1 to %d", ErrInvalidBundle, doc.MaxRecent, MaxFlowRecent)
	case doc.MaxRecent > 0:
		f.MaxRecent = doc.MaxRecent
	}
	for name, on := range doc.Rules {
		switch on {
		case false, nil:
		case true, "review", "hold":
			f.On = true
		default:
			return nil, fmt.Errorf("%w: data.gated.config.flows.rules.%s: %v: want true, false, \"review\" or \"hold\"", ErrInvalidBundle, name, on)
		}
	}
	return f, nil
}

// flowsPackage is the package of the bundled flow rules: its rules read
// input.session only when data turns one of them on.
var flowsPackage = ast.MustParseRef("data.gated.flows")

// readsSession reports whether a rule of the compiled modules can read
// input.session, as readsBudget does for input.budget, with one
// exception: the rules of package gated.flows, which data turns on
// (flows.On), count only when it does.
func readsSession(c *ast.Compiler, flows *FlowConfig) bool {
	for _, m := range c.Modules {
		if m.Package.Path.Equal(flowsPackage) && !flows.On {
			continue
		}
		if readsInput(m, "session") {
			return true
		}
	}
	return false
}
