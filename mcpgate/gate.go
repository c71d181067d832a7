package mcpgate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
)

// Fleet is what a Gate needs of gated's fleet client; *fleet.Client has
// it, with every trust check the client makes (the verdict must be for
// exactly the proposal sent, and an approval counts only once the stored
// verdict confirms it).
type Fleet interface {
	ProposeWith(ctx context.Context, p *gated.Proposal, opts ...fleet.ProposeOption) (*gated.Verdict, error)
	AwaitDecision(ctx context.Context, held *gated.Verdict) (*gated.Verdict, error)
}

var _ Fleet = (*fleet.Client)(nil)

// Precheck is gated's policy evaluated in this process, over the bundle
// gated serves, before any review: settled is false when the proposal
// would go on to review, else s is what the gate would decide at the
// policy stage. A Gate asks it two things only: whether a tool's bare
// call is denied outright (to leave the tool out of tools/list), and
// whether a read call may pass without a round trip to gated. A
// precheck can take that pass away, never grant a write: every call it
// does not approve at the policy stage is proposed to gated.
type Precheck func(ctx context.Context, p *gated.Proposal) (s gated.Settled, settled bool, err error)

// ListDenied says what tools/list does with a tool the policy denies
// outright.
type ListDenied string

const (
	// ListHide leaves the tool out (the default): the agent's model
	// never sees it, and a call of it is an unknown tool.
	ListHide ListDenied = "hide"
	// ListMark lists the tool with its description prefixed by the
	// policy's reason; its calls are proposed and refused by gated.
	ListMark ListDenied = "mark"
)

// VerdictMetaKey is the key of the _meta member of every tools/call
// result the gate returns for a proposed call: the verdict's tenant,
// proposal id, outcome, stage and reason.
const VerdictMetaKey = "gated/verdict"

// Config configures a Gate.
type Config struct {
	// Fleet proposes and waits for verdicts, usually a *fleet.Client.
	// Required.
	Fleet Fleet
	// Upstream is a session with the MCP server the gate fronts: New
	// lists its tools, and the first agent session forwards over it.
	// Required unless Dial is set, which then connects it.
	Upstream *mcp.ClientSession
	// Dial connects a new session with the upstream server, with the
	// client options the gate gives. Each agent session but the first
	// gets one of its own, closed when the agent's session ends; without
	// Dial, a gate serves one agent session only (RunStdio). The
	// transport is returned too when it is a CommandTransport, which
	// relays reads (Relay). version is the protocol version to ask the
	// upstream for, "" for the newest. Dialer.Dial is one.
	Dial func(ctx context.Context, opts *mcp.ClientOptions, version string) (*mcp.ClientSession, *CommandTransport, error)
	// CallTimeout bounds every request forwarded to the upstream server,
	// and the connecting of an upstream session: a request not answered
	// in time is an error to the agent, never a hang. Default
	// DefaultCallTimeout.
	CallTimeout time.Duration
	// MaxSessions bounds the agent sessions ServeHTTP serves at once,
	// each with an upstream session (with a command, a process) of its
	// own: a new session over it is refused with HTTP 503 and a
	// JSON-RPC error, and nothing is connected for it. Default
	// DefaultMaxSessions.
	MaxSessions int
	// SessionIdleTimeout ends an agent session of ServeHTTP that has
	// had no request in flight for this long, and its upstream session
	// with it. Default DefaultSessionIdleTimeout.
	SessionIdleTimeout time.Duration
	// Tenant is the tenant token, [a-z0-9_-]{1,64}. Required.
	Tenant string
	// Agent is requested_by.agent of every proposal. Required.
	Agent string
	// Session is requested_by.session; default the MCP session's id.
	Session string
	// Catalog holds the operator's per-tool overrides. Optional.
	Catalog *Catalog
	// Precheck is the local policy evaluation. Without one every read
	// call is proposed too, and tools/list hides nothing.
	Precheck Precheck
	// ProposeReads proposes read calls too, even those the precheck
	// approves, so that every call is decided and audited by gated, at
	// the cost of a round trip per read.
	ProposeReads bool
	// ListDenied is ListHide (default) or ListMark.
	ListDenied ListDenied
	// Wait bounds how long a call waits for its verdict, a held one's
	// operator decision excepted (that waits until the hold's deadline
	// and a minute more). Default fleet.DefaultWait (90 s).
	Wait time.Duration
	// Version is the version the gate reports to its agent.
	Version string
	// Log receives one line per decided call. Default: no logging.
	Log *zap.Logger
	// Grants verifies the grant of every approval against the call,
	// uses it with gated, and reports the call's outcome (started,
	// succeeded, failed: a result with isError is failed). An approval
	// whose grant is missing, does not verify or is spent is not
	// forwarded. Required unless NoGrantCheck.
	Grants *fleet.Grants
	// NoGrantCheck forwards approvals without their grant checked: for
	// a gated that issues no grants. Never in production.
	NoGrantCheck bool
	// Relay is the transport Upstream was connected over, when it is a
	// CommandTransport: RunStdio then relays the read calls that need no
	// round trip to gated over it itself, beside the SDK. Optional.
	Relay *CommandTransport
}

