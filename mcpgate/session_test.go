package mcpgate

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/internal/natstest"
)

// sessionUpstream is an in-memory MCP server whose read tools show its
// session: whoami answers with the upstream session it was called in,
// and hang never answers until the call is cancelled. sessions counts
// the upstream sessions open.
type sessionUpstream struct {
	server   *mcp.Server
	sessions atomic.Int64
	hung     chan struct{}
}

func newSessionUpstream() *sessionUpstream {
	u := &sessionUpstream{hung: make(chan struct{}, 16)}
	u.server = mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	read := &mcp.ToolAnnotations{ReadOnlyHint: true}
	whoami := objectTool("whoami")
	whoami.Annotations = read
	u.server.AddTool(whoami, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%p", req.Session)}}}, nil
	})
	hang := objectTool("hang")
	hang.Annotations = read
	u.server.AddTool(hang, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		<-ctx.Done()
		u.hung <- struct{}{}
		return nil, ctx.Err()
	})
	return u
}

// dial connects a new client session to the upstream, as Config.Dial.
func (u *sessionUpstream) dial(ctx context.Context, opts *mcp.ClientOptions, version string) (*mcp.ClientSession, *CommandTransport, error) {
	ct, st := mcp.NewInMemoryTransports()
	ss, err := u.server.Connect(ctx, st, nil)
	if err != nil {
		return nil, nil, err
	}
	u.sessions.Add(1)
	go func() { _ = ss.Wait(); u.sessions.Add(-1) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "gate", Version: "1"}, opts).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	return cs, nil, err
}

// approveReads is a precheck that lets every read pass, as a policy
// whose catalog backs them.
func approveReads(_ context.Context, p *gated.Proposal) (gated.Settled, bool, error) {
	if p.Class == gated.ClassRead {
		return gated.Settled{Outcome: gated.OutcomeApproved, Stage: gated.StagePolicy}, true, nil
	}
	return gated.Settled{}, false, nil
}

func sessionGate(t *testing.T, u *sessionUpstream, cfg Config) *Gate {
	t.Helper()
	nc, _ := natstest.Connect(t, natstest.Server(t))
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Fleet, cfg.Tenant, cfg.Agent, cfg.NoGrantCheck, cfg.Precheck = client, "acme", "a", true, approveReads
	g, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Upstream().Close() })
	return g
}

func callText(t *testing.T, cs *mcp.ClientSession, tool string) (string, bool) {
	t.Helper()
	return callTextCtx(t, t.Context(), cs, tool)
}

func callTextCtx(t *testing.T, ctx context.Context, cs *mcp.ClientSession, tool string) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s: %d contents", tool, len(res.Content))
	}
	return res.Content[0].(*mcp.TextContent).Text, res.IsError
}

// TestUpstreamSessionPerAgent: every agent session has an upstream
// session of its own, never another agent's, and it ends with the
// agent's.
func TestUpstreamSessionPerAgent(t *testing.T) {
	u := newSessionUpstream()
	g := sessionGate(t, u, Config{Dial: u.dial})
	a, b := connectTo(t, g.Server()), connectTo(t, g.Server())
	a1, _ := callText(t, a, "whoami")
	b1, _ := callText(t, b, "whoami")
	a2, _ := callText(t, a, "whoami")
	b2, _ := callText(t, b, "whoami")
	if a1 != a2 || b1 != b2 {
		t.Fatalf("an agent's calls went over different upstream sessions: %s %s, %s %s", a1, a2, b1, b2)
	}
	if a1 == b1 {
		t.Fatalf("two agent sessions share upstream session %s", a1)
	}
	if n := u.sessions.Load(); n != 2 {
		t.Fatalf("%d upstream sessions open, want 2 (the first agent's is the one New listed the tools on)", n)
	}
	_ = b.Close()
	for u.sessions.Load() != 1 {
		time.Sleep(10 * time.Millisecond) // the test's deadline bounds it
	}
}

// TestOneAgentWithoutDial: a gate without Dial serves its upstream
// session to one agent session, and refuses another rather than share.
func TestOneAgentWithoutDial(t *testing.T) {
	u := newSessionUpstream()
	up, _, err := u.dial(t.Context(), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	g := sessionGate(t, u, Config{Upstream: up})
	a, b := connectTo(t, g.Server()), connectTo(t, g.Server())
	if _, isErr := callText(t, a, "whoami"); isErr {
		t.Fatal("the first agent session was refused")
	}
	text, isErr := callText(t, b, "whoami")
	if !isErr || !strings.Contains(text, "serves another agent session") {
		t.Fatalf("a second agent session got %q (isError %v), want a refusal", text, isErr)
	}
}

// TestForwardedCallDeadline: a call the upstream never answers ends in
// an error to the agent once the call timeout passes, and the upstream
// sees it cancelled.
func TestForwardedCallDeadline(t *testing.T) {
	u := newSessionUpstream()
	g := sessionGate(t, u, Config{Dial: u.dial, CallTimeout: 200 * time.Millisecond})
	// The agent's own deadline only keeps a gate that hangs from
	// hanging the test: the gate's answer must come first.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	text, isErr := callTextCtx(t, ctx, connectTo(t, g.Server()), "hang")
	if !isErr || !strings.Contains(text, "did not answer in time") {
		t.Fatalf("got %q (isError %v), want the timeout as an error", text, isErr)
	}
	<-u.hung
}

// TestRelayedCallDeadline: a read the stdio relay forwards itself ends
// in an error once the call timeout passes, and the upstream is told the
// call is cancelled.
func TestRelayedCallDeadline(t *testing.T) {
	r := startRelayWith(t, true, func(c *Config) { c.CallTimeout = 300 * time.Millisecond })
	a := r.lineAgent(t)
	// Only keeps a gate that hangs from hanging the test.
	if err := r.agentOut.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got := a.call(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"wait","arguments":{}}}`)
	if !strings.Contains(got, `"id":7`) || !strings.Contains(got, "did not answer in time") || !strings.Contains(got, `"isError":true`) {
		t.Fatalf("got %s, want the timeout as a tool error", got)
	}
	for !strings.Contains(strings.Join(r.calls(t), " "), "wait-cancelled") {
		time.Sleep(20 * time.Millisecond) // the test's deadline bounds it
	}
}

// TestLabelledReadProposed: the catalog's labels are on every proposal of
// the tool, and a labelled read is proposed even when the precheck
// approves it, so that gated sees its grant used and its labels join the
// agent's flow state. No gated answers here: the labelled read is not
// approved, and not forwarded.
func TestLabelledReadProposed(t *testing.T) {
	u := newSessionUpstream()
	cat, err := DecodeCatalog([]byte("tools:\n  whoami: {labels: [secret, pii]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := sessionGate(t, u, Config{Dial: u.dial, Catalog: cat, Wait: 300 * time.Millisecond})
	m := MappingOf(&mcp.Tool{Name: "whoami"}, cat)
	if p := g.proposal(m, Call{Target: map[string]any{}}, "p-1", nil); strings.Join(p.Labels, ",") != "secret,pii" {
		t.Fatalf("the proposal of whoami has labels %q, want the catalog's", p.Labels)
	}
	text, isErr := callText(t, connectTo(t, g.Server()), "whoami")
	if !isErr || !strings.Contains(text, "gave no verdict on whoami") {
		t.Fatalf("the labelled read answered %q (error %v), want it proposed and, with no gated, not made", text, isErr)
	}
}
