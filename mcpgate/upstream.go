package mcpgate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultCallTimeout bounds a request forwarded to the upstream server
// when Config.CallTimeout is zero.
const DefaultCallTimeout = 2 * time.Minute

// ErrUpstreamTimeout is wrapped by the error of a forwarded request the
// upstream server did not answer within Config.CallTimeout.
var ErrUpstreamTimeout = errors.New("the upstream MCP server did not answer in time")

// Dialer connects to the MCP server a gate fronts: over streamable HTTP
// at URL when it is set, else a server it starts with Command (its
// standard error to Stderr), once per session.
type Dialer struct {
	URL     string
	Command []string
	Stderr  io.Writer
	Version string
}

// Dial connects one new upstream session with the client options opts
// (nil for none), asking for protocol version (the newest when "");
// ctx bounds the connecting. A started server lives
// until the session is closed. The transport is returned too when it is
// a CommandTransport, which can relay reads (Config.Relay).
func (d Dialer) Dial(ctx context.Context, opts *mcp.ClientOptions, version string) (*mcp.ClientSession, *CommandTransport, error) {
	var (
		transport mcp.Transport
		relay     *CommandTransport
	)
	sink := newNoteSink(opts)
	if d.URL != "" {
		transport = &mcp.StreamableClientTransport{Endpoint: d.URL, HTTPClient: &http.Client{Transport: &sseTap{base: http.DefaultTransport, sink: sink}}}
	} else {
		server := exec.Command(d.Command[0], d.Command[1:]...)
		server.Stderr = d.Stderr
		relay = &CommandTransport{Command: server}
		transport = &orderedNotes{Transport: relay, sink: sink}
	}
	upstream, err := mcp.NewClient(&mcp.Implementation{Name: "gated-mcp", Version: d.Version}, sink.options()).Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to the upstream MCP server: %w", err)
	}
	sink.session.Store(upstream)
	return upstream, relay, nil
}

// listingProtocol is the protocol version of Config.Upstream when the
// gate dials it: the newest whose server may ask its client things
// (sampling, elicitation, log messages) in the middle of a call, which
// later versions ask by other means. The first agent session forwards
// over it.
const listingProtocol = "2025-11-25"

// agentProtocol is the protocol version agent session ss asked for, to
// ask the upstream for the same: "" (the newest) when it asked for none
// the SDK supports.
func agentProtocol(ss *mcp.ServerSession) string {
	if ss == nil || ss.InitializeParams() == nil {
		return ""
	}
	v := ss.InitializeParams().ProtocolVersion
	if !slices.Contains(mcp.SupportedProtocolVersions(), v) {
		return ""
	}
	return v
}

// upstreams holds the upstream session of each agent session: one each,
// never shared, so that what an agent sets in its session (a log level,
// a subscription) stays its own.
type upstreams struct {
	// dial connects a new upstream session for an agent session; nil
	// when the gate has only first, for one agent session.
	dial func(ctx context.Context, ss *mcp.ServerSession) (*mcp.ClientSession, error)
	// timeout bounds a dial.
	timeout time.Duration

	mu sync.Mutex
	// first is Config.Upstream until an agent session takes it.
	first  *mcp.ClientSession
	byPeer map[*mcp.ServerSession]*upstreamSlot
	// peers are the agent sessions of the upstream sessions.
	peers map[*mcp.ClientSession]*mcp.ServerSession
	// active are the contexts of the agent's requests being forwarded,
	// by agent session: what the upstream sends meanwhile is sent in
	// one, so that over streamable HTTP it goes out on that request's
	// stream, as the upstream sent it on its own.
	active map[*mcp.ServerSession][]context.Context
}

// during notes that ctx is the context of a request of ss being
// forwarded, until the returned function is called.
func (u *upstreams) during(ss *mcp.ServerSession, ctx context.Context) func() {
	u.mu.Lock()
	u.active[ss] = append(u.active[ss], ctx)
	u.mu.Unlock()
	return func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		list := u.active[ss]
		for i, c := range list {
			if c == ctx {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(u.active, ss)
		} else {
			u.active[ss] = list
		}
	}
}

// sendContext is the context to send what upstream session cs sent to
// its agent session in: the latest request of that session being
// forwarded, else ctx. ss is nil when cs serves no agent session.
func (u *upstreams) sendContext(ctx context.Context, cs *mcp.ClientSession) (context.Context, *mcp.ServerSession) {
	u.mu.Lock()
	defer u.mu.Unlock()
	ss := u.peers[cs]
	if list := u.active[ss]; len(list) > 0 {
		return list[len(list)-1], ss
	}
	return ctx, ss
}

// peer is the agent session upstream session cs serves, nil when none.
func (u *upstreams) peer(cs *mcp.ClientSession) *mcp.ServerSession {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.peers[cs]
}

// paired records that cs serves ss, until ss ends.
func (u *upstreams) paired(ss *mcp.ServerSession, cs *mcp.ClientSession, closeUpstream bool) {
	u.mu.Lock()
	u.peers[cs] = ss
	u.mu.Unlock()
	go func() {
		_ = ss.Wait()
		if closeUpstream {
			_ = cs.Close()
		}
		u.mu.Lock()
		delete(u.byPeer, ss)
		delete(u.peers, cs)
		u.mu.Unlock()
	}()
}

// upstreamSlot is an agent session's upstream session, ready once done is
// closed.
type upstreamSlot struct {
	done chan struct{}
	cs   *mcp.ClientSession
	err  error
}

// of returns the upstream session of agent session ss: Config.Upstream
// for the first agent session, and for each later one a session of its
// own from dial, connected on first use and closed when ss ends (an
// error without dial).
func (u *upstreams) of(ctx context.Context, ss *mcp.ServerSession) (*mcp.ClientSession, error) {
	u.mu.Lock()
	slot := u.byPeer[ss]
	if slot != nil {
		u.mu.Unlock()
		select {
		case <-slot.done:
			return slot.cs, slot.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	slot = &upstreamSlot{done: make(chan struct{})}
	u.byPeer[ss] = slot
	first := u.first
	u.first = nil
	u.mu.Unlock()
	defer close(slot.done)
	switch {
	case first != nil:
		slot.cs = first
		if ss != nil {
			u.paired(ss, first, false)
		}
		return first, nil
	case u.dial == nil || ss == nil:
		slot.err = errors.New("the upstream MCP session serves another agent session, and the gate cannot connect one per session (no Config.Dial)")
		return nil, slot.err
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), u.timeout)
	slot.cs, slot.err = u.dial(dctx, ss)
	cancel()
	if slot.err != nil {
		u.mu.Lock()
		delete(u.byPeer, ss) // the next request tries again
		u.mu.Unlock()
		return nil, slot.err
	}
	u.paired(ss, slot.cs, true)
	return slot.cs, nil
}

// withDeadline is ctx bounded by the gate's call timeout.
func (g *Gate) withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, g.cfg.CallTimeout,
		fmt.Errorf("%w: no answer within %s", ErrUpstreamTimeout, g.cfg.CallTimeout))
}

// timedOut is err, worded as a timeout when ctx's deadline caused it.
func timedOut(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, ErrUpstreamTimeout) {
		return cause
	}
	return err
}