// Gate is an MCP server that fronts an upstream MCP server's tools with
// gated. Build it with New, serve its Server over any MCP transport.
type Gate struct {
	cfg    Config
	tools  atomic.Pointer[[]*gatedTool]
	server *mcp.Server
	// offered are the tools tools/list shows and the policy does not
	// deny outright, by name: the tools RunStdio may relay a read of.
	offered atomic.Pointer[map[string]*gatedTool]
	impl    *mcp.Implementation
	// ready is set once New has built the server: what the upstream
	// sends before is not relayed.
	ready atomic.Bool
	// toolsMu serialises offer.
	toolsMu sync.Mutex
	up      *upstreams

	// targets serialises the decisions on one target (see decideAlone).
	mu      sync.Mutex
	targets map[string]*targetTurn
}

// targetTurn is the turn of the calls waiting to be decided on one
// target: a channel of one slot, and how many calls hold or want it.
type targetTurn struct {
	slot    chan struct{}
	waiting int
}

// gatedTool is one upstream tool as the gate offers it.
type gatedTool struct {
	spec    *mcp.Tool
	mapping Mapping
	// denied is the policy's refusal of the tool's bare call, nil when
	// the policy does not deny it outright.
	denied *gated.Settled
}

// Listed is one upstream tool as New mapped it: its mapping, and the
// policy's refusal when it denies the tool outright.
type Listed struct {
	Mapping Mapping
	// Denied is the policy's reason when it denies the tool's bare call,
	// "" otherwise.
	Denied string
	// Hidden is true when tools/list leaves the tool out.
	Hidden bool
}

