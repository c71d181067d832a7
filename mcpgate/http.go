package mcpgate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
)

// DefaultMaxSessions is Config.MaxSessions when it is zero.
const DefaultMaxSessions = 64

// DefaultSessionIdleTimeout is Config.SessionIdleTimeout when it is zero.
const DefaultSessionIdleTimeout = 30 * time.Minute

// codeTooManySessions is the JSON-RPC error code of a new session
// refused over Config.MaxSessions: one of the codes JSON-RPC leaves to
// the server.
const codeTooManySessions = -32000

// HTTPHandler serves server over MCP's streamable HTTP transport. Each
// POSTed message is read as StdioTransport reads a line first: a body
// that is not a well-formed JSON-RPC 2.0 message gets 400 Bad Request
// with a JSON-RPC error as its body (the SDK's handler answers such a
// body in plain text), and never reaches the server.
//
// The SDK's handler refuses a request that arrives on a loopback address
// with a Host that is not a loopback name (DNS rebinding), and a
// cross-origin request from a browser (a page the agent's user visits)
// is refused before anything is read.
//
// At most maxSessions agent sessions are served at once: a request that
// would start one more gets 503 Service Unavailable with a JSON-RPC
// error, and no session. A session with no request in flight for idle
// is ended, and with it its upstream session.
func HTTPHandler(server *mcp.Server, maxSessions int, idle time.Duration) http.Handler {
	next := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{SessionTimeout: idle})
	places := &sessionPlaces{server: server, free: maxSessions}
	return http.NewCrossOriginProtection().Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, mcp.DefaultMaxRequestBodyBytes+1))
		_ = r.Body.Close()
		var (
			msg  jsonrpc.Message
			lerr *LineError
		)
		switch {
		case err != nil:
			lerr = &LineError{Code: jsonrpc.CodeParseError, Message: fmt.Sprintf("parse error: reading the request body: %v", err)}
		case len(body) > mcp.DefaultMaxRequestBodyBytes:
			lerr = &LineError{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("invalid request: body longer than %d bytes", mcp.DefaultMaxRequestBodyBytes)}
		default:
			msg, lerr = DecodeLine(body)
		}
		if lerr != nil {
			// A response to a message the server did not accept carries
			// no id (streamable HTTP transport).
			lerr.ID = nil
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write(lerr.Response())
			return
		}
		if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "initialize" && r.Header.Get(sessionIDHeader) == "" {
			// An initialize without a session id starts a session (the
			// SDK ends one started by any other message with its
			// request).
			if !places.take() {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write((&LineError{Code: codeTooManySessions, Message: fmt.Sprintf(
					"too many sessions: the gate serves at most %d agent sessions at once; end one, or wait for one to idle out", maxSessions)}).Response())
				return
			}
			defer func() { places.hold(w.Header().Get(sessionIDHeader)) }()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	}))
}

// sessionIDHeader names the session of a streamable HTTP request.
const sessionIDHeader = "Mcp-Session-Id"

// sessionPlaces counts the agent sessions of HTTPHandler: a place is
// taken before a session can start, and freed when the session ends,
// or at once when none started.
type sessionPlaces struct {
	server *mcp.Server
	mu     sync.Mutex
	free   int
}

// take takes a place, false when there is none.
func (p *sessionPlaces) take() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free <= 0 {
		return false
	}
	p.free--
	return true
}

// hold keeps a taken place until the session with id ends: at once
// when there is none ("", or already ended).
func (p *sessionPlaces) hold(id string) {
	if id != "" {
		for ss := range p.server.Sessions() {
			if ss.ID() == id {
				go func() {
					_ = ss.Wait()
					p.give()
				}()
				return
			}
		}
	}
	p.give()
}

func (p *sessionPlaces) give() {
	p.mu.Lock()
	p.free++
	p.mu.Unlock()
}

// RunHTTP serves the gate over streamable HTTP at http://addr/mcp until
// ctx ends.
func (g *Gate) RunHTTP(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	return g.ServeHTTP(ctx, ln)
}

// ServeHTTP serves the gate over streamable HTTP at /mcp on ln until ctx
// ends.
func (g *Gate) ServeHTTP(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/mcp", HTTPHandler(g.server, g.cfg.MaxSessions, g.cfg.SessionIdleTimeout))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	g.cfg.Log.Info("serving MCP over streamable HTTP", zap.String("url", "http://"+ln.Addr().String()+"/mcp"))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
