package mcpgate

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/gated/gated"
)

// Requests other than tools/call that act, decided like tool calls: the
// read of a resource and the get of a prompt (data the agent reads), and
// the upstream's sampling and elicitation requests (the upstream asks the
// agent's model or user for something: an actor too).

// The actions of the requests, unless the catalog names others.
const (
	ActionReadResource  = "read_resource"
	ActionGetPrompt     = "get_prompt"
	ActionSampling      = "mcp_sampling"
	ActionElicitation   = "mcp_elicitation"
	requestRefusedCode  = -32001 // a JSON-RPC server error: gated refused the request
	requestMethodReason = "_reason"
)

// requestMapping is the mapping of a request that is not a tool call:
// action, class read (unless the catalog says otherwise) and what is
// described by label, with the catalog's rule for key in rules applied.
func requestMapping(action, label string, c *Catalog, rules func(*Catalog) map[string]ToolRule, key string) Mapping {
	m := Mapping{Tool: label, Action: action, Class: gated.ClassRead, ClassFrom: "the request", BlastRadius: gated.BlastSingleDevice, ReasonArgument: requestMethodReason}
	if c == nil {
		return m
	}
	if c.BlastRadius != "" {
		m.BlastRadius = c.BlastRadius
	}
	if r, ok := rules(c)[key]; ok {
		m = m.with(r)
		if r.Class != "" {
			m.ClassFrom = "catalog"
		}
	}
	return m
}

// decideRequest decides a request of mapping m with arguments args (a
// JSON object) in agent session ss: nil when it may go upstream, with
// done to call with whether the upstream succeeded; else the JSON-RPC
// error the agent gets. A read the precheck approves at the policy stage
// passes without a round trip, as a tool's read does; everything else is
// proposed, and an approval's grant is used before the request goes.
func (g *Gate) decideRequest(ctx context.Context, ss *mcp.ServerSession, m Mapping, args map[string]any) (done func(ok bool, why string), err error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("gated refused %s: %v", m.Tool, err)}
	}
	id := newProposalID()
	call, err := m.Read(raw)
	if err != nil {
		g.refuseArguments(ctx, m, id, err)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("gated refused %s: %v. It was not sent.", m.Tool, err)}
	}
	p := g.proposal(m, call, id, ss)
	p.ContextSummary = fmt.Sprintf("MCP %s from an agent session, through gated mcp (class %s from %s).", m.Tool, m.Class, m.ClassFrom)
	if g.approvedHere(ctx, p) {
		return func(bool, string) {}, nil
	}
	v, err := g.decideAlone(ctx, nil, p)
	key := p.Tenant + "." + p.ID
	if err != nil {
		g.cfg.Log.Info("request not approved", zap.String("request", m.Tool), zap.String("proposal", key), zap.Error(err))
		return nil, refusedError(notApproved(m.Tool, key, v, err), v)
	}
	gid, refused := g.takeGrant(ctx, m, p, v)
	if refused != nil {
		return nil, refusedError(refused, v)
	}
	return func(ok bool, why string) {
		res := &mcp.CallToolResult{}
		if !ok {
			res = refusal(why, v)
		}
		g.finish(ctx, p, gid, res)
	}, nil
}

// refusedError is the JSON-RPC error of a refused request: the refusal's
// text, and the verdict as its data.
func refusedError(res *mcp.CallToolResult, v *gated.Verdict) error {
	e := &jsonrpc.Error{Code: requestRefusedCode, Message: res.Content[0].(*mcp.TextContent).Text}
	if v != nil {
		e.Data, _ = json.Marshal(map[string]any{VerdictMetaKey: verdictMeta(v)})
	}
	return e
}

// readResource decides a resources/read and forwards it.
func (g *Gate) readResource(ctx context.Context, up *mcp.ClientSession, req *mcp.ReadResourceRequest) (mcp.Result, error) {
	uri := req.Params.URI
	m := requestMapping(ActionReadResource, "resources/read "+uri, g.cfg.Catalog, func(c *Catalog) map[string]ToolRule { return c.Resources }, uri)
	done, err := g.decideRequest(ctx, req.Session, m, map[string]any{"uri": uri})
	if err != nil {
		return nil, err
	}
	res, err := up.ReadResource(ctx, req.Params)
	done(err == nil, fmt.Sprint(err))
	if err != nil {
		return nil, upstreamError(ctx, "resources/read", err)
	}
	return res, nil
}

