package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats-server/v2/server"
)

// The harness of the gated mcp tests: a gated serve, the example MCP
// server and the Go SDK's MCP client, and the helpers that call through them.

// runAsGatedEnv makes the test binary run as gated (see TestMain).
const runAsGatedEnv = "GATED_TEST_RUN_AS_GATED"

// mcpPolicyData is the policy data of the MCP tests, given to serve and
// to gated mcp alike: the policy's tool catalog backs list_services' read
// claim, tenant locked may never drop anything, and tenant held's
// restarts wait for an operator for two seconds, then time out.
const mcpPolicyData = `gated:
  tools:
    list_services: {class: read}
  config:
    denied_actions:
      locked: ["drop_*"]
    operator_holds:
      actions:
        held: ["host_restart_*"]
      deadline: 2s
`

// mcpCatalog maps restart_service onto host_restart_service, which the
// default bundle's SOP-001 covers (so the SOP reviewer approves it), with
// the host and service as its target.
const mcpCatalog = `tools:
  restart_service:
    action: host_restart_service
    target:
      host: /host
      service: /service
`

// mcpHarness is a real gated serve (with the bundled SOP reviewer as a
// plugin process) on a test NATS server, and the example MCP server built
// from examples/mcp-ops.
type mcpHarness struct {
	nats    *server.Server
	natsURL string
	ops     string // the mcp-ops binary
	data    string // the policy data file
	catalog string

	// auditKey is the file of serve's audit key.
	auditKey string
}

func startMCPHarness(t testing.TB) *mcpHarness {
	t.Helper()
	clearGatedEnv(t)
	dir := t.TempDir()
	h := &mcpHarness{
		ops:     buildMCPOps(t, dir),
		data:    writeFile(t, dir, "mcp-data.yaml", mcpPolicyData),
		catalog: writeFile(t, dir, "mcp-catalog.yaml", mcpCatalog),
	}
	h.nats = natstest.Server(t)
	h.natsURL = h.nats.ClientURL()
	h.auditKey = writeFile(t, dir, "audit.key", strings.Repeat("5a", 32)+"\n")
	_, stop := startServe(t, h.natsURL, "--data-dir", t.TempDir(), "--policy-data", h.data, "--audit-key-file", h.auditKey)
	t.Cleanup(stop)
	return h
}

// buildMCPOps builds the example MCP server into dir.
func buildMCPOps(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "mcp-ops")
	cmd := exec.Command("go", "build", "-o", bin, "../../examples/mcp-ops")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building examples/mcp-ops: %v\n%s", err, out)
	}
	return bin
}

// gatedArgs are the arguments of gated mcp for tenant, with extra flags
// before the upstream (a command after --, or --upstream in extra).
func (h *mcpHarness) gatedArgs(tenant string, extra ...string) []string {
	args := []string{"mcp", "--nats-url", h.natsURL, "--tenant", tenant, "--agent", "ops-agent",
		"--policy-data", h.data, "--catalog", h.catalog, "--log-level", "error"}
	return append(args, extra...)
}

// gatedCommand is the test binary started as gated with args.
func gatedCommand(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), runAsGatedEnv+"=1")
	cmd.Stderr = os.Stderr
	return cmd
}

// progressLog collects the progress notifications a client receives.
type progressLog struct {
	mu   sync.Mutex
	msgs []string
}

func (p *progressLog) add(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, req.Params.Message)
}

func (p *progressLog) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.msgs)
}

// connectMCP connects the Go SDK's client over t.
func connectMCP(t testing.TB, tr mcp.Transport) (*mcp.ClientSession, *progressLog) {
	t.Helper()
	progress := &progressLog{}
	client := mcp.NewClient(&mcp.Implementation{Name: "gated-test-agent", Version: "1"},
		&mcp.ClientOptions{ProgressNotificationHandler: progress.add})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cs, err := client.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connecting to gated mcp: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, progress
}

// opsCall is one line of mcp-ops' --log file.
type opsCall struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// readOpsLog returns the calls the example server executed.
func readOpsLog(t *testing.T, path string) []opsCall {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var calls []opsCall
	for line := range strings.Lines(string(data)) {
		var c opsCall
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("call log line %q: %v", line, err)
		}
		calls = append(calls, c)
	}
	return calls
}

func callTool(t testing.TB, cs *mcp.ClientSession, name string, args map[string]any, token string) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	p := &mcp.CallToolParams{Name: name, Arguments: args}
	if token != "" {
		p.SetProgressToken(token)
	}
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	return res
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// verdictOf reads the verdict the gate put in a result's _meta.
func verdictOf(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	v, ok := res.Meta["gated/verdict"].(map[string]any)
	if !ok {
		t.Fatalf("result has no gated/verdict in _meta: %+v", res.Meta)
	}
	return v
}
