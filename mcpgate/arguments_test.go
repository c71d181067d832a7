package mcpgate

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
)

// restartServer is an upstream MCP server written the way Go servers
// commonly are: it decodes a call's arguments into a struct with
// encoding/json, which matches member names without case (Unicode simple
// folding) and keeps the last of the members that match. It records the
// raw arguments of each call and the host it restarted.
type restartServer struct {
	mu        sync.Mutex
	raw       []json.RawMessage
	restarted []string
}

func (s *restartServer) server(schema map[string]any) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "restart", InputSchema: schema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args struct {
			Host string `json:"host"`
		}
		if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.raw = append(s.raw, append(json.RawMessage(nil), req.Params.Arguments...))
		s.restarted = append(s.restarted, args.Host)
		s.mu.Unlock()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "restarted " + args.Host}}}, nil
	})
	return srv
}

func (s *restartServer) calls() ([]json.RawMessage, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]json.RawMessage(nil), s.raw...), append([]string(nil), s.restarted...)
}

// recording proposes through the real client and keeps each proposal
// the gate sends.
type recording struct {
	*fleet.Client
	mu   sync.Mutex
	sent []*gated.Proposal
}

func (f *recording) ProposeWith(ctx context.Context, p *gated.Proposal, opts ...fleet.ProposeOption) (*gated.Verdict, error) {
	f.mu.Lock()
	f.sent = append(f.sent, p)
	f.mu.Unlock()
	return f.Client.ProposeWith(ctx, p, opts...)
}

func (f *recording) proposals() []*gated.Proposal {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*gated.Proposal(nil), f.sent...)
}

// TestGateForwardsWhatWasDecided: what the upstream receives is, byte for
// byte, the arguments of the proposal gated approved, and an upstream
// that reads member names without case never acts on a value nobody
// reviewed. Arguments with two member names equal under case folding, at
// any depth, and members the tool's input schema does not allow, are
// refused before any proposal, the upstream never sees them, and the
// refusal is audited.
func TestGateForwardsWhatWasDecided(t *testing.T) {
	g, client, grants := grantingGated(t)
	open := map[string]any{"type": "object", "properties": map[string]any{
		"host": map[string]any{"type": "string"}, "opts": map[string]any{"type": "object"}}}
	closed := map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
		"host": map[string]any{"type": "string"}, "opts": map[string]any{"type": "object"}}}
	catalog, err := DecodeCatalog([]byte("tools:\n  restart: {action: host_restart_service, class: write, target: {host: /host}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		note   string
		schema map[string]any
		args   string
		// refused names what the refusal must say; "" for a call that
		// is forwarded.
		refused string
	}{
		{note: "reviewed arguments", schema: open, args: `{"host":"web-1","opts":{"grace":"10s"}}`},
		{note: "an extra member the schema allows is in the proposal", schema: open, args: `{"host":"web-2","drain":"now"}`},
		{note: "ascii case", schema: open, args: `{"host":"web-3","HOST":"db-prod"}`, refused: `"HOST" and "host"`},
		{note: "unicode simple folding", schema: open, args: `{"host":"web-4","ho\u017ft":"db-prod"}`, refused: `"host" and "hoſt"`},
		{note: "kelvin sign, nested", schema: open, args: `{"host":"web-5","opts":{"kind":"a","\u212aind":"b"}}`, refused: "/opts"},
		{note: "a member the schema does not allow", schema: closed, args: `{"host":"web-6","drain":"now"}`, refused: "drain"},
		{note: "a value of the wrong type", schema: closed, args: `{"host":7}`, refused: "host"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			up := &restartServer{}
			fl := &recording{Client: client}
			gate, err := New(t.Context(), Config{Fleet: fl, Upstream: connectTo(t, up.server(tc.schema)),
				Tenant: "acme", Agent: "mcp-agent", Catalog: catalog, Grants: grants})
			if err != nil {
				t.Fatal(err)
			}
			cs := connectTo(t, gate.Server())
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "restart", Arguments: json.RawMessage(tc.args)})
			if err != nil {
				t.Fatal(err)
			}
			raw, restarted := up.calls()
			sent := fl.proposals()
			if tc.refused != "" {
				text := res.Content[0].(*mcp.TextContent).Text
				if !res.IsError || !strings.Contains(text, tc.refused) || len(restarted) != 0 || len(sent) != 0 {
					t.Fatalf("result %q (isError %v), upstream restarted %q, %d proposals: want a refusal naming %s before any proposal",
						text, res.IsError, restarted, len(sent), tc.refused)
				}
				waitRefusal(t, g, tc.refused)
				return
			}
			if res.IsError || len(restarted) != 1 || len(sent) != 1 {
				t.Fatalf("result %+v, upstream restarted %q after %d proposals: want one forwarded call", res.Content, restarted, len(sent))
			}
			p := sent[0]
			if restarted[0] != p.Target["host"] {
				t.Fatalf("the upstream restarted %q; gated reviewed target %v", restarted[0], p.Target)
			}
			want, err := json.Marshal(p.Arguments)
			if err != nil {
				t.Fatal(err)
			}
			if string(raw[0]) != string(want) {
				t.Fatalf("the upstream received %s; the proposal's arguments are %s", raw[0], want)
			}
			var agent map[string]any
			if err := json.Unmarshal([]byte(tc.args), &agent); err != nil {
				t.Fatal(err)
			}
			for k := range agent {
				if _, ok := p.Arguments[k]; !ok {
					t.Fatalf("argument %q reached the upstream but is not in the proposal's arguments %v", k, p.Arguments)
				}
			}
		})
	}
}

// waitRefusal waits for the audit record of the gate's refusal of a
// call's arguments, whose reason names what.
func waitRefusal(t *testing.T, g *bustest.Gated, what string) {
	t.Helper()
	for range 200 {
		for _, rec := range bustest.TenantAuditRecords(t, g.Resources.Audit, "acme") {
			for _, ev := range rec.Events() {
				var data map[string]any
				if ev.Event == gated.EventGrantRefused && json.Unmarshal(ev.Data, &data) == nil {
					if r, _ := data["reason"].(string); strings.Contains(r, what) && strings.Contains(r, "arguments") {
						return
					}
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no audited refusal naming %s", what)
}
