//go:build unix

package mcpgate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serveGate serves g over streamable HTTP on a free loopback port until
// the test ends, and returns its endpoint.
func serveGate(t *testing.T, g *Gate) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.ServeHTTP(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String() + "/mcp"
}

// httpAgent connects an agent session to the gate at url.
func httpAgent(ctx context.Context, url string) (*mcp.ClientSession, error) {
	return mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
}

func mustHTTPAgent(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	cs, err := httpAgent(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// eventually waits until ok holds, failing the test with what when it
// does not within a generous deadline.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHTTPSessionCap: an agent session over Config.MaxSessions is
// refused with 503 and a JSON-RPC error, and no upstream session is
// connected for it; a session that ends frees its place.
func TestHTTPSessionCap(t *testing.T) {
	u := newSessionUpstream()
	var dials atomic.Int64
	dial := func(ctx context.Context, opts *mcp.ClientOptions, version string) (*mcp.ClientSession, *CommandTransport, error) {
		dials.Add(1)
		return u.dial(ctx, opts, version)
	}
	g := sessionGate(t, u, Config{Dial: dial, MaxSessions: 2})
	url := serveGate(t, g)
	a, b := mustHTTPAgent(t, url), mustHTTPAgent(t, url)
	callText(t, a, "whoami")
	callText(t, b, "whoami")
	before := dials.Load()

	if c, err := httpAgent(t.Context(), url); err == nil {
		_ = c.Close()
		t.Fatal("a third agent session was served with MaxSessions 2")
	}
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewBufferString(init))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || err != nil || body.Error.Code != codeTooManySessions || resp.Header.Get("Mcp-Session-Id") != "" {
		t.Fatalf("an initialize over the cap: HTTP %d, session %q, body %+v (%v); want 503 and error %d", resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), body, err, codeTooManySessions)
	}
	if n := dials.Load(); n != before {
		t.Fatalf("%d upstream sessions dialed for refused agent sessions", n-before)
	}
	if n := u.sessions.Load(); n != 2 {
		t.Fatalf("%d upstream sessions open, want 2", n)
	}

	_ = b.Close()
	var c *mcp.ClientSession
	eventually(t, "the place of an ended agent session was never freed", func() bool {
		c, err = httpAgent(t.Context(), url)
		return err == nil
	})
	defer func() { _ = c.Close() }()
	callText(t, c, "whoami")
}

// TestHTTPSessionIdle: an agent session with no request for
// Config.SessionIdleTimeout is ended, and its upstream session with it.
func TestHTTPSessionIdle(t *testing.T) {
	u := newSessionUpstream()
	g := sessionGate(t, u, Config{Dial: u.dial, SessionIdleTimeout: time.Second})
	url := serveGate(t, g)
	a, b := mustHTTPAgent(t, url), mustHTTPAgent(t, url)
	callText(t, a, "whoami")
	callText(t, b, "whoami")
	// a's upstream session is Config.Upstream, which lives as long as
	// the gate; b's own ends with b.
	eventually(t, "an idle agent session's upstream session was never closed", func() bool { return u.sessions.Load() == 1 })
	if _, err := b.CallTool(t.Context(), &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}}); err == nil {
		t.Fatal("an agent session that idled out still answers")
	}
}

// TestHTTPSessionEndStopsUpstreamProcess: the upstream server process
// of an agent session is gone once the agent ends its session.
func TestHTTPSessionEndStopsUpstreamProcess(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(runAsUpstreamEnv, "1")
	d := Dialer{Command: []string{exe, "-test.run=^$", t.TempDir() + "/calls.jsonl"}, Stderr: os.Stderr}
	var (
		mu   sync.Mutex
		pids []int
	)
	dial := func(ctx context.Context, opts *mcp.ClientOptions, version string) (*mcp.ClientSession, *CommandTransport, error) {
		cs, tr, err := d.Dial(ctx, opts, version)
		if err == nil {
			mu.Lock()
			pids = append(pids, tr.Command.Process.Pid)
			mu.Unlock()
		}
		return cs, tr, err
	}
	g := sessionGate(t, nil, Config{Dial: dial})
	url := serveGate(t, g)
	a, b := mustHTTPAgent(t, url), mustHTTPAgent(t, url)
	echo := func(cs *mcp.ClientSession) {
		t.Helper()
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"host": "h"}})
		if err != nil || res.IsError {
			t.Fatalf("echo: %v %+v", err, res)
		}
	}
	echo(a)
	echo(b)
	mu.Lock()
	if len(pids) != 2 {
		t.Fatalf("%d upstream processes, want 2", len(pids))
	}
	pid := pids[1]
	mu.Unlock()
	_ = b.Close()
	eventually(t, "the upstream process of an ended agent session still runs", func() bool {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	})
	echo(a)
}
