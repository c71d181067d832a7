package mcpgate

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/policies"
)

// runAsUpstreamEnv makes the test binary run as the upstream MCP server
// of the relay tests (see TestMain and runUpstream).
const runAsUpstreamEnv = "GATED_MCPGATE_TEST_RUN_AS_UPSTREAM"

func TestMain(m *testing.M) {
	if os.Getenv(runAsUpstreamEnv) == "1" {
		os.Exit(runUpstream(os.Args[len(os.Args)-1]))
	}
	os.Exit(m.Run())
}

// runUpstream serves, over stdio, an MCP server whose tools record every
// call they execute in the file log, one JSON line each:
//
//   - echo (read-only): its result's text is its arguments;
//   - peek (read-only), which the policy's tool catalog does not list;
//   - hidden (read-only), whose action the policy denies;
//   - broken (read-only): answers with a JSON-RPC error;
//   - wait (read-only): answers when the call is cancelled, recording it
//     as wait-cancelled;
//   - crash (read-only): the server exits without an answer.
func runUpstream(log string) int {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "upstream:", err)
		return 1
	}
	var mu sync.Mutex
	record := func(req *mcp.CallToolRequest) {
		mu.Lock()
		defer mu.Unlock()
		line, _ := json.Marshal(map[string]any{"tool": req.Params.Name, "arguments": req.Params.Arguments})
		_, _ = f.Write(append(line, '\n'))
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	read := &mcp.ToolAnnotations{ReadOnlyHint: true}
	echo := func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		record(req)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}}}, nil
	}
	for _, name := range []string{"echo", "peek", "hidden"} {
		tool := objectTool(name, "host")
		tool.Annotations = read
		s.AddTool(tool, echo)
	}
	broken := objectTool("broken")
	broken.Annotations = read
	s.AddTool(broken, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		record(req)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the disk is on fire"}
	})
	wait := objectTool("wait")
	wait.Annotations = read
	s.AddTool(wait, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		<-ctx.Done()
		req.Params.Name = "wait-cancelled"
		record(req)
		return nil, ctx.Err()
	})
	crash := objectTool("crash")
	crash.Annotations = read
	s.AddTool(crash, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		record(req)
		os.Exit(3)
		return nil, nil
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "upstream:", err)
		return 1
	}
	return 0
}

// relayPolicyData is the policy's data of the relay tests: echo, hidden,
// broken and crash are reads in the policy's tool catalog (peek is not),
// and tenant acme may not call hidden.
const relayPolicyData = `{"tools": {"echo": {"class": "read"}, "hidden": {"class": "read"}, "broken": {"class": "read"}, "crash": {"class": "read"}, "wait": {"class": "read"}},
 "config": {"denied_actions": {"acme": ["hidden"]}}}`

// relayPrecheck is the default bundle with relayPolicyData, evaluated as
// gated mcp evaluates it.
func relayPrecheck(t *testing.T) Precheck {
	t.Helper()
	b, err := policies.Default()
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal([]byte(relayPolicyData), &data); err != nil {
		t.Fatal(err)
	}
	g := b.Data["gated"].(map[string]any)
	g["tools"] = data["tools"]
	for k, v := range data["config"].(map[string]any) {
		g["config"].(map[string]any)[k] = v
	}
	ev, err := policies.Compile(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, p *gated.Proposal) (gated.Settled, bool, error) {
		return ev.Settle(ctx, reg, p)
	}
}

// relay is a gate serving an agent over a pair of pipes, in front of the
// upstream test server as a process, with its call log.
type relay struct {
	gate *Gate
	log  string
	// agentIn is what the agent writes; agentOut what it reads.
	agentIn  *os.File
	agentOut *os.File
	done     chan error
}

// startRelay starts the upstream server and a gate in front of it, and
// serves the gate over stdio pipes; with relayReads false, every call
// goes through the SDK's server and client.
func startRelay(t *testing.T, relayReads bool) *relay {
	t.Helper()
	return startRelayWith(t, relayReads, nil)
}

