package mcpgate

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gated/gated"
)

// passUpstream is a sessionUpstream that also offers a resource, a
// prompt, and tools that log, and that ask the client to sample; reads
// counts the resource reads and prompt gets it served.
type passUpstream struct {
	*sessionUpstream
	reads atomic.Int64
}

func newPassUpstream() *passUpstream {
	u := &passUpstream{sessionUpstream: newSessionUpstream()}
	s := u.server
	s.AddResource(&mcp.Resource{URI: "test://secret", Name: "secret"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		u.reads.Add(1)
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://secret", Text: "the secret"}}}, nil
	})
	s.AddResource(&mcp.Resource{URI: "test://open", Name: "open"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		u.reads.Add(1)
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://open", Text: "open"}}}, nil
	})
	s.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "who"}}}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		u.reads.Add(1)
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "hello " + req.Params.Arguments["who"]}}}}, nil
	})
	read := &mcp.ToolAnnotations{ReadOnlyHint: true}
	logs := objectTool("logs")
	logs.Annotations = read
	s.AddTool(logs, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "from the upstream"})
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "logged"}}}, nil
	})
	sample := objectTool("sample")
	sample.Annotations = read
	s.AddTool(sample, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "write something"}}}})
		if err != nil {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{res.Content}}, nil
	})
	return u
}

// passPrecheck approves reads, except those of test://secret, and
// rejects sampling: the policy of these tests.
func passPrecheck(_ context.Context, p *gated.Proposal) (gated.Settled, bool, error) {
	switch {
	case p.Action == ActionSampling:
		return gated.Settled{Outcome: gated.OutcomeRejected, Stage: gated.StagePolicy, Reason: "no sampling here"}, true, nil
	case p.Action == ActionReadResource && p.Target["uri"] == "test://secret":
		return gated.Settled{Outcome: gated.OutcomeRejected, Stage: gated.StagePolicy, Reason: "secret"}, true, nil
	}
	return approveReads(context.Background(), p)
}

// agentWith connects an agent whose client answers sampling and counts
// the log messages it gets.
func agentWith(t *testing.T, g *Gate, logs *atomic.Int64) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := g.Server().Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, &mcp.ClientOptions{
		LoggingMessageHandler: func(context.Context, *mcp.LoggingMessageRequest) { logs.Add(1) },
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Content: &mcp.TextContent{Text: "sampled"}, Model: "m", Role: "assistant"}, nil
		},
	}).Connect(t.Context(), ct, &mcp.ClientSessionOptions{ProtocolVersion: listingProtocol}) // one with logging/setLevel
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// TestPassThrough: what the gate does not decide passes between an
// agent session and its own upstream session; resource reads and prompt
// gets are decided like tool calls, and the upstream's sampling is
// policy-visible.
func TestPassThrough(t *testing.T) {
	u := newPassUpstream()
	g := sessionGate(t, u.sessionUpstream, Config{Dial: u.dial, Precheck: passPrecheck, Wait: 300 * time.Millisecond})
	g.cfg.Precheck = passPrecheck
	var logsA, logsB atomic.Int64
	a, b := agentWith(t, g, &logsA), agentWith(t, g, &logsB)
	ir := a.InitializeResult()
	if ir.ServerInfo.Name != "upstream" || !strings.Contains(ir.Instructions, "gated") || ir.Capabilities.Resources == nil || ir.Capabilities.Prompts == nil {
		t.Fatalf("initialize: %+v %+v: want the upstream's serverInfo and capabilities, and gated's instructions", ir.ServerInfo, ir.Capabilities)
	}

	t.Run("logging: the level and the messages are the session's own", func(t *testing.T) {
		if err := a.SetLoggingLevel(t.Context(), &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
			t.Fatal(err)
		}
		if _, isErr := callText(t, a, "logs"); isErr {
			t.Fatal("logs failed")
		}
		if _, isErr := callText(t, b, "logs"); isErr {
			t.Fatal("logs failed")
		}
		for logsA.Load() == 0 {
			time.Sleep(10 * time.Millisecond) // the test's deadline bounds it
		}
		// b set no level: its upstream session logs nothing to it.
		if n := logsB.Load(); n != 0 {
			t.Fatalf("agent b got %d log messages without asking", n)
		}
	})
	t.Run("an open resource and a prompt pass", func(t *testing.T) {
		res, err := a.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "test://open"})
		if err != nil || res.Contents[0].Text != "open" {
			t.Fatalf("read: %v %+v", err, res)
		}
		pr, err := a.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"who": "you", "_reason": "testing"}})
		if err != nil || pr.Messages[0].Content.(*mcp.TextContent).Text != "hello you" {
			t.Fatalf("prompt: %v %+v", err, pr)
		}
	})
	t.Run("a read the policy denies is proposed, and without an approval never reaches the upstream", func(t *testing.T) {
		before := u.reads.Load()
		_, err := a.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "test://secret"})
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != requestRefusedCode || !strings.Contains(je.Message, "read_resource") && !strings.Contains(je.Message, "test://secret") {
			t.Fatalf("got %v, want gated's refusal", err)
		}
		if n := u.reads.Load() - before; n != 0 {
			t.Fatalf("the upstream served %d reads", n)
		}
	})
	t.Run("the upstream's new tools are offered after its tools/list_changed", func(t *testing.T) {
		fresh := objectTool("fresh")
		fresh.Annotations = &mcp.ToolAnnotations{ReadOnlyHint: true}
		u.server.AddTool(fresh, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "fresh"}}}, nil
		})
		for {
			res, err := a.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(res.Tools, func(tool *mcp.Tool) bool { return tool.Name == "fresh" }) {
				break
			}
			time.Sleep(20 * time.Millisecond) // the test's deadline bounds it
		}
		if text, isErr := callText(t, a, "fresh"); isErr || text != "fresh" {
			t.Fatalf("fresh: %q", text)
		}
	})
	t.Run("sampling the policy refuses is not asked of the agent", func(t *testing.T) {
		text, _ := callText(t, a, "sample")
		if !strings.Contains(text, "no sampling here") {
			t.Fatalf("sample: %q, want the policy's refusal", text)
		}
	})
}
