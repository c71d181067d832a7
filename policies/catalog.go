package policies

import (
	"encoding/json"
	"fmt"

	"github.com/gated/gated"
)

// Catalog is what the policy data says about SOPs and tools, read once
// when a bundle is compiled: the host answers get_sop_text from it and
// describes the reviewer's tools with it.
type Catalog struct {
	sops  map[string]*gated.SOP
	tools map[string]ToolInfo
}

// ToolInfo is one entry of data.gated.tools.
type ToolInfo struct {
	Class       string          `json:"class"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// catalogOf reads data.gated.sops and data.gated.tools. Both are optional;
// entries of the wrong shape are an error, since the policy reads them too.
func catalogOf(data map[string]any) (*Catalog, error) {
	c := &Catalog{sops: map[string]*gated.SOP{}, tools: map[string]ToolInfo{}}
	g, _ := data["gated"].(map[string]any)
	if g == nil {
		return c, nil
	}
	if raw, ok := g["sops"]; ok {
		var sops []gated.SOP
		if err := roundTrip(raw, &sops); err != nil {
			return nil, fmt.Errorf("%w: data.gated.sops must be a list of {id, title, actions, rollback, steps}: %w", ErrInvalidBundle, err)
		}
		for i := range sops {
			c.sops[sops[i].ID] = &sops[i]
		}
	}
	if raw, ok := g["tools"]; ok {
		if err := roundTrip(raw, &c.tools); err != nil {
			return nil, fmt.Errorf("%w: data.gated.tools must map tool names to {class, description, input_schema}: %w", ErrInvalidBundle, err)
		}
	}
	return c, nil
}

func roundTrip(in, out any) error {
	raw, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// SOP returns the catalog entry with id.
func (c *Catalog) SOP(id string) (*gated.SOP, bool) {
	s, ok := c.sops[id]
	return s, ok
}

// Tool returns the catalog entry of a tool.
func (c *Catalog) Tool(name string) (ToolInfo, bool) {
	t, ok := c.tools[name]
	return t, ok
}
