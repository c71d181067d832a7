package mcpgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gated/gated"
)

// Why a relay. The SDK's server hands every request to a new goroutine
// (and a queue goroutine before it), and its client hands every answer
// from the goroutine reading the server's output to the one waiting for
// it. On an idle machine a hand-off costs a few microseconds; on a
// loaded one each waits for a thread to be scheduled, and the five of a
// call through an SDK server and client were most of what gated mcp
// added to a read (docs/BENCHMARKS.md, "gated mcp"). A read that needs
// no round trip to gated is therefore relayed by the goroutine that read
// it from the agent, and its answer by the one that read it from the
// upstream; everything else goes through the SDK as before.

// relayIDPrefix begins the id of every call the relay makes upstream. The
// SDK's client numbers its calls, so a string id is never one of its.
const relayIDPrefix = "gated-relay-"

// CommandTransport starts an MCP server command and talks to it over its
// standard input and output, as the SDK's CommandTransport (which it
// uses) does, and carries the read calls a Gate relays itself beside the
// SDK client's (see Gate.RunStdio). Connect the gate's upstream client
// over it and give it to Config.Relay too.
type CommandTransport struct {
	// Command is the server's command, not yet started. Required.
	Command *exec.Cmd

	conn atomic.Pointer[relayConn]
}

var _ mcp.Transport = (*CommandTransport)(nil)

// Connect starts the command. It may be called once.
func (t *CommandTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	if t.conn.Load() != nil {
		return nil, errors.New("the upstream command transport is already connected")
	}
	inner, err := (&mcp.CommandTransport{Command: t.Command}).Connect(ctx)
	if err != nil {
		return nil, err
	}
	c := &relayConn{Connection: inner, pending: map[jsonrpc.ID]func(*jsonrpc.Response, error){}}
	t.conn.Store(c)
	return c, nil
}

func (t *CommandTransport) connection() *relayConn { return t.conn.Load() }

// relayConn is the SDK's connection to the upstream, with the answers to
// the relay's calls taken out of what the SDK client reads.
type relayConn struct {
	mcp.Connection

	seq atomic.Int64
	// meta is the _meta of the SDK client's calls (protocol 2026-07-28
	// and later name the protocol, the client and its capabilities in
	// each), which the relay's calls carry too, so the upstream answers
	// them as it answers the SDK's; nil when the client sends none.
	meta    atomic.Pointer[json.RawMessage]
	mu      sync.Mutex
	pending map[jsonrpc.ID]func(*jsonrpc.Response, error)
	err     error // set once the connection can carry no more answers
}

// Read returns the next message for the SDK client, answering the
// relay's calls on the way, in this goroutine.
func (c *relayConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			c.failAll(err)
			return nil, err
		}
		resp, ok := msg.(*jsonrpc.Response)
		if !ok {
			return msg, nil
		}
		if done := c.take(resp.ID); done != nil {
			done(resp, nil)
			continue
		}
		if s, ok := resp.ID.Raw().(string); ok && strings.HasPrefix(s, relayIDPrefix) {
			continue // the answer to a relayed call the agent cancelled
		}
		return msg, nil
	}
}

// Write sends the SDK client's message, noting the _meta of its calls.
func (c *relayConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		var p struct {
			Meta json.RawMessage `json:"_meta"`
		}
		if json.Unmarshal(req.Params, &p) == nil && len(p.Meta) > 0 {
			c.meta.Store(&p.Meta)
		}
	}
	return c.Connection.Write(ctx, msg)
}

// newID returns the id of a new relayed call.
func (c *relayConn) newID() jsonrpc.ID {
	id, _ := jsonrpc.MakeID(relayIDPrefix + strconv.FormatInt(c.seq.Add(1), 10)) // a string always makes an id
	return id
}

