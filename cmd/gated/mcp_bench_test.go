package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
)

// BenchmarkMCPProxy measures, in one run and call by call in turn, what
// gated mcp adds to a tool call (docs/BENCHMARKS.md, "gated mcp"):
//
//   - a read-class call of list_services made directly to the example
//     server and through gated mcp (stdio to stdio, the policy's read
//     pass checked in process), reported as p50s and their difference;
//   - the same read through a bare proxy made of the MCP Go SDK alone
//     (its server in front, its client behind, the handler passing the
//     call on): the floor of any proxy built on the SDK, which gated mcp
//     is;
//   - a policy-decided call, drop_table for tenant locked (rejected at
//     policy by denied_actions), through gated mcp, against the same
//     proposal published with the Go fleet client: gated's own policy
//     path, reported the same way.
//
// Each iteration makes one call of each kind; run it with -benchtime
// 1000x or so for stable p50s.
func BenchmarkMCPProxy(b *testing.B) {
	h := startMCPHarness(b)
	direct, _ := connectMCP(b, &mcp.CommandTransport{Command: exec.Command(h.ops)})
	bare, _ := connectMCP(b, &mcp.CommandTransport{Command: bareProxyCommand(b, h.ops)})
	proxied, _ := connectMCP(b, &mcp.CommandTransport{Command: gatedCommand(b, append(h.gatedArgs("acme"), "--", h.ops)...)})
	locked, _ := connectMCP(b, &mcp.CommandTransport{Command: gatedCommand(b, append(h.gatedArgs("locked", "--list-denied", "mark"), "--", h.ops)...)})
	nc, client, err := (&natsConnOptions{}).client(h.natsURL, "mcp-bench")
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()

	read := &mcp.CallToolParams{Name: "list_services", Arguments: map[string]any{"host": "web-1"}}
	call := func(cs *mcp.ClientSession, p *mcp.CallToolParams, wantError bool) time.Duration {
		start := time.Now()
		res, err := cs.CallTool(b.Context(), p)
		d := time.Since(start)
		if err != nil || res.IsError != wantError {
			b.Fatalf("%s: error %v, result %+v", p.Name, err, res)
		}
		return d
	}
	// The fleet client's proposal is the one gated mcp makes, less the id.
	propose := func(i int) time.Duration {
		p := &gated.Proposal{ID: fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i), Tenant: "locked", Kind: gated.KindAction,
			Action: "drop_table", Class: gated.ClassDestructive, BlastRadius: gated.BlastSingleDevice,
			Target: map[string]any{"database": "bench", "table": fmt.Sprintf("direct-%d", i)}, Reason: "benchmark",
			RequestedBy: &gated.RequestedBy{Agent: "ops-agent"}}
		start := time.Now()
		_, err := client.ProposeWith(b.Context(), p)
		d := time.Since(start)
		if !errorsIsRejected(err) {
			b.Fatalf("the direct proposal: %v", err)
		}
		return d
	}
	for i := range 50 { // warm up connections, caches and the policy
		call(direct, read, false)
		call(bare, read, false)
		call(proxied, read, false)
		call(locked, dropCall(-1-i), true)
		propose(-1 - i)
	}
	var readDirect, readBare, readProxy, policyDirect, policyProxy []time.Duration
	b.ResetTimer()
	for i := range b.N {
		readDirect = append(readDirect, call(direct, read, false))
		readBare = append(readBare, call(bare, read, false))
		readProxy = append(readProxy, call(proxied, read, false))
		policyDirect = append(policyDirect, propose(i))
		policyProxy = append(policyProxy, call(locked, dropCall(i), true))
	}
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	rd, rp, pd, pp := p50(readDirect), p50(readProxy), p50(policyDirect), p50(policyProxy)
	b.ReportMetric(us(rd), "read-direct-p50-µs")
	b.ReportMetric(us(rp), "read-proxy-p50-µs")
	b.ReportMetric(us(rp-rd), "read-added-p50-µs")
	b.ReportMetric(us(p50(readBare)-rd), "read-bare-sdk-proxy-added-p50-µs")
	b.ReportMetric(us(pd), "policy-fleet-p50-µs")
	b.ReportMetric(us(pp), "policy-proxy-p50-µs")
	b.ReportMetric(us(pp-pd), "policy-added-p50-µs")
	b.ReportMetric(us(pct(readProxy, 99)), "read-proxy-p99-µs")
	b.ReportMetric(us(pct(policyDirect, 99)), "policy-fleet-p99-µs")
	b.ReportMetric(us(pct(policyProxy, 99)), "policy-proxy-p99-µs")
}

// runAsBareProxyEnv makes the test binary run as the bare SDK proxy
// (see TestMain and runBareMCPProxy).
const runAsBareProxyEnv = "GATED_TEST_RUN_AS_BARE_MCP_PROXY"

// bareProxyCommand is the test binary started as the bare SDK proxy in
// front of the MCP server command server.
func bareProxyCommand(t testing.TB, server ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, server...)
	cmd.Env = append(os.Environ(), runAsBareProxyEnv+"=1")
	cmd.Stderr = os.Stderr
	return cmd
}

// runBareMCPProxy serves, over stdio, the tools of the MCP server that
// the command args starts, passing every call on unchecked: what a proxy
// built on the SDK costs before it decides anything. It returns the exit
// status.
func runBareMCPProxy(args []string) int {
	ctx := context.Background()
	upstream, err := mcp.NewClient(&mcp.Implementation{Name: "bare-proxy", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: exec.Command(args[0], args[1:]...)}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bare proxy:", err)
		return 1
	}
	defer func() { _ = upstream.Close() }()
	server := mcp.NewServer(&mcp.Implementation{Name: "bare-proxy", Version: "1"}, nil)
	for tool, err := range upstream.Tools(ctx, nil) {
		if err != nil {
			fmt.Fprintln(os.Stderr, "bare proxy:", err)
			return 1
		}
		server.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return upstream.CallTool(ctx, &mcp.CallToolParams{Name: req.Params.Name, Arguments: req.Params.Arguments})
		})
	}
	if err := server.Run(ctx, &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "bare proxy:", err)
		return 1
	}
	return 0
}

func dropCall(i int) *mcp.CallToolParams {
	return &mcp.CallToolParams{Name: "drop_table", Arguments: map[string]any{"database": "bench", "table": fmt.Sprintf("proxy-%d", i), "_reason": "benchmark"}}
}

func errorsIsRejected(err error) bool {
	ve, ok := err.(*fleet.VerdictError)
	return ok && ve.Verdict.Outcome == gated.OutcomeRejected
}

func p50(ds []time.Duration) time.Duration { return pct(ds, 50) }

// pct is the q-th percentile of ds, by the nearest rank.
func pct(ds []time.Duration, q int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*q/100]
}
