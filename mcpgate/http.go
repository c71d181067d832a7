package mcpgate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
func HTTPHandler(server *mcp.Server) http.Handler {
	next := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	return http.NewCrossOriginProtection().Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, mcp.DefaultMaxRequestBodyBytes+1))
		_ = r.Body.Close()
		var lerr *LineError
		switch {
		case err != nil:
			lerr = &LineError{Code: jsonrpc.CodeParseError, Message: fmt.Sprintf("parse error: reading the request body: %v", err)}
		case len(body) > mcp.DefaultMaxRequestBodyBytes:
			lerr = &LineError{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("invalid request: body longer than %d bytes", mcp.DefaultMaxRequestBodyBytes)}
		default:
			_, lerr = DecodeLine(body)
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
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	}))
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
	mux.Handle("/mcp", HTTPHandler(g.server))
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
