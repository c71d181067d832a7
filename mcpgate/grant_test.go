package mcpgate

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/policies"
)

// restartPolicy is the default bundle approving host_restart_service
// without review, so that a write is approved with no reviewer running.
var restartPolicy = sync.OnceValues(func() (*policies.Evaluator, error) {
	b, err := policies.Default()
	if err != nil {
		return nil, err
	}
	b.Data["gated"].(map[string]any)["config"].(map[string]any)["skip_review_actions"] = []any{"host_restart_service"}
	return policies.Compile(context.Background(), b)
})

// grantingGated starts gated with restartPolicy, signing grants, and
// connects a fleet client and grant checker to it.
func grantingGated(t *testing.T) (*bustest.Gated, *fleet.Client, *fleet.Grants) {
	t.Helper()
	pol, err := restartPolicy()
	if err != nil {
		t.Fatal(err)
	}
	g := bustest.StartGrantingGated(t, bus.Config{}, 5*time.Minute, pol)
	client, err := fleet.NewClient(g.NC)
	if err != nil {
		t.Fatal(err)
	}
	grants, err := fleet.NewGrants(g.NC)
	if err != nil {
		t.Fatal(err)
	}
	return g, client, grants
}

// tampering proposes through the real client and rewrites the verdict
// it hands the gate: what a compromised transport could do.
type tampering struct {
	*fleet.Client
	tamper func(v *gated.Verdict)
}

func (f tampering) ProposeWith(ctx context.Context, p *gated.Proposal, opts ...fleet.ProposeOption) (*gated.Verdict, error) {
	v, err := f.Client.ProposeWith(ctx, p, opts...)
	if err == nil && f.tamper != nil {
		f.tamper(v)
	}
	return v, err
}

// TestGateUsesGrantBeforeForwarding: an approved call reaches the
// upstream only after its grant verified and was used; a spent, altered
// or missing grant means the upstream never sees the call. A forwarded
// call's outcome (an isError result is failed) is audited by gated.
func TestGateUsesGrantBeforeForwarding(t *testing.T) {
	g, client, grants := grantingGated(t)
	var calls atomic.Int32
	s := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	s.AddTool(objectTool("restart", "host", "fail"), func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		calls.Add(1)
		var args map[string]any
		_ = json.Unmarshal(req.Params.Arguments, &args)
		if args["fail"] == "yes" {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "nginx did not come back"}}}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "restarted"}}}, nil
	})
	upstream := connectTo(t, s)
	catalog, err := DecodeCatalog([]byte("tools:\n  restart: {action: host_restart_service, class: write, target: {host: /host}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var spent string
	for _, tc := range []struct {
		note, host, fail string
		tamper           func(*gated.Verdict)
		forwarded        bool
		refusal, status  string
	}{
		{note: "approved", host: "web-1", forwarded: true, status: gated.ExecutionSucceeded,
			tamper: func(v *gated.Verdict) { spent = v.Grant }},
		{note: "approved, the tool fails", host: "web-2", fail: "yes", forwarded: true, status: gated.ExecutionFailed},
		{note: "another call's spent grant", host: "web-3", tamper: func(v *gated.Verdict) { v.Grant = spent }, refusal: "proposal_id"},
		{note: "an altered grant", host: "web-4", tamper: func(v *gated.Verdict) {
			p := strings.Split(v.Grant, ".")
			v.Grant = p[0] + "." + strings.Split(spent, ".")[1] + "." + p[2]
		}, refusal: "signature"},
		{note: "no grant", host: "web-5", tamper: func(v *gated.Verdict) { v.Grant = "" }, refusal: "grant"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			gate, err := New(t.Context(), Config{Fleet: tampering{Client: client, tamper: tc.tamper}, Upstream: upstream,
				Tenant: "acme", Agent: "mcp-agent-" + tc.host, Catalog: catalog, Grants: grants})
			if err != nil {
				t.Fatal(err)
			}
			cs := connectTo(t, gate.Server())
			before := calls.Load()
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "restart", Arguments: map[string]any{"host": tc.host, "fail": tc.fail}})
			if err != nil {
				t.Fatal(err)
			}
			forwarded := calls.Load() > before
			if forwarded != tc.forwarded {
				t.Fatalf("forwarded %v, want %v: %+v", forwarded, tc.forwarded, res.Content)
			}
			meta, _ := res.Meta[VerdictMetaKey].(map[string]any)
			id, _ := meta["proposal_id"].(string)
			if id == "" {
				t.Fatalf("no verdict in the result's _meta: %v", res.Meta)
			}
			if !tc.forwarded {
				text := res.Content[0].(*mcp.TextContent).Text
				if !res.IsError || !strings.Contains(text, tc.refusal) {
					t.Fatalf("result %q (isError %v), want a refusal naming %s", text, res.IsError, tc.refusal)
				}
				return
			}
			waitOutcome(t, g, id, tc.status)
		})
	}
}

func connectTo(t *testing.T, s *mcp.Server) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func waitOutcome(t *testing.T, g *bustest.Gated, id, status string) {
	t.Helper()
	for range 200 {
		for _, ev := range bustest.AuditRecords(t, g.Resources.Audit, "acme", id) {
			var data map[string]any
			if ev.Event == gated.EventGrantOutcome && json.Unmarshal(ev.Data, &data) == nil && data["status"] == status {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no grant.outcome %s for %s: %v", status, id, bustest.AuditEvents(t, g.Resources.Audit, "acme", id))
}
