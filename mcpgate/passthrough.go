package mcpgate

import (
	"context"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
)

// What the gate carries between an agent session and its upstream
// session besides tool calls: the agent's requests the gate does not
// answer itself go to the upstream session (passThrough), and what the
// upstream sends the agent comes back (clientOptions).

// gatedInstructions are the gate's own instructions, after the
// upstream's.
const gatedInstructions = "Every tool call goes through gated, a policy gate: calls that change something are reviewed first. " +
	"Say why you make a call in its reason argument. A refused call comes back as an error whose text is gated's reason."

// serverOptions are the options of the gate's server: the upstream's
// instructions and capabilities (listed on Upstream) merged with the
// gate's own.
func (g *Gate) serverOptions() *mcp.ServerOptions {
	opts := &mcp.ServerOptions{
		Instructions: gatedInstructions,
		Capabilities: &mcp.ServerCapabilities{
			Logging: &mcp.LoggingCapabilities{},
			Tools:   &mcp.ToolCapabilities{ListChanged: true},
		},
	}
	ir := g.cfg.Upstream.InitializeResult()
	if ir == nil {
		return opts
	}
	if ir.Instructions != "" {
		opts.Instructions = ir.Instructions + "\n\n" + gatedInstructions
	}
	if c := ir.Capabilities; c != nil {
		opts.Capabilities.Experimental = c.Experimental
		opts.Capabilities.Extensions = c.Extensions
		opts.Capabilities.Prompts = c.Prompts
		opts.Capabilities.Resources = c.Resources
		opts.Capabilities.Completions = c.Completions
		if c.Completions != nil {
			opts.CompletionHandler = g.complete
		}
		if c.Resources != nil && c.Resources.Subscribe {
			opts.SubscribeHandler = g.subscribe
			opts.UnsubscribeHandler = g.unsubscribe
		}
	}
	return opts
}

// implementation is the gate's serverInfo: the upstream's, said to be
// behind gated.
func (g *Gate) implementation() *mcp.Implementation {
	impl := &mcp.Implementation{Name: "gated-mcp", Version: g.cfg.Version}
	ir := g.cfg.Upstream.InitializeResult()
	if ir == nil || ir.ServerInfo == nil || ir.ServerInfo.Name == "" {
		return impl
	}
	up := ir.ServerInfo
	title := up.Title
	if title == "" {
		title = up.Name
	}
	return &mcp.Implementation{
		Name:        up.Name,
		Version:     up.Version,
		Title:       title + " (through gated)",
		Description: fmt.Sprintf("%s %s behind gated mcp %s, a policy gate", up.Name, up.Version, g.cfg.Version),
		WebsiteURL:  up.WebsiteURL,
		Icons:       up.Icons,
	}
}

// upstreamOf is the upstream session of the agent session that sent req.
func (g *Gate) upstreamOf(ctx context.Context, req mcp.Request) (*mcp.ClientSession, error) {
	ss, _ := req.GetSession().(*mcp.ServerSession)
	return g.up.of(ctx, ss)
}

