package mcpgate

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gated/gated/internal/natstest"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gated/gated/bus/fleet"
)

// upstreamWith connects to an in-memory MCP server offering tools.
func upstreamWith(t *testing.T, tools ...*mcp.Tool) *mcp.ClientSession {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	for _, tool := range tools {
		s.AddTool(tool, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	}
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "gate", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func objectTool(name string, props ...string) *mcp.Tool {
	p := map[string]any{}
	for _, name := range props {
		p[name] = map[string]any{"type": "string"}
	}
	return &mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object", "properties": p}}
}

// TestNewRefuses checks that a gate whose proposals could not be told
// apart, or whose catalog does not fit the server, does not start.
func TestNewRefuses(t *testing.T) {
	nc, _ := natstest.Connect(t, natstest.Server(t))
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	catalog := func(s string) *Catalog {
		c, err := DecodeCatalog([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		note    string
		tools   []*mcp.Tool
		catalog *Catalog
		cfg     func(*Config)
		want    error
		text    string
	}{
		{note: "two tools, one action", tools: []*mcp.Tool{objectTool("db.drop"), objectTool("db_drop")},
			want: ErrActionCollision, text: `tools "db.drop" and "db_drop" are both action db_drop`},
		{note: "a catalog action that collides", tools: []*mcp.Tool{objectTool("a"), objectTool("b")},
			catalog: catalog("tools:\n  b: {action: a}\n"), want: ErrActionCollision},
		{note: "a catalog entry for no tool", tools: []*mcp.Tool{objectTool("a")},
			catalog: catalog("tools:\n  restart: {class: destructive}\n"), want: ErrInvalidCatalog, text: "offers no such tool"},
		{note: "a tool with an argument named like the reason", tools: []*mcp.Tool{objectTool("a", "_reason")},
			want: ErrInvalidCatalog, text: `argument "_reason" of its own`},
		{note: "no tenant", tools: []*mcp.Tool{objectTool("a")}, cfg: func(c *Config) { c.Tenant = "" }, want: ErrInvalidConfig},
		{note: "no agent", tools: []*mcp.Tool{objectTool("a")}, cfg: func(c *Config) { c.Agent = " " }, want: ErrInvalidConfig},
		{note: "no fleet", tools: []*mcp.Tool{objectTool("a")}, cfg: func(c *Config) { c.Fleet = nil }, want: ErrInvalidConfig},
		{note: "no grants", tools: []*mcp.Tool{objectTool("a")}, cfg: func(c *Config) { c.NoGrantCheck = false }, want: ErrInvalidConfig, text: "no grants"},
		{note: "bad list mode", tools: []*mcp.Tool{objectTool("a")}, cfg: func(c *Config) { c.ListDenied = "show" }, want: ErrInvalidConfig},
	} {
		t.Run(tc.note, func(t *testing.T) {
			cfg := Config{Fleet: client, Upstream: upstreamWith(t, tc.tools...), Tenant: "acme", Agent: "a", Catalog: tc.catalog, NoGrantCheck: true}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			_, err := New(t.Context(), cfg)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("got %v, want %v mentioning %q", err, tc.want, tc.text)
			}
		})
	}
	t.Run("a fitting catalog starts", func(t *testing.T) {
		g, err := New(t.Context(), Config{Fleet: client, Upstream: upstreamWith(t, objectTool("db.drop"), objectTool("db_drop")),
			Tenant: "acme", Agent: "a", Catalog: catalog("tools:\n  db.drop: {action: db_drop_dotted}\n"), NoGrantCheck: true})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(g.Tools()); n != 2 {
			t.Errorf("%d tools, want 2", n)
		}
	})
}
