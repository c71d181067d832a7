package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/gated/gated/engine/wire"
)

// TestMCPGate puts gated mcp between the Go SDK's MCP client and the
// example MCP server, over stdio and over streamable HTTP, with a real
// gated serve deciding: approved calls reach the server, rejected,
// denied and timed-out ones never do, and the server's own log proves
// it.
func TestMCPGate(t *testing.T) {
	h := startMCPHarness(t)

	transports := []struct {
		note    string
		connect func(t *testing.T, tenant, log string, extra ...string) (*mcp.ClientSession, *progressLog)
	}{
		{"stdio to stdio", func(t *testing.T, tenant, log string, extra ...string) (*mcp.ClientSession, *progressLog) {
			args := append(h.gatedArgs(tenant, extra...), "--", h.ops, "--log", log)
			return connectMCP(t, &mcp.CommandTransport{Command: gatedCommand(t, args...)})
		}},
		{"streamable HTTP to streamable HTTP", func(t *testing.T, tenant, log string, extra ...string) (*mcp.ClientSession, *progressLog) {
			opsAddr := freeTCPAddr(t)
			ops := exec.Command(h.ops, "--http", opsAddr, "--log", log)
			ops.Stderr = os.Stderr
			if err := ops.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ops.Process.Kill(); _ = ops.Wait() })
			waitHTTP(t, "http://"+opsAddr+"/mcp")
			listen := freeTCPAddr(t)
			args := append(h.gatedArgs(tenant, extra...), "--listen", listen, "--upstream", "http://"+opsAddr+"/mcp")
			gated := gatedCommand(t, args...)
			if err := gated.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = gated.Process.Kill(); _ = gated.Wait() })
			waitHTTP(t, "http://"+listen+"/mcp")
			return connectMCP(t, &mcp.StreamableClientTransport{Endpoint: "http://" + listen + "/mcp"})
		}},
	}
	for i, tr := range transports {
		t.Run(tr.note, func(t *testing.T) {
			// Each transport restarts its own services: parallel_operation
			// would deny a second restart of one target.
			host := []string{"web-1", "web-2"}[i]
			t.Run("acme: read passes, approved restart reaches the server, rejected drop does not", func(t *testing.T) {
				log := filepath.Join(t.TempDir(), "calls.jsonl")
				cs, progress := tr.connect(t, "acme", log)
				if got, want := toolNames(t, cs), []string{"drop_table", "list_services", "restart_service"}; !slices.Equal(got, want) {
					t.Fatalf("tools/list: got %v, want %v", got, want)
				}

				res := callTool(t, cs, "list_services", map[string]any{"host": "web-1"}, "")
				if res.IsError {
					t.Fatalf("list_services: %s", resultText(res))
				}
				if !strings.Contains(resultText(res), "nginx") {
					t.Errorf("list_services answered %q, want the services of web-1", resultText(res))
				}
				if v := verdictOf(t, res); v["decided"] != "locally" || v["outcome"] != "approved" || v["audit"] != "pending" {
					t.Errorf("the read was not decided locally: %v", v)
				} else {
					h.waitLocalDecided(t, v["proposal_id"].(string))
				}

				res = callTool(t, cs, "restart_service", map[string]any{"host": host, "service": "nginx", "_reason": "nginx leaks memory"}, "restart-1")
				if res.IsError {
					t.Fatalf("restart_service was not approved: %s", resultText(res))
				}
				if v := verdictOf(t, res); v["outcome"] != "approved" || v["tenant"] != "acme" {
					t.Errorf("restart_service's verdict: %v", v)
				}
				msgs := progress.all()
				if !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, "review started by") }) {
					t.Errorf("progress notifications %q do not say the review started", msgs)
				}

				res = callTool(t, cs, "drop_table", map[string]any{"database": "orders", "table": "customers-" + host, "_reason": "cleanup"}, "")
				if !res.IsError {
					t.Fatalf("drop_table was not refused: %s", resultText(res))
				}
				v := verdictOf(t, res)
				if v["outcome"] != "rejected" || v["stage"] != "review" {
					t.Errorf("drop_table's verdict: %v, want rejected at review", v)
				}
				if text := resultText(res); !strings.Contains(text, "acme."+v["proposal_id"].(string)) || !strings.Contains(text, v["reason"].(string)) {
					t.Errorf("refusal text %q does not carry the verdict's reason and id", text)
				}

				calls := readOpsLog(t, log)
				var tools []string
				for _, c := range calls {
					tools = append(tools, c.Tool)
				}
				if want := []string{"list_services", "restart_service"}; !slices.Equal(tools, want) {
					t.Fatalf("the server executed %v, want %v", tools, want)
				}
				var restarted map[string]any
				if err := json.Unmarshal(calls[1].Arguments, &restarted); err != nil {
					t.Fatal(err)
				}
				if want := map[string]any{"host": host, "service": "nginx"}; !mapsEqual(restarted, want) {
					t.Errorf("the server received %v, want %v (the reason argument stripped)", restarted, want)
				}
			})

			t.Run("acme: two restarts of one target at once, one reaches the server", func(t *testing.T) {
				log := filepath.Join(t.TempDir(), "calls.jsonl")
				cs, _ := tr.connect(t, "acme", log)
				args := map[string]any{"host": host + "-twice", "service": "nginx", "_reason": "nginx leaks memory"}
				results := make(chan *mcp.CallToolResult, 2)
				for range 2 {
					go func() {
						res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "restart_service", Arguments: args})
						if err != nil {
							t.Errorf("restart_service: %v", err)
						}
						results <- res
					}()
				}
				approved := 0
				for range 2 {
					if res := <-results; res != nil && !res.IsError {
						approved++
					}
				}
				calls := readOpsLog(t, log)
				if approved != 1 || len(calls) != 1 {
					t.Fatalf("%d of two concurrent restarts of one target approved, %d executed: want one", approved, len(calls))
				}
			})

			t.Run("locked: a denied tool is missing from tools/list", func(t *testing.T) {
				log := filepath.Join(t.TempDir(), "calls.jsonl")
				cs, _ := tr.connect(t, "locked", log)
				if got, want := toolNames(t, cs), []string{"list_services", "restart_service"}; !slices.Equal(got, want) {
					t.Fatalf("tools/list: got %v, want %v", got, want)
				}
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "drop_table", Arguments: map[string]any{"database": "a", "table": host}}); err == nil {
					t.Error("a call of the hidden drop_table succeeded")
				}
				if calls := readOpsLog(t, log); len(calls) != 0 {
					t.Errorf("the server executed %v", calls)
				}
			})

			t.Run("locked, marked: the denied tool is listed, and its call refused at policy", func(t *testing.T) {
				log := filepath.Join(t.TempDir(), "calls.jsonl")
				cs, _ := tr.connect(t, "locked", log, "--list-denied", "mark")
				res, err := cs.ListTools(t.Context(), nil)
				if err != nil {
					t.Fatal(err)
				}
				i := slices.IndexFunc(res.Tools, func(tool *mcp.Tool) bool { return tool.Name == "drop_table" })
				if i < 0 || !strings.Contains(res.Tools[i].Description, "denied by gated's policy") {
					t.Fatalf("drop_table is not listed as denied: %+v", res.Tools)
				}
				call := callTool(t, cs, "drop_table", map[string]any{"database": "a", "table": host}, "")
				if v := verdictOf(t, call); !call.IsError || v["outcome"] != "rejected" || v["stage"] != "policy" {
					t.Errorf("drop_table: error %v, verdict %v; want rejected at policy", call.IsError, v)
				}
				if calls := readOpsLog(t, log); len(calls) != 0 {
					t.Errorf("the server executed %v", calls)
				}
			})

			t.Run("acme, --propose-reads: a read is decided and audited by gated", func(t *testing.T) {
				log := filepath.Join(t.TempDir(), "calls.jsonl")
				cs, _ := tr.connect(t, "acme", log, "--propose-reads")
				res := callTool(t, cs, "list_services", map[string]any{"host": host}, "")
				if res.IsError {
					t.Fatalf("list_services: %s", resultText(res))
				}
				if v := verdictOf(t, res); v["outcome"] != "approved" || v["stage"] != "policy" {
					t.Errorf("verdict %v, want approved at policy", v)
				}
				if calls := readOpsLog(t, log); len(calls) != 1 {
					t.Errorf("the server executed %v, want the one read", calls)
				}
			})

			t.Run("acme: a read claim the policy's catalog does not back goes to gated", func(t *testing.T) {
				log := filepath.Join(t.TempDir(), "calls.jsonl")
				claim := writeFile(t, t.TempDir(), "claim.yaml", "tools:\n  drop_table: {class: read}\n")
				cs, _ := tr.connect(t, "acme", log, "--catalog", claim)
				res := callTool(t, cs, "drop_table", map[string]any{"database": "claims", "table": host}, "")
				if !res.IsError {
					t.Fatalf("drop_table claimed read was forwarded: %s", resultText(res))
				}
				if v := verdictOf(t, res); v["outcome"] != "rejected" {
					t.Errorf("verdict %v, want rejected", v)
				}
				if calls := readOpsLog(t, log); len(calls) != 0 {
					t.Errorf("the server executed %v", calls)
				}
			})

			t.Run("held: a restart whose operator hold times out never reaches the server", func(t *testing.T) {
				log := filepath.Join(t.TempDir(), "calls.jsonl")
				cs, progress := tr.connect(t, "held", log)
				res := callTool(t, cs, "restart_service", map[string]any{"host": host, "service": "app"}, "held-1")
				if !res.IsError {
					t.Fatalf("a held restart that nobody decided was forwarded: %s", resultText(res))
				}
				if v := verdictOf(t, res); v["outcome"] != "timeout" {
					t.Errorf("verdict %v, want timeout", v)
				}
				msgs := progress.all()
				if !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, "awaiting an operator") }) {
					t.Errorf("progress notifications %q do not say the call awaits an operator", msgs)
				}
				if calls := readOpsLog(t, log); len(calls) != 0 {
					t.Errorf("the server executed %v", calls)
				}
			})
		})
	}
}