// passThrough is the receiving middleware of the gate's server: the
// agent's requests that the gate does not answer itself go to the agent
// session's upstream session, each within the call timeout. Reads of a
// resource and gets of a prompt are decided first (decideRead).
func (g *Gate) passThrough(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "logging/setLevel", "resources/list", "resources/templates/list", "resources/read", "prompts/list", "prompts/get":
		default:
			return next(ctx, method, req)
		}
		ctx, cancel := g.withDeadline(ctx)
		defer cancel()
		up, err := g.upstreamOf(ctx, req)
		if err != nil {
			return nil, upstreamError(ctx, method, err)
		}
		if ss, ok := req.GetSession().(*mcp.ServerSession); ok {
			defer g.up.during(ss, ctx)()
		}
		var res mcp.Result
		switch r := req.(type) {
		case *mcp.ServerRequest[*mcp.SetLoggingLevelParams]:
			// The upstream logs at the level the agent asks for, and the
			// gate's own session filters what it relays at it too.
			if err = up.SetLoggingLevel(ctx, r.Params); err == nil {
				return next(ctx, method, req)
			}
		case *mcp.ListResourcesRequest:
			res, err = up.ListResources(ctx, r.Params)
		case *mcp.ListResourceTemplatesRequest:
			res, err = up.ListResourceTemplates(ctx, r.Params)
		case *mcp.ListPromptsRequest:
			res, err = up.ListPrompts(ctx, r.Params)
		case *mcp.ReadResourceRequest:
			return g.readResource(ctx, up, r)
		case *mcp.GetPromptRequest:
			return g.getPrompt(ctx, up, r)
		default:
			return next(ctx, method, req)
		}
		if err != nil {
			return nil, upstreamError(ctx, method, err)
		}
		return res, nil
	}
}

// upstreamError is the error the agent gets for a request the upstream
// failed: the upstream's own JSON-RPC error when it sent one, else one
// naming what went wrong (a timeout included).
func upstreamError(ctx context.Context, method string, err error) error {
	err = timedOut(ctx, err)
	if je, ok := errors.AsType[*jsonrpc.Error](err); ok {
		return je
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("gated mcp: the upstream MCP server failed on %s: %v", method, err)}
}

func (g *Gate) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	ctx, cancel := g.withDeadline(ctx)
	defer cancel()
	up, err := g.upstreamOf(ctx, req)
	if err != nil {
		return nil, upstreamError(ctx, "completion/complete", err)
	}
	res, err := up.Complete(ctx, req.Params)
	if err != nil {
		return nil, upstreamError(ctx, "completion/complete", err)
	}
	return res, nil
}

func (g *Gate) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	ctx, cancel := g.withDeadline(ctx)
	defer cancel()
	up, err := g.upstreamOf(ctx, req)
	if err == nil {
		err = up.Subscribe(ctx, req.Params)
	}
	if err != nil {
		return upstreamError(ctx, "resources/subscribe", err)
	}
	return nil
}

func (g *Gate) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	ctx, cancel := g.withDeadline(ctx)
	defer cancel()
	up, err := g.upstreamOf(ctx, req)
	if err == nil {
		err = up.Unsubscribe(ctx, req.Params)
	}
	if err != nil {
		return upstreamError(ctx, "resources/unsubscribe", err)
	}
	return nil
}

// clientOptions are the options of every upstream session the gate
// connects: what the upstream sends goes to the agent session the
// upstream session serves. It declares sampling and elicitation; a
// request for either is refused when the agent's client does not
// declare them, or when the policy refuses it (relayAsk).
func (g *Gate) clientOptions() *mcp.ClientOptions {
	return &mcp.ClientOptions{
		LoggingMessageHandler: func(ctx context.Context, req *mcp.LoggingMessageRequest) {
			if ctx, ss := g.up.sendContext(ctx, req.Session); ss != nil {
				_ = ss.Log(ctx, req.Params)
			}
		},
		ProgressNotificationHandler: func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
			if ctx, ss := g.up.sendContext(ctx, req.Session); ss != nil {
				_ = ss.NotifyProgress(ctx, req.Params)
			}
		},
		ResourceUpdatedHandler: func(ctx context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			if g.ready.Load() {
				_ = g.server.ResourceUpdated(ctx, req.Params)
			}
		},
		ToolListChangedHandler: func(ctx context.Context, req *mcp.ToolListChangedRequest) {
			// Not in this goroutine: it reads the upstream's answers.
			go func() {
				if err := g.refreshTools(context.WithoutCancel(ctx)); err != nil {
					g.cfg.Log.Warn("refreshing the upstream's tools after tools/list_changed", zap.Error(err))
				}
			}()
		},
		CreateMessageHandler: g.relaySampling,
		ElicitationHandler:   g.relayElicitation,
	}
}