// New lists the upstream server's tools, maps each onto a proposal,
// asks the precheck which the policy denies outright, and builds the
// gate's MCP server. It refuses to start when two tools map onto one
// action (ErrActionCollision), when the catalog names a tool the
// upstream does not offer or the reason argument is one of a tool's own
// (ErrInvalidCatalog), when the configuration is unusable
// (ErrInvalidConfig), or when the upstream or the precheck fails.
func New(ctx context.Context, cfg Config) (*Gate, error) {
	switch {
	case cfg.Fleet == nil:
		return nil, fmt.Errorf("%w: no fleet client", ErrInvalidConfig)
	case cfg.Upstream == nil && cfg.Dial == nil:
		return nil, fmt.Errorf("%w: no upstream MCP session and no Dial", ErrInvalidConfig)
	case cfg.Grants == nil && !cfg.NoGrantCheck:
		return nil, fmt.Errorf("%w: no grants to check approvals with (fleet.NewGrants), and NoGrantCheck is not set", ErrInvalidConfig)
	case !gated.ValidTenant(cfg.Tenant):
		return nil, fmt.Errorf("%w: tenant %q must match [a-z0-9_-]{1,64}", ErrInvalidConfig, cfg.Tenant)
	case strings.TrimSpace(cfg.Agent) == "":
		return nil, fmt.Errorf("%w: an agent name is required (requested_by.agent)", ErrInvalidConfig)
	}
	switch cfg.ListDenied {
	case "":
		cfg.ListDenied = ListHide
	case ListHide, ListMark:
	default:
		return nil, fmt.Errorf("%w: list-denied %q: want hide or mark", ErrInvalidConfig, cfg.ListDenied)
	}
	if cfg.Wait <= 0 {
		cfg.Wait = fleet.DefaultWait
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.SessionIdleTimeout <= 0 {
		cfg.SessionIdleTimeout = DefaultSessionIdleTimeout
	}
	g := &Gate{targets: map[string]*targetTurn{}}
	g.up = &upstreams{timeout: cfg.CallTimeout, byPeer: map[*mcp.ServerSession]*upstreamSlot{}, peers: map[*mcp.ClientSession]*mcp.ServerSession{},
		active: map[*mcp.ServerSession][]context.Context{}}
	if cfg.Upstream == nil {
		dctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
		up, relay, err := cfg.Dial(dctx, g.clientOptions(), listingProtocol)
		cancel()
		if err != nil {
			return nil, err
		}
		cfg.Upstream = up
		if cfg.Relay == nil {
			cfg.Relay = relay
		}
	}
	g.up.first = cfg.Upstream
	if cfg.Dial != nil {
		g.up.dial = func(ctx context.Context, ss *mcp.ServerSession) (*mcp.ClientSession, error) {
			cs, _, err := cfg.Dial(ctx, g.clientOptions(), agentProtocol(ss))
			return cs, err
		}
	}
	if cfg.Relay != nil && cfg.Relay.connection() == nil {
		return nil, fmt.Errorf("%w: the relay transport is not connected: connect Upstream over it", ErrInvalidConfig)
	}
	g.cfg = cfg
	tools, err := g.listTools(ctx)
	if err != nil {
		return nil, err
	}
	g.impl = g.implementation()
	g.server = mcp.NewServer(g.impl, g.serverOptions())
	g.server.AddReceivingMiddleware(g.passThrough)
	if err := g.offer(tools); err != nil {
		return nil, err
	}
	g.ready.Store(true)
	return g, nil
}

// Upstream is the upstream session New listed the tools of.
func (g *Gate) Upstream() *mcp.ClientSession { return g.cfg.Upstream }

// Server is the gate's MCP server, to serve over stdio or streamable
// HTTP.
func (g *Gate) Server() *mcp.Server { return g.server }

// Tools describes each upstream tool as the gate maps and lists it, in
// the upstream server's order.
func (g *Gate) Tools() []Listed {
	tools := *g.tools.Load()
	out := make([]Listed, len(tools))
	for i, gt := range tools {
		out[i] = Listed{Mapping: gt.mapping}
		if gt.denied != nil {
			out[i].Denied = gt.denied.Reason
			out[i].Hidden = g.cfg.ListDenied == ListHide
		}
	}
	return out
}

// addTool registers a tool, turning the SDK's panics on a malformed
// schema into an error.
func addTool(s *mcp.Server, t *mcp.Tool, h mcp.ToolHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("offering upstream tool %q: %v", t.Name, r)
		}
	}()
	s.AddTool(t, h)
	return nil
}

