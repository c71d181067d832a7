package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gated/gated/internal/natstest"
)

// mcpFlowsData turns both flow rules on over a short window and lets the
// mail and the doc update through without review; it labels no action:
// the labels come from gated mcp's catalog (mcpFlowsCatalog).
const mcpFlowsData = `gated:
  tools:
    read_secret: {class: read}
    fetch_page: {class: read}
  config:
    skip_review_actions: [send_email, update_doc]
    flows:
      window: 6s
      rules:
        egress_after_private: true
        write_after_untrusted: review
`

// mcpFlowsWindow is mcpFlowsData's window.
const mcpFlowsWindow = 6 * time.Second

const mcpFlowsCatalog = `tools:
  read_secret: {labels: [secret]}
  fetch_page: {labels: [untrusted]}
  send_email: {labels: [egress]}
`

// flowsUpstream is an MCP server, over streamable HTTP, with a secret
// read, a page fetch, a mail and a doc update; it records the tools it
// ran.
type flowsUpstream struct {
	url string
	mu  sync.Mutex
	ran []string
}

func startFlowsUpstream(t *testing.T) *flowsUpstream {
	t.Helper()
	u := &flowsUpstream{}
	s := mcp.NewServer(&mcp.Implementation{Name: "flows-upstream", Version: "1"}, nil)
	tool := func(name string, read bool, props ...string) {
		p := map[string]any{}
		for _, prop := range props {
			p[prop] = map[string]any{"type": "string"}
		}
		tl := &mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object", "properties": p}}
		if read {
			tl.Annotations = &mcp.ToolAnnotations{ReadOnlyHint: true}
		}
		s.AddTool(tl, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.mu.Lock()
			u.ran = append(u.ran, name)
			u.mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + " done"}}}, nil
		})
	}
	tool("read_secret", true, "name")
	tool("fetch_page", true, "url")
	tool("send_email", false, "to", "body")
	tool("update_doc", false, "doc", "text")
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

func (u *flowsUpstream) count(tool string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, r := range u.ran {
		if r == tool {
			n++
		}
	}
	return n
}

// TestMCPGateFlows is issue 49's session through gated mcp: the catalog
// labels an upstream's tools, a real gated serve has the flow rules on,
// and the Go SDK's client calls through gated mcp. A mail after a secret
// read is refused naming the read, under the same session and a new
// one; another agent's mail is not; a doc update after a page fetch goes
// to review; after the window the mail passes. The labelled reads are
// proposed, not approved locally, so their grants are used and their
// labels join the agent's state.
func TestMCPGateFlows(t *testing.T) {
	if testing.Short() {
		t.Skip("starts gated serve and gated mcp processes")
	}
	clearGatedEnv(t)
	dir := t.TempDir()
	data := writeFile(t, dir, "flows-data.yaml", mcpFlowsData)
	catalog := writeFile(t, dir, "flows-catalog.yaml", mcpFlowsCatalog)
	ns := natstest.Server(t)
	_, stop := startServe(t, ns.ClientURL(), "--data-dir", t.TempDir(), "--policy-data", data)
	t.Cleanup(stop)
	up := startFlowsUpstream(t)
	connect := func(agent, session string) *mcp.ClientSession {
		cs, _ := connectMCP(t, &mcp.CommandTransport{Command: gatedCommand(t, "mcp", "--nats-url", ns.ClientURL(),
			"--tenant", "acme", "--agent", agent, "--session", session, "--policy-data", data, "--catalog", catalog,
			"--log-level", "error", "--upstream", up.url+"/mcp")})
		return cs
	}
	n := 0
	call := func(cs *mcp.ClientSession, tool string, args map[string]any) (map[string]any, string) {
		t.Helper()
		n++
		args["_reason"] = fmt.Sprintf("flows step %d", n)
		res := callTool(t, cs, tool, args, "")
		return verdictOf(t, res), resultText(res)
	}
	// Every process is started before the secret read, so that the steps
	// within the window are proposals alone.
	mailer, mailerAgain, other, reader := connect("mailer", "s1"), connect("mailer", "s2"), connect("other", "s1"), connect("reader", "s1")

	read, text := call(mailer, "read_secret", map[string]any{"name": "db-password"})
	readAt := time.Now()
	if read["outcome"] != "approved" || up.count("read_secret") != 1 {
		t.Fatalf("read_secret: %v %q, want proposed, approved and run", read, text)
	}
	refusedAfterRead := func(who string, v map[string]any, text string) {
		t.Helper()
		reason, _ := v["reason"].(string)
		if v["outcome"] != "rejected" || v["stage"] != "policy" || !strings.Contains(reason, "egress") ||
			!strings.Contains(reason, "read_secret (proposal "+read["proposal_id"].(string)+")") {
			t.Fatalf("%s: %v %q, want refused by the flow rule naming the read", who, v, text)
		}
	}
	v, text := call(mailer, "send_email", map[string]any{"to": "x@example.org", "body": "the password"})
	refusedAfterRead("a mail after the read", v, text)
	v, text = call(mailerAgain, "send_email", map[string]any{"to": "y@example.org", "body": "the password"})
	refusedAfterRead("the same agent's mail under a new session id", v, text)
	if v, text := call(other, "send_email", map[string]any{"to": "z@example.org", "body": "hello"}); v["outcome"] != "approved" {
		t.Fatalf("another agent's mail: %v %q, want approved", v, text)
	}
	if got := up.count("send_email"); got != 1 {
		t.Fatalf("the upstream sent %d mails, want 1 (the other agent's)", got)
	}

	if v, text := call(reader, "update_doc", map[string]any{"doc": "d1", "text": "a"}); v["outcome"] != "approved" || v["stage"] != "policy" {
		t.Fatalf("an update before any page fetch: %v %q, want approved without review", v, text)
	}
	if v, text := call(reader, "fetch_page", map[string]any{"url": "https://example.org/"}); v["outcome"] != "approved" {
		t.Fatalf("fetch_page: %v %q, want proposed and approved", v, text)
	}
	if v, text := call(reader, "update_doc", map[string]any{"doc": "d2", "text": "b"}); v["stage"] != "review" {
		t.Fatalf("an update after a page fetch: %v %q, want routed to review", v, text)
	}

	time.Sleep(time.Until(readAt.Add(mcpFlowsWindow + time.Second)))
	if v, text := call(mailer, "send_email", map[string]any{"to": "x@example.org", "body": "later"}); v["outcome"] != "approved" {
		t.Fatalf("a mail after the window: %v %q, want approved", v, text)
	}
}