// malformedLines are messages an agent may send that are not JSON-RPC
// 2.0, each with the error code it must get. None may reach the server.
var malformedLines = []struct {
	note, line string
	code       float64
}{
	{"not JSON", `{this is not json`, -32700},
	{"a batch", `[{"jsonrpc":"2.0","id":20,"method":"tools/list"}]`, -32600},
	{"JSON-RPC 1.0", `{"jsonrpc":"1.0","id":21,"method":"tools/call","params":{"name":"drop_table","arguments":{"database":"a","table":"b"}}}`, -32600},
	{"no version", `{"id":22,"method":"tools/call","params":{"name":"drop_table","arguments":{"database":"a","table":"b"}}}`, -32600},
	{"a key twice", `{"jsonrpc":"2.0","id":23,"method":"tools/list","method":"tools/call","params":{"name":"drop_table","arguments":{"database":"a","table":"b"}}}`, -32600},
	{"an object as id", `{"jsonrpc":"2.0","id":{"x":1},"method":"tools/call","params":{"name":"drop_table","arguments":{"database":"a","table":"b"}}}`, -32600},
}

// TestMCPGateMalformedJSONRPC sends gated mcp messages that are not
// JSON-RPC 2.0, over stdio and over streamable HTTP: each gets a JSON-RPC
// error, the session goes on, no proposal is published and the server
// executes nothing.
func TestMCPGateMalformedJSONRPC(t *testing.T) {
	h := startMCPHarness(t)
	nc, _ := natstest.Connect(t, h.nats)
	proposals := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(wire.ProposalSubjectPrefix+"raw.*", proposals)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

	t.Run("stdio", func(t *testing.T) {
		log := filepath.Join(t.TempDir(), "calls.jsonl")
		cmd := gatedCommand(t, append(h.gatedArgs("raw"), "--", h.ops, "--log", log)...)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
		lines := bufio.NewScanner(stdout)
		lines.Buffer(nil, 1<<20)
		next := func() map[string]any {
			t.Helper()
			if !lines.Scan() {
				t.Fatalf("gated mcp closed its output: %v", lines.Err())
			}
			var m map[string]any
			if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
				t.Fatalf("gated mcp wrote %q: %v", lines.Text(), err)
			}
			return m
		}
		send := func(line string) {
			t.Helper()
			if _, err := io.WriteString(stdin, line+"\n"); err != nil {
				t.Fatal(err)
			}
		}
		send(initialize)
		if m := next(); m["id"] != float64(1) || m["result"] == nil {
			t.Fatalf("initialize: %v", m)
		}
		send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		for _, tc := range malformedLines {
			t.Run(tc.note, func(t *testing.T) {
				send(tc.line)
				m := next()
				e, _ := m["error"].(map[string]any)
				if e == nil || e["code"] != tc.code || m["jsonrpc"] != "2.0" {
					t.Errorf("got %v, want a JSON-RPC error with code %v", m, tc.code)
				}
			})
		}
		send(`{"jsonrpc":"2.0","id":99,"method":"tools/list"}`)
		if m := next(); m["id"] != float64(99) || m["result"] == nil {
			t.Fatalf("tools/list after the malformed lines: %v", m)
		}
		if calls := readOpsLog(t, log); len(calls) != 0 {
			t.Errorf("the server executed %v", calls)
		}
	})

	t.Run("streamable HTTP", func(t *testing.T) {
		log := filepath.Join(t.TempDir(), "calls.jsonl")
		listen := freeTCPAddr(t)
		gated := gatedCommand(t, append(h.gatedArgs("raw"), "--listen", listen, "--", h.ops, "--log", log)...)
		if err := gated.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = gated.Process.Kill(); _ = gated.Wait() })
		url := "http://" + listen + "/mcp"
		waitHTTP(t, url)
		post := func(body, session string) (*http.Response, []byte) {
			t.Helper()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if session != "" {
				req.Header.Set("Mcp-Session-Id", session)
				req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			return resp, data
		}
		resp, _ := post(initialize, "")
		session := resp.Header.Get("Mcp-Session-Id")
		if resp.StatusCode != http.StatusOK || session == "" {
			t.Fatalf("initialize: %s, session %q", resp.Status, session)
		}
		post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, session)
		for _, tc := range malformedLines {
			t.Run(tc.note, func(t *testing.T) {
				resp, data := post(tc.line, session)
				var m map[string]any
				if err := json.Unmarshal(data, &m); err != nil {
					t.Fatalf("%s answered %q: %v", resp.Status, data, err)
				}
				e, _ := m["error"].(map[string]any)
				if resp.StatusCode != http.StatusBadRequest || e == nil || e["code"] != tc.code {
					t.Errorf("got %s %v, want 400 with a JSON-RPC error with code %v", resp.Status, m, tc.code)
				}
			})
		}
		t.Run("a browser's cross-origin request", func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url,
				strings.NewReader(`{"jsonrpc":"2.0","id":30,"method":"tools/call","params":{"name":"drop_table","arguments":{"database":"a","table":"b"}}}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Sec-Fetch-Site", "cross-site")
			req.Header.Set("Origin", "https://example.com")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("a cross-origin tools/call got %s, want 403", resp.Status)
			}
		})
		resp, data := post(`{"jsonrpc":"2.0","id":99,"method":"tools/list"}`, session)
		if resp.StatusCode != http.StatusOK || !bytes.Contains(data, []byte(`"id":99`)) {
			t.Fatalf("tools/list after the malformed bodies: %s %s", resp.Status, data)
		}
		if calls := readOpsLog(t, log); len(calls) != 0 {
			t.Errorf("the server executed %v", calls)
		}
	})

	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := len(proposals); n != 0 {
		t.Errorf("%d proposals were published for the malformed messages", n)
	}
}

func mapsEqual(a, b map[string]any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// waitHTTP waits until something answers HTTP at url.
func waitHTTP(t testing.TB, url string) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	for range 300 {
		resp, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nothing answers at %s", url)
}

// TestMCPGateWithoutVerdict stops gated serve and calls a tool: the
// proposal is stored, nobody decides it, and after --wait the agent gets
// a tool error saying no verdict came; the server never sees the call.
func TestMCPGateWithoutVerdict(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	ops := buildMCPOps(t, dir)
	s := natstest.Server(t)
	_, stop := startServe(t, s.ClientURL(), "--data-dir", t.TempDir())
	stop() // the streams stay; no gated consumes them

	log := filepath.Join(t.TempDir(), "calls.jsonl")
	args := []string{"mcp", "--nats-url", s.ClientURL(), "--tenant", "acme", "--agent", "ops-agent",
		"--wait", "2s", "--log-level", "error", "--", ops, "--log", log}
	cs, _ := connectMCP(t, &mcp.CommandTransport{Command: gatedCommand(t, args...)})
	res := callTool(t, cs, "restart_service", map[string]any{"host": "web-9", "service": "nginx"}, "")
	if !res.IsError || !strings.Contains(resultText(res), "gave no verdict on restart_service in time") {
		t.Fatalf("got error %v: %s; want no verdict", res.IsError, resultText(res))
	}
	if calls := readOpsLog(t, log); len(calls) != 0 {
		t.Errorf("the server executed %v", calls)
	}
}
