package mcpgate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
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
// (nil for none); ctx bounds the connecting. A started server lives
// until the session is closed. The transport is returned too when it is
// a CommandTransport, which can relay reads (Config.Relay).
func (d Dialer) Dial(ctx context.Context, opts *mcp.ClientOptions) (*mcp.ClientSession, *CommandTransport, error) {
	var (
		transport mcp.Transport
		relay     *CommandTransport
	)
	if d.URL != "" {
		transport = &mcp.StreamableClientTransport{Endpoint: d.URL}
	} else {
		server := exec.Command(d.Command[0], d.Command[1:]...)
		server.Stderr = d.Stderr
		relay = &CommandTransport{Command: server}
		transport = relay
	}
	upstream, err := mcp.NewClient(&mcp.Implementation{Name: "gated-mcp", Version: d.Version}, opts).Connect(ctx, transport, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to the upstream MCP server: %w", err)
	}
	return upstream, relay, nil
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
			go func() {
				_ = ss.Wait()
				u.mu.Lock()
				delete(u.byPeer, ss)
				u.mu.Unlock()
			}()
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
	go func() {
		_ = ss.Wait()
		_ = slot.cs.Close()
		u.mu.Lock()
		delete(u.byPeer, ss)
		u.mu.Unlock()
	}()
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

// clientOptions are the options of every upstream session the gate
// connects.
func (g *Gate) clientOptions() *mcp.ClientOptions {
	return &mcp.ClientOptions{}
}