// advertised is the tool as the gate lists it: the upstream tool with
// the reason argument added to its input schema, so the agent's model
// knows it may say why.
func advertised(t *mcp.Tool, m Mapping) (*mcp.Tool, error) {
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("reading the input schema of upstream tool %q: %w", t.Name, err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil || schema == nil || schema["type"] != "object" {
		return nil, fmt.Errorf("upstream tool %q: its input schema is not a JSON Schema of type object", t.Name)
	}
	props, _ := schema["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	if _, taken := props[m.ReasonArgument]; taken {
		return nil, fmt.Errorf("%w: upstream tool %q has an argument %q of its own, which the gate would take as the reason and strip: set reason_argument to another name", ErrInvalidCatalog, t.Name, m.ReasonArgument)
	}
	props[m.ReasonArgument] = map[string]any{
		"type":        "string",
		"description": "Why you want this call, for gated's reviewer. Not passed to the tool.",
	}
	schema["properties"] = props
	out := *t
	out.InputSchema = schema
	return &out, nil
}

// bareProposal is the proposal of a call of m with no arguments, which
// tools/list asks the policy about.
func (g *Gate) bareProposal(m Mapping) *gated.Proposal {
	target := map[string]any{}
	for k, v := range m.TargetFixed {
		target[k] = v
	}
	return g.proposal(m, Call{Target: target}, "tools-list", nil)
}

// proposal builds the proposal of one call in session ss (nil for none).
func (g *Gate) proposal(m Mapping, c Call, id string, ss *mcp.ServerSession) *gated.Proposal {
	session := g.cfg.Session
	client := "an MCP client"
	if ss != nil {
		if session == "" {
			session = ss.ID()
		}
		if ip := ss.InitializeParams(); ip != nil && ip.ClientInfo != nil {
			client = strings.TrimSpace("MCP client " + ip.ClientInfo.Name + " " + ip.ClientInfo.Version)
		}
	}
	reason := c.Reason
	if strings.TrimSpace(reason) == "" {
		reason = fmt.Sprintf("%s called tool %s through gated mcp without a %s argument", client, m.Tool, m.ReasonArgument)
	}
	return &gated.Proposal{
		V:              gated.SchemaVersion,
		ID:             id,
		Tenant:         g.cfg.Tenant,
		Kind:           gated.KindAction,
		Action:         m.Action,
		Class:          m.Class,
		Target:         c.Target,
		Arguments:      c.Arguments,
		Reason:         reason,
		BlastRadius:    m.BlastRadius,
		RequestedBy:    &gated.RequestedBy{Agent: g.cfg.Agent, Session: session},
		ContextSummary: fmt.Sprintf("MCP tools/call %s from %s, through gated mcp (class %s from %s).", m.Tool, client, m.Class, m.ClassFrom),
		Reviewer:       m.Reviewer,
		Labels:         m.Labels,
	}
}

// handler is the tools/call handler of one tool.
func (g *Gate) handler(gt *gatedTool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		m := gt.mapping
		id := newProposalID()
		call, err := m.Read(req.Params.Arguments)
		if err != nil {
			g.refuseArguments(ctx, m, id, err)
			return refusal(fmt.Sprintf("gated refused the call of %s: %v. The call was not made.", m.Tool, err), nil), nil
		}
		p := g.proposal(m, call, id, req.Session)
		if g.approvedHere(ctx, p) {
			return g.forward(ctx, req, m, call, nil)
		}
		v, err := g.decideAlone(ctx, req, p)
		key := p.Tenant + "." + p.ID
		if err != nil {
			g.cfg.Log.Info("call not approved", zap.String("tool", m.Tool), zap.String("proposal", key), zap.Error(err))
			return notApproved(m.Tool, key, v, err), nil
		}
		g.cfg.Log.Info("call approved", zap.String("tool", m.Tool), zap.String("proposal", key))
		gid, refused := g.takeGrant(ctx, m, p, v)
		if refused != nil {
			return refused, nil
		}
		res, ferr := g.forward(ctx, req, m, call, v)
		g.finish(ctx, p, gid, res)
		return res, ferr
	}
}