// call sends tools/call id of tool with the arguments args, and calls
// done once: with the answer (from the goroutine reading the upstream),
// with the error that kept it from being sent or answered, or, when no
// answer came within timeout, with a timeout error (the upstream is then
// told the call is cancelled).
func (c *relayConn) call(ctx context.Context, id jsonrpc.ID, tool string, args json.RawMessage, timeout time.Duration, done func(*jsonrpc.Response, error)) {
	p := struct {
		Meta      json.RawMessage `json:"_meta,omitempty"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}{Name: tool, Arguments: args}
	if m := c.meta.Load(); m != nil {
		p.Meta = *m
	}
	params, err := json.Marshal(p)
	if err != nil {
		done(nil, fmt.Errorf("encoding the call of %s: %w", tool, err))
		return
	}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		done(nil, err)
		return
	}
	var timer *time.Timer
	c.pending[id] = func(resp *jsonrpc.Response, err error) {
		timer.Stop()
		if err != errRelayDropped {
			done(resp, err)
		}
	}
	timer = time.AfterFunc(timeout, func() {
		if d := c.take(id); d != nil {
			d(nil, fmt.Errorf("%w: no answer within %s", ErrUpstreamTimeout, timeout))
			c.tellCancelled(ctx, id, "gated mcp: no answer in time")
		}
	})
	c.mu.Unlock()
	if err := c.Connection.Write(ctx, &jsonrpc.Request{ID: id, Method: "tools/call", Params: params}); err != nil {
		if done := c.take(id); done != nil {
			done(nil, fmt.Errorf("%w: calling \"tools/call\": %v", mcp.ErrConnectionClosed, err))
		}
	}
}

// errRelayDropped, given to a relayed call's done function, drops the
// call without an answer.
var errRelayDropped = errors.New("relayed call dropped")

// cancel gives up relayed call id: its answer, if one comes, is dropped,
// and the upstream is told.
func (c *relayConn) cancel(ctx context.Context, id jsonrpc.ID, reason string) {
	done := c.take(id)
	if done == nil {
		return // answered already
	}
	done(nil, errRelayDropped) // stops the timer; the agent gets no answer
	c.tellCancelled(ctx, id, reason)
}

// tellCancelled tells the upstream that relayed call id is cancelled.
func (c *relayConn) tellCancelled(ctx context.Context, id jsonrpc.ID, reason string) {
	params, err := json.Marshal(mcp.CancelledParams{RequestID: id.Raw(), Reason: reason})
	if err == nil {
		_ = c.Connection.Write(ctx, &jsonrpc.Request{Method: "notifications/cancelled", Params: params})
	}
}

// take removes and returns the relayed call id's done function, nil when
// there is none.
func (c *relayConn) take(id jsonrpc.ID) func(*jsonrpc.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	done := c.pending[id]
	delete(c.pending, id)
	return done
}

// failAll answers every relayed call in flight with err, and every later
// one.
func (c *relayConn) failAll(err error) {
	err = fmt.Errorf("%w: calling \"tools/call\": %v", mcp.ErrConnectionClosed, err)
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	pending := c.pending
	c.pending = map[jsonrpc.ID]func(*jsonrpc.Response, error){}
	c.mu.Unlock()
	for _, done := range pending {
		done(nil, err)
	}
}

// RunStdio serves the gate to one agent over t until the agent ends the
// session or ctx ends, as the SDK's Server.Run does.
//
// With Config.Relay set, a read call that needs no round trip to gated
// is relayed to the upstream by the goroutine that read it, and its
// answer written back by the one that reads the upstream, instead of
// passing through the SDK's server and client: a tools/call, after the
// session was initialized, whose params hold only a name and arguments
// (no _meta: a call asking for progress goes through the SDK), of a tool
// tools/list shows and the policy does not deny outright, that the
// mapping makes a read and whose arguments read cleanly, and that the
// precheck approves at the policy stage. These are the very conditions on
// which the tool's handler lets a read pass; every other request goes
// through the SDK's server and the handler, which decide it as before.
// The agent gets the same result either way.
func (g *Gate) RunStdio(ctx context.Context, t *StdioTransport) error {
	tr := *t
	var session atomic.Pointer[mcp.ServerSession]
	if up := g.relayConn(); up != nil {
		r := &stdioRelay{gate: g, up: up, ctx: ctx, session: &session, inflight: map[jsonrpc.ID]jsonrpc.ID{},
			accepted: map[string]bool{}, asked: map[jsonrpc.ID]string{}}
		tr.pass, tr.answered = r.pass, r.answered
	}
	ss, err := g.server.Connect(ctx, &tr, nil)
	if err != nil {
		return err
	}
	session.Store(ss)
	closed := make(chan error, 1)
	go func() { closed <- ss.Wait() }()
	select {
	case <-ctx.Done():
		_ = ss.Close()
		<-closed
		return ctx.Err()
	case err := <-closed:
		return err
	}
}

// relayConn is the upstream connection RunStdio relays reads over, nil
// when it relays none.
func (g *Gate) relayConn() *relayConn {
	if g.cfg.Relay == nil || g.cfg.Precheck == nil || g.cfg.ProposeReads {
		return nil
	}
	return g.cfg.Relay.connection()
}

// stdioRelay relays the reads of one stdio session.
type stdioRelay struct {
	gate    *Gate
	up      *relayConn
	ctx     context.Context
	session *atomic.Pointer[mcp.ServerSession]

	mu       sync.Mutex
	inflight map[jsonrpc.ID]jsonrpc.ID // the agent's id → the upstream call's
	// accepted are the request _meta objects (as canonical JSON) that the
	// SDK's server accepted in this session, and asked those it is
	// deciding on, by request id. The SDK's checks of a request's _meta
	// depend on nothing else, so a call whose _meta it accepted once is
	// one it would accept again.
	accepted map[string]bool
	asked    map[jsonrpc.ID]string
}

// maxAcceptedMeta bounds how many distinct _meta objects a session's
// relay remembers; calls with others go through the SDK.
const maxAcceptedMeta = 16

// pass relays req when it is a read that needs no round trip, and
// reports whether it did.
func (r *stdioRelay) pass(conn *lineConn, req *jsonrpc.Request, line map[string]any) bool {
	if !req.IsCall() {
		if req.Method == "notifications/cancelled" {
			r.cancelled(req)
		}
		return false // the SDK sees every notification
	}
	if req.Method != "tools/call" {
		return false
	}
	ss := r.session.Load()
	if ss == nil || ss.InitializeParams() == nil {
		return false
	}
	rc, ok := r.gate.readCall(line)
	if !ok {
		return false
	}
	if rc.meta != "" {
		r.mu.Lock()
		accepted := r.accepted[rc.meta]
		if !accepted {
			r.asked[req.ID] = rc.meta
		}
		r.mu.Unlock()
		if !accepted {
			return false
		}
	}
	gt, args := rc.tool, rc.args
	m := gt.mapping
	call, err := m.Read(args)
	if err != nil {
		return false
	}
	if !r.gate.approvedHere(r.ctx, r.gate.proposal(m, call, newProposalID(), ss)) {
		return false
	}
	agentID, upID := req.ID, r.up.newID()
	r.mu.Lock()
	_, dup := r.inflight[agentID]
	if !dup {
		r.inflight[agentID] = upID
	}
	r.mu.Unlock()
	if dup {
		return false // the SDK answers a request whose id is in use
	}
	r.up.call(r.ctx, upID, m.Tool, call.Forward, r.gate.cfg.CallTimeout, func(resp *jsonrpc.Response, err error) {
		r.answer(conn, agentID, upID, m.Tool, rc.newProtocol, resp, err)
	})
	return true
}

// answer writes the answer to relayed call agentID (upstream call upID):
// the upstream's result as the SDK's server would write it, or, when the
// upstream failed, the tool result the handler gives then.
func (r *stdioRelay) answer(conn *lineConn, agentID, upID jsonrpc.ID, tool string, newProtocol bool, resp *jsonrpc.Response, err error) {
	r.mu.Lock()
	if r.inflight[agentID] == upID {
		delete(r.inflight, agentID)
	}
	r.mu.Unlock()
	res := &mcp.CallToolResult{}
	switch {
	case err != nil:
		res = upstreamFailure(tool, nil, err)
	case resp.Error != nil:
		res = upstreamFailure(tool, nil, fmt.Errorf("calling %q: %w", "tools/call", resp.Error))
	default:
		if err := json.Unmarshal(resp.Result, res); err != nil {
			res = upstreamFailure(tool, nil, fmt.Errorf("calling %q: %w", "tools/call", err))
		}
	}
	if res.Content == nil {
		res.Content = []mcp.Content{} // as the SDK's server: never null
	}
	if newProtocol {
		// As the SDK's server answers a call of protocol 2026-07-28 and
		// later: the result names a server, and is complete.
		if _, named := res.Meta[mcp.MetaKeyServerInfo]; !named {
			meta := mcp.Meta{}
			for k, v := range res.Meta {
				meta[k] = v
			}
			meta[mcp.MetaKeyServerInfo] = r.gate.impl
			res.Meta = meta
		}
	}
	out := &jsonrpc.Response{ID: agentID}
	out.Result, err = json.Marshal(res)
	if err == nil && newProtocol {
		out.Result, err = completeResult(out.Result)
	}
	if err != nil {
		out.Result = nil
		out.Error = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("encoding the result of %s: %v", tool, err)}
	}
	_ = conn.Write(r.ctx, out) // an agent that went away reads nothing more
}

// completeResult is the encoded result data with resultType complete.
func completeResult(data []byte) ([]byte, error) {
	var typed struct {
		ResultType string `json:"resultType"`
	}
	if err := json.Unmarshal(data, &typed); err != nil || typed.ResultType == "complete" {
		return data, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, err
	}
	fields["resultType"] = json.RawMessage(`"complete"`)
	return json.Marshal(fields)
}

// answered learns, from the SDK server's answers, which _meta objects it
// accepts.
func (r *stdioRelay) answered(resp *jsonrpc.Response) {
	r.mu.Lock()
	defer r.mu.Unlock()
	meta, ok := r.asked[resp.ID]
	if !ok {
		return
	}
	delete(r.asked, resp.ID)
	if resp.Error == nil && len(r.accepted) < maxAcceptedMeta {
		r.accepted[meta] = true
	}
}

// cancelled passes the agent's cancellation of a relayed call on to the
// upstream.
func (r *stdioRelay) cancelled(req *jsonrpc.Request) {
	var p mcp.CancelledParams
	if json.Unmarshal(req.Params, &p) != nil {
		return
	}
	agentID, err := jsonrpc.MakeID(p.RequestID)
	if err != nil {
		return
	}
	r.mu.Lock()
	upID, ok := r.inflight[agentID]
	delete(r.inflight, agentID)
	r.mu.Unlock()
	if ok {
		r.up.cancel(r.ctx, upID, p.Reason)
	}
}

// readCall is a tools/call line the relay may take.
type readCall struct {
	tool *gatedTool
	args json.RawMessage
	// meta is the params' _meta as canonical JSON, "" when it has none;
	// newProtocol is true when it names a protocol version, which the
	// SDK's server then checks and answers as of 2026-07-28.
	meta        string
	newProtocol bool
}

// relayMetaKeys are the members a relayed call's _meta may have: those
// of a 2026-07-28 request, without a log level or a progress token (a
// call asking for progress goes through the SDK).
var relayMetaKeys = map[string]bool{mcp.MetaKeyProtocolVersion: true, mcp.MetaKeyClientInfo: true, mcp.MetaKeyClientCapabilities: true}

// readCall reads a tools/call line whose params hold a name, arguments
// and a _meta of relayMetaKeys, and nothing else, of a tool the gate
// offers and does not deny outright and the mapping makes a read; ok is
// false for any other.
func (g *Gate) readCall(line map[string]any) (rc readCall, ok bool) {
	params, isObject := line["params"].(map[string]any)
	if !isObject {
		return rc, false
	}
	for k := range params {
		if k != "name" && k != "arguments" && k != "_meta" {
			return rc, false
		}
	}
	if m, present := params["_meta"]; present {
		meta, isObject := m.(map[string]any)
		if !isObject {
			return rc, false
		}
		for k := range meta {
			if !relayMetaKeys[k] {
				return rc, false
			}
		}
		raw, err := json.Marshal(meta) // map keys sorted: one text per object
		if err != nil {
			return rc, false
		}
		rc.meta = string(raw)
		_, rc.newProtocol = meta[mcp.MetaKeyProtocolVersion]
	}
	name, _ := params["name"].(string)
	rc.tool = (*g.offered.Load())[name]
	if rc.tool == nil || rc.tool.mapping.Class != gated.ClassRead {
		return rc, false
	}
	if a, present := params["arguments"]; present && a != nil {
		raw, err := json.Marshal(a)
		if err != nil {
			return rc, false
		}
		rc.args = raw
	}
	return rc, true
}