// startRelayWith is startRelay with the gate's configuration changed by
// mod (nil: unchanged).
func startRelayWith(t *testing.T, relayReads bool, mod func(*Config)) *relay {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{log: t.TempDir() + "/calls.jsonl", done: make(chan error, 1)}
	cmd := exec.Command(exe, "-test.run=^$", r.log)
	cmd.Env = append(os.Environ(), runAsUpstreamEnv+"=1")
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithCancel(context.Background())
	tr := &CommandTransport{Command: cmd}
	upstream, err := mcp.NewClient(&mcp.Implementation{Name: "gate", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	nc, _ := natstest.Connect(t, natstest.Server(t))
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Fleet: client, Upstream: upstream, Tenant: "acme", Agent: "relay-agent", NoGrantCheck: true,
		Precheck: relayPrecheck(t), Wait: 2 * time.Second}
	if relayReads {
		cfg.Relay = tr
	}
	if mod != nil {
		mod(&cfg)
	}
	if r.gate, err = New(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.agentIn, r.agentOut = inW, outR
	go func() {
		err := r.gate.RunStdio(ctx, &StdioTransport{In: inR, Out: outW})
		_ = outW.Close()
		r.done <- err
	}()
	t.Cleanup(func() {
		cancel()
		_ = inW.Close()
		<-r.done
		_ = upstream.Close()
		_ = inR.Close()
		_ = outR.Close()
	})
	return r
}

// agent connects the Go SDK's client to the gate.
func (r *relay) agent(t *testing.T) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "relay-test-agent", Version: "1"}, nil).
		Connect(t.Context(), &mcp.IOTransport{Reader: r.agentOut, Writer: nopCloser{r.agentIn}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

type nopCloser struct{ *os.File }

func (nopCloser) Close() error { return nil }

// calls is what the upstream server executed.
func (r *relay) calls(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(r.log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(data))
}

// goroutinesCreated is how many goroutines this process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestReadPassStartsNoGoroutine: a read call the policy lets pass is
// relayed by the gate without a goroutine of its own. Under load every
// hand-off from one goroutine to a new one waits for a thread to be
// scheduled, and the SDK's server and client paths hand a call on five
// times: that, not the work, was most of the millisecond gated mcp added
// to a read (docs/BENCHMARKS.md, "gated mcp").
func TestReadPassStartsNoGoroutine(t *testing.T) {
	r := startRelay(t, true)
	cs := r.agent(t)
	call := func(i int) {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"host": fmt.Sprintf("web-%d", i)}})
		if err != nil || res.IsError {
			t.Fatalf("echo: %v %+v", err, res)
		}
	}
	for i := range 20 { // warm up
		call(i)
	}
	const n = 200
	before := goroutinesCreated()
	for i := range n {
		call(i)
	}
	created := goroutinesCreated() - before
	if created > n/10 {
		t.Fatalf("%d read calls started %d goroutines in the agent and the gate, want at most %d", n, created, n/10)
	}
	if got := len(r.calls(t)); got != 20+n {
		t.Fatalf("the upstream executed %d calls, want %d", got, 20+n)
	}
}

// lineAgent is an agent that speaks JSON-RPC lines to a gate itself, of
// protocol version 2025-06-18 (no _meta in its calls).
type lineAgent struct {
	t   *testing.T
	r   *relay
	out *bufio.Reader
}