// approvedHere reports whether p, a call's proposal, may go upstream
// without a round trip: a read the policy approves at its own stage, which
// gated would approve without a reviewer. Anything else (a deny, a class
// the policy's catalog does not believe, a hold, an error) goes to gated,
// which decides and audits it. So does a labelled read: its labels join
// its agent's flow state only when gated sees its grant used, and a read
// decided here uses none, so a later egress would not see it.
func (g *Gate) approvedHere(ctx context.Context, p *gated.Proposal) bool {
	if p.Class != gated.ClassRead || g.cfg.Precheck == nil || g.cfg.ProposeReads || len(p.Labels) > 0 {
		return false
	}
	s, settled, err := g.cfg.Precheck(ctx, p)
	return err == nil && settled && s.Outcome == gated.OutcomeApproved
}

// decideAlone decides p once no other call of this gate on the same
// tenant and target is being decided. gated's rules on a target's recent
// changes (parallel_operation, target_cooldown) read the verdicts stored
// before a proposal is decided; two proposals on one target decided at
// the same time would each miss the other's approval, and an agent that
// sends two calls at once would get both approved. Taking the target's
// turn until the verdict is in makes the second proposal see the first.
// Calls from other gated mcp processes or other fleets are not ordered by
// this.
func (g *Gate) decideAlone(ctx context.Context, req *mcp.CallToolRequest, p *gated.Proposal) (*gated.Verdict, error) {
	target, err := json.Marshal(p.Target) // map keys sorted: one key per target
	if err != nil {
		return nil, fmt.Errorf("encoding the target of %s: %w", p.Action, err)
	}
	key := p.Tenant + "\x00" + string(target)
	g.mu.Lock()
	turn := g.targets[key]
	if turn == nil {
		turn = &targetTurn{slot: make(chan struct{}, 1)}
		g.targets[key] = turn
	}
	turn.waiting++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		if turn.waiting--; turn.waiting == 0 {
			delete(g.targets, key)
		}
		g.mu.Unlock()
	}()
	select {
	case turn.slot <- struct{}{}:
		defer func() { <-turn.slot }()
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: waiting for another call on the same target to be decided: %v", fleet.ErrNoVerdict, ctx.Err())
	}
	return g.decide(ctx, req, p)
}

// decide proposes p and waits for its final verdict, reporting progress
// to the caller when it sent a progress token. The error is nil only for
// an approval of exactly p.
func (g *Gate) decide(ctx context.Context, req *mcp.CallToolRequest, p *gated.Proposal) (*gated.Verdict, error) {
	wctx, cancel := context.WithTimeout(ctx, g.cfg.Wait)
	defer cancel()
	var opts []fleet.ProposeOption
	// The status subject is followed only for a caller that asked for
	// progress: it costs a subscription per call.
	if progress := progressReporter(ctx, req); progress != nil {
		progress("proposed to gated as " + p.Tenant + "." + p.ID)
		opts = append(opts, fleet.WithStatus(func(u fleet.StatusUpdate) {
			if u.Status != nil {
				progress(statusLine(u.Status))
			}
		}))
	}
	v, err := g.cfg.Fleet.ProposeWith(wctx, p, opts...)
	if errors.Is(err, fleet.ErrAwaitingOperator) {
		// Held for an operator: not final. Wait for the signed decision
		// or the deadline, bounded by the hold itself.
		v, err = g.cfg.Fleet.AwaitDecision(ctx, v)
		if err == nil {
			err = fleet.CheckVerdict(v)
		}
	}
	if err != nil {
		return v, err
	}
	// Trust nothing but an approval of exactly this proposal.
	if v.Tenant != p.Tenant || v.ProposalID != p.ID || v.Action != p.Action {
		return nil, fmt.Errorf("%w: the approval names %s.%s (%s), not proposal %s.%s (%s)",
			fleet.ErrNotApproved, v.Tenant, v.ProposalID, v.Action, p.Tenant, p.ID, p.Action)
	}
	return v, nil
}

// newProposalID returns a fresh proposal id: mcp-, a millisecond
// timestamp in base 36 (ids sort by time) and 64 random bits.
func newProposalID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "mcp-" + strconv.FormatInt(time.Now().UnixMilli(), 36) + "-" + hex.EncodeToString(b[:])
}
