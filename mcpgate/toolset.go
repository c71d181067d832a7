package mcpgate

import (
	"context"
	"fmt"
	"maps"
	"reflect"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gated/gated"
)

// listTools lists the upstream server's tools on Upstream, maps each
// onto a proposal and asks the precheck which the policy denies
// outright. It refuses two tools that map onto one action, a catalog
// entry for a tool the server does not offer, and a tool the gate cannot
// offer.
func (g *Gate) listTools(ctx context.Context) ([]*gatedTool, error) {
	cfg := g.cfg
	var tools []*gatedTool
	seen := map[string]bool{}
	actions := map[string]string{}
	for t, err := range cfg.Upstream.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("listing the upstream server's tools: %w", err)
		}
		if t.Name == "" {
			return nil, fmt.Errorf("the upstream server lists a tool without a name")
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("the upstream server lists tool %q twice", t.Name)
		}
		seen[t.Name] = true
		m := MappingOf(t, cfg.Catalog)
		if m.schema, err = resolveSchema(t); err != nil {
			return nil, err
		}
		if other, ok := actions[m.Action]; ok {
			return nil, fmt.Errorf("%w: tools %q and %q are both action %s: give one its own action in the catalog", ErrActionCollision, other, t.Name, m.Action)
		}
		actions[m.Action] = t.Name
		spec, err := advertised(t, m)
		if err != nil {
			return nil, err
		}
		gt := &gatedTool{spec: spec, mapping: m}
		if cfg.Precheck != nil {
			s, settled, err := cfg.Precheck(ctx, g.bareProposal(m))
			if err != nil {
				return nil, fmt.Errorf("evaluating the policy on tool %s: %w", t.Name, err)
			}
			if settled && s.Outcome == gated.OutcomeRejected {
				gt.denied = &s
			}
		}
		tools = append(tools, gt)
	}
	if cfg.Catalog != nil {
		for name := range cfg.Catalog.Tools {
			if !seen[name] {
				return nil, fmt.Errorf("%w: tools[%q]: the upstream server offers no such tool", ErrInvalidCatalog, name)
			}
		}
	}
	return tools, nil
}

// offer makes tools the gate's tools: tools/list shows them (a tool the
// policy denies outright hidden or marked), and a tool the upstream no
// longer offers is taken away. The SDK tells the agents the list changed.
func (g *Gate) offer(tools []*gatedTool) error {
	g.toolsMu.Lock()
	defer g.toolsMu.Unlock()
	offered := map[string]*gatedTool{}
	listed := map[string]*mcp.Tool{}
	for _, gt := range tools {
		if gt.denied != nil && g.cfg.ListDenied == ListHide {
			continue
		}
		spec := gt.spec
		if gt.denied != nil {
			marked := *spec
			marked.Description = "[denied by gated's policy: " + gt.denied.Reason + "] " + spec.Description
			spec = &marked
		} else {
			offered[spec.Name] = gt
		}
		listed[spec.Name] = spec
	}
	var gone []string
	if old := g.tools.Load(); old != nil {
		for _, gt := range *old {
			if _, still := listed[gt.spec.Name]; !still {
				gone = append(gone, gt.spec.Name)
			}
		}
	}
	if len(gone) > 0 {
		g.server.RemoveTools(gone...)
	}
	for _, gt := range tools {
		spec, ok := listed[gt.spec.Name]
		if !ok {
			continue
		}
		if err := addTool(g.server, spec, g.handler(gt)); err != nil {
			return err
		}
	}
	g.tools.Store(&tools)
	g.offered.Store(&offered)
	return nil
}

// refreshTools lists the upstream's tools again (after its
// tools/list_changed) and offers what it lists now. A list the gate
// cannot offer (two tools on one action, say) leaves the old one.
func (g *Gate) refreshTools(ctx context.Context) error {
	if !g.ready.Load() {
		return nil
	}
	ctx, cancel := g.withDeadline(ctx)
	defer cancel()
	tools, err := g.listTools(ctx)
	if err != nil {
		return err
	}
	if old := g.tools.Load(); old != nil && sameTools(*old, tools) {
		return nil
	}
	return g.offer(tools)
}

// sameTools reports whether a and b offer the same tools the same way.
func sameTools(a, b []*gatedTool) bool {
	if len(a) != len(b) {
		return false
	}
	byName := map[string]*gatedTool{}
	for _, gt := range a {
		byName[gt.spec.Name] = gt
	}
	for _, gt := range b {
		old := byName[gt.spec.Name]
		if old == nil || !reflect.DeepEqual(old.spec, gt.spec) || (old.denied == nil) != (gt.denied == nil) ||
			!maps.Equal(old.mapping.Target, gt.mapping.Target) {
			return false
		}
	}
	return true
}