// lineAgent initializes a session with the gate.
func (r *relay) lineAgent(t *testing.T) *lineAgent {
	t.Helper()
	a := &lineAgent{t: t, r: r, out: bufio.NewReader(r.agentOut)}
	a.call(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"line-agent","version":"1"}}}`)
	a.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return a
}

func (a *lineAgent) send(line string) {
	a.t.Helper()
	if _, err := a.r.agentIn.WriteString(line + "\n"); err != nil {
		a.t.Fatal(err)
	}
}

// call sends a request and returns the next line the gate writes.
func (a *lineAgent) call(line string) string {
	a.t.Helper()
	a.send(line)
	got, err := a.out.ReadString('\n')
	if err != nil {
		a.t.Fatalf("reading the answer to %s: %v", line, err)
	}
	return strings.TrimSpace(got)
}

// TestRelayAnswersAsTheSDK: the agent gets the same answer whether a
// call is relayed or goes through the SDK's server and client, and the
// upstream the same call; what the relay does not take (a call before
// the session is initialized, a hidden tool, a read claim the policy
// does not back, a call asking for progress, params it does not know) is
// decided as before.
func TestRelayAnswersAsTheSDK(t *testing.T) {
	fast, sdk := startRelay(t, true), startRelay(t, false)
	early := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"host":"web-1"}}}`
	for _, r := range []*relay{fast, sdk} {
		a := &lineAgent{t: t, r: r, out: bufio.NewReader(r.agentOut)}
		if got := a.call(early); !strings.Contains(got, `"error"`) || !strings.Contains(got, "initialization") {
			t.Fatalf("a call before initialize: %s, want the SDK's error", got)
		}
	}
	fa, sa := fast.lineAgent(t), sdk.lineAgent(t)
	for _, tc := range []struct {
		note, line string
		// same is false when the answers carry a proposal id of their
		// own; want is then in both.
		same bool
		want string
	}{
		{note: "a read", line: `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"host":"web-1","_reason":"looking"}}}`,
			same: true, want: `{\"host\":\"web-1\"}`},
		{note: "no arguments", line: `{"jsonrpc":"2.0","id":"three","method":"tools/call","params":{"name":"echo"}}`, same: true, want: `"text":"{}"`},
		{note: "null arguments", line: `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":null}}`, same: true, want: `"text":"{}"`},
		{note: "the upstream's JSON-RPC error", line: `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"broken","arguments":{}}}`,
			same: true, want: `the upstream server failed on broken after a read call gated's policy allows: calling \"tools/call\": the disk is on fire`},
		{note: "a hidden tool", line: `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"hidden","arguments":{"host":"web-1"}}}`,
			same: true, want: `unknown tool`},
		{note: "a reason that is not a string", line: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"_reason":7}}}`,
			same: true, want: `must be a string`},
		{note: "progress asked", line: `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"_meta":{"progressToken":"p"},"name":"echo","arguments":{"host":"web-8"}}}`,
			same: true, want: `web-8`},
		{note: "params the relay does not know", line: `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"host":"web-9"},"extra":1}}`,
			same: true, want: `web-9`},
		{note: "a read claim the policy does not back", line: `{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"peek","arguments":{"host":"web-1"}}}`,
			want: `"isError":true`},
	} {
		t.Run(tc.note, func(t *testing.T) {
			got, want := fa.call(tc.line), sa.call(tc.line)
			if tc.same && callID.ReplaceAllString(got, "") != callID.ReplaceAllString(want, "") {
				t.Fatalf("relayed:\n%s\nthrough the SDK:\n%s", got, want)
			}
			for _, line := range []string{got, want} {
				if !strings.Contains(line, tc.want) {
					t.Fatalf("answer %s, want %s in it", line, tc.want)
				}
			}
		})
	}
	if got, want := fast.calls(t), sdk.calls(t); !slices.Equal(got, want) || slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "peek") }) {
		t.Fatalf("the upstream executed, relayed:\n%s\nthrough the SDK:\n%s", got, want)
	}
	// A server that dies under a call: the agent hears of it.
	for _, a := range []*lineAgent{fa, sa} {
		got := a.call(`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"crash","arguments":{}}}`)
		if !strings.Contains(got, `"isError":true`) || !strings.Contains(got, "the upstream server failed on crash") {
			t.Fatalf("a call the server died under: %s", got)
		}
	}
}

// TestRelayNewProtocol: a Go SDK client's calls (protocol 2026-07-28,
// with _meta) are answered alike by the relay and through the SDK, many
// at once each with its own answer, and an agent's cancellation of a
// relayed call reaches the upstream.
func TestRelayNewProtocol(t *testing.T) {
	fast, sdk := startRelay(t, true), startRelay(t, false)
	fc, sc := fast.agent(t), sdk.agent(t)
	echo := func(cs *mcp.ClientSession, host string) string {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"host": host}})
		if err != nil {
			t.Fatal(err)
		}
		data, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	for i := range 3 { // the first call teaches the relay the client's _meta
		if got, want := echo(fc, "web-1"), echo(sc, "web-1"); callID.ReplaceAllString(got, "") != callID.ReplaceAllString(want, "") {
			t.Fatalf("call %d: relayed %s, through the SDK %s", i, got, want)
		}
	}
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			host := fmt.Sprintf("web-%d", i)
			if got := echo(fc, host); !strings.Contains(got, `\"host\":\"`+host+`\"`) {
				t.Errorf("call for %s answered %s", host, got)
			}
		})
	}
	wg.Wait()
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		time.Sleep(200 * time.Millisecond)
		cancel()
	}()
	if _, err := fc.CallTool(ctx, &mcp.CallToolParams{Name: "wait", Arguments: map[string]any{}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled call: %v", err)
	}
	for range 200 {
		if slices.ContainsFunc(fast.calls(t), func(s string) bool { return strings.Contains(s, "wait-cancelled") }) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the upstream never heard of the cancellation: %s", fast.calls(t))
}

// FuzzRelayReadCall holds the relay's reading of a tools/call line to
// the SDK's: whatever line the relay takes, the SDK's server would have
// read the same tool, and the mapping the same call from its arguments.
func FuzzRelayReadCall(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"host":"web-1","_reason":"r"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":null}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":[1]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"Name":"echo","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"n":1e400,"s":"\ud800"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"echo","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":1},"name":"echo","arguments":{}}}`,
	} {
		f.Add([]byte(seed))
	}
	read, write := objectTool("echo", "host"), objectTool("write")
	read.Annotations = &mcp.ToolAnnotations{ReadOnlyHint: true}
	g := &Gate{}
	g.offered.Store(&map[string]*gatedTool{
		"echo":  {spec: read, mapping: MappingOf(read, nil)},
		"write": {spec: write, mapping: MappingOf(write, nil)},
	})
	f.Fuzz(func(t *testing.T, line []byte) {
		msg, obj, lerr := decodeLine(line)
		if lerr != nil {
			return
		}
		rc, ok := g.readCall(obj)
		if !ok {
			return
		}
		req, isRequest := msg.(*jsonrpc.Request)
		if !isRequest {
			return // pass sees requests only
		}
		var sdk mcp.CallToolParamsRaw
		if err := json.Unmarshal(req.Params, &sdk); err != nil {
			t.Fatalf("the relay took params the SDK cannot read: %v", err)
		}
		if sdk.Name != rc.tool.mapping.Tool || rc.tool.mapping.Class != "read" {
			t.Fatalf("the relay took %s (%s), the SDK reads tool %q", rc.tool.mapping.Tool, rc.tool.mapping.Class, sdk.Name)
		}
		got, gerr := rc.tool.mapping.Read(rc.args)
		want, werr := rc.tool.mapping.Read(sdk.Arguments)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("relayed arguments: %v; the SDK's: %v", gerr, werr)
		}
		if gerr == nil && (string(got.Forward) != string(want.Forward) || got.Reason != want.Reason) {
			t.Fatalf("relayed call %s (%q), the SDK's %s (%q)", got.Forward, got.Reason, want.Forward, want.Reason)
		}
	})
}

// callID matches the id of a call in its gated/verdict: fresh for every
// call, so two answers compare equal but for it.
var callID = regexp.MustCompile(`"proposal_id":"mcp-[0-9a-z]+-[0-9a-f]+"`)