// getPrompt decides a prompts/get and forwards it.
func (g *Gate) getPrompt(ctx context.Context, up *mcp.ClientSession, req *mcp.GetPromptRequest) (mcp.Result, error) {
	name := req.Params.Name
	args := map[string]any{}
	for k, v := range req.Params.Arguments {
		args[k] = v
	}
	m := requestMapping(ActionGetPrompt, "prompts/get "+name, g.cfg.Catalog, func(c *Catalog) map[string]ToolRule { return c.Prompts }, name)
	fixed := map[string]any{"prompt": name}
	for k, v := range m.TargetFixed {
		fixed[k] = v
	}
	m.TargetFixed = fixed
	done, err := g.decideRequest(ctx, req.Session, m, args)
	if err != nil {
		return nil, err
	}
	// What goes upstream is what was decided: the arguments, less the
	// reason.
	params := *req.Params
	if _, ok := params.Arguments[m.ReasonArgument]; ok {
		params.Arguments = map[string]string{}
		for k, v := range req.Params.Arguments {
			if k != m.ReasonArgument {
				params.Arguments[k] = v
			}
		}
	}
	res, err := up.GetPrompt(ctx, &params)
	done(err == nil, fmt.Sprint(err))
	if err != nil {
		return nil, upstreamError(ctx, "prompts/get", err)
	}
	return res, nil
}

// askAgent decides an upstream's request of the agent (sampling,
// elicitation) in the agent session the upstream session serves: the
// agent's client must declare the capability, and the policy must not
// refuse the action (the precheck, the request's details as arguments).
// It returns the agent session to relay it to, or why not.
func (g *Gate) askAgent(ctx context.Context, cs *mcp.ClientSession, action, what string, declared func(*mcp.ClientCapabilities) bool, params any) (*mcp.ServerSession, error) {
	ss := g.up.peer(cs)
	if ss == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "gated mcp: no agent session to ask for " + what}
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil || !declared(ip.Capabilities) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "gated mcp: the agent's client does not support " + what}
	}
	if g.cfg.Precheck == nil {
		return ss, nil
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil {
		return nil, err
	}
	m := Mapping{Tool: what, Action: action, Class: gated.ClassWrite, ClassFrom: "the request", BlastRadius: gated.BlastSingleDevice,
		ReasonArgument: requestMethodReason}
	p := g.proposal(m, Call{Target: map[string]any{"request": what}, Arguments: args}, newProposalID(), ss)
	p.ContextSummary = "MCP " + what + " asked by the upstream server of an agent session, through gated mcp."
	s, settled, err := g.cfg.Precheck(ctx, p)
	if err != nil {
		return nil, &jsonrpc.Error{Code: requestRefusedCode, Message: fmt.Sprintf("gated mcp could not evaluate the policy on %s: %v", what, err)}
	}
	if settled && s.Outcome == gated.OutcomeRejected {
		return nil, &jsonrpc.Error{Code: requestRefusedCode, Message: fmt.Sprintf("gated's policy refused %s: %s", what, s.Reason)}
	}
	return ss, nil
}

func (g *Gate) relaySampling(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	ss, err := g.askAgent(ctx, req.Session, ActionSampling, "sampling/createMessage",
		func(c *mcp.ClientCapabilities) bool { return c.Sampling != nil }, req.Params)
	if err != nil {
		return nil, err
	}
	ctx, cancel := g.withDeadline(g.askContext(ctx, req.Session))
	defer cancel()
	res, err := ss.CreateMessage(ctx, req.Params)
	if err != nil {
		return nil, timedOut(ctx, err)
	}
	return res, nil
}

func (g *Gate) relayElicitation(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	ss, err := g.askAgent(ctx, req.Session, ActionElicitation, "elicitation/create",
		func(c *mcp.ClientCapabilities) bool { return c.Elicitation != nil }, req.Params)
	if err != nil {
		return nil, err
	}
	ctx, cancel := g.withDeadline(g.askContext(ctx, req.Session))
	defer cancel()
	res, err := ss.Elicit(ctx, req.Params)
	if err != nil {
		return nil, timedOut(ctx, err)
	}
	return res, nil
}

// askContext is the context to ask the agent in: that of its request
// being forwarded, so the question goes out on its stream, cancelled
// when ctx (the upstream's request) is.
func (g *Gate) askContext(ctx context.Context, cs *mcp.ClientSession) context.Context {
	sctx, _ := g.up.sendContext(ctx, cs)
	if sctx == ctx {
		return ctx
	}
	merged, cancel := context.WithCancel(sctx)
	stop := context.AfterFunc(ctx, cancel)
	context.AfterFunc(merged, func() { stop() })
	return merged
}
