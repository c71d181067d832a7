package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gated/gated/internal/natstest"
)

// conformanceDirEnv names the directory where the MCP conformance suite
// is installed (test/mcp-conformance after npm ci, with Node 22 in its
// node_modules); make test-mcp-conformance sets it.
const conformanceDirEnv = "GATED_MCP_CONFORMANCE_DIR"

// conformanceTools are the tools of the conformance upstream
// (test/mcp-conformance/upstream).
var conformanceTools = []string{"test_simple_text", "test_image_content", "test_audio_content", "test_embedded_resource",
	"test_multiple_content_types", "test_tool_with_logging", "test_tool_with_progress", "test_error_handling", "test_sampling",
	"test_elicitation", "test_elicitation_sep1034_defaults", "test_elicitation_sep1330_enums", "json_schema_2020_12_tool", "test_reconnection"}

// TestMCPConformance runs the server scenarios of the MCP conformance
// suite against the conformance upstream directly, and through gated mcp
// in front of it over streamable HTTP and over stdio, with a catalog and
// policy that let every call be approved: every check that passes
// directly passes through gated.
func TestMCPConformance(t *testing.T) {
	dir := os.Getenv(conformanceDirEnv)
	if dir == "" {
		t.Skip(conformanceDirEnv + " is not set: make test-mcp-conformance installs the suite and runs this test")
	}
	clearGatedEnv(t)
	work := t.TempDir()
	upstream := filepath.Join(work, "upstream")
	if out, err := exec.Command("go", "build", "-o", upstream, "../../test/mcp-conformance/upstream").CombinedOutput(); err != nil {
		t.Fatalf("building the conformance upstream: %v\n%s", err, out)
	}
	var data, catalog strings.Builder
	data.WriteString("gated:\n  tools:\n    read_resource: {class: read}\n    get_prompt: {class: read}\n")
	catalog.WriteString("tools:\n")
	for _, name := range conformanceTools {
		fmt.Fprintf(&data, "    %s: {class: read}\n", name)
		fmt.Fprintf(&catalog, "  %s: {class: read}\n", name)
	}
	dataFile := writeFile(t, work, "data.yaml", data.String())
	catalogFile := writeFile(t, work, "catalog.yaml", catalog.String())
	natsURL := natstest.Server(t).ClientURL()
	_, stop := startServe(t, natsURL, "--data-dir", t.TempDir(), "--policy-data", dataFile)
	t.Cleanup(stop)

	start := func(cmd *exec.Cmd) {
		t.Helper()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	upAddr := freeTCPAddr(t)
	start(exec.Command(upstream, "--http", upAddr))
	direct := "http://" + upAddr + "/mcp"
	waitHTTP(t, direct)
	gatedMCP := func(upstreamArgs ...string) string {
		listen := freeTCPAddr(t)
		args := []string{"mcp", "--nats-url", natsURL, "--tenant", "acme", "--agent", "conformance", "--policy-data", dataFile,
			"--catalog", catalogFile, "--log-level", "error", "--listen", listen}
		start(gatedCommand(t, append(args, upstreamArgs...)...))
		url := "http://" + listen + "/mcp"
		waitHTTP(t, url)
		return url
	}
	overHTTP := gatedMCP("--upstream", direct)
	overStdio := gatedMCP("--", upstream)

	want := runConformance(t, dir, "direct", direct)
	passed := 0
	for _, r := range want {
		if r.failed == 0 {
			passed++
		}
	}
	if passed < len(want)-1 || len(want) < 30 {
		t.Fatalf("directly, %d of %d scenarios pass: the upstream does not implement the suite", passed, len(want))
	}
	for _, tc := range []struct{ note, url string }{{"through gated mcp, HTTP upstream", overHTTP}, {"through gated mcp, stdio upstream", overStdio}} {
		got := runConformance(t, dir, strings.ReplaceAll(tc.note, " ", "-"), tc.url)
		for name, w := range want {
			g, ok := got[name]
			switch {
			case !ok:
				t.Errorf("%s: scenario %s did not run", tc.note, name)
			case g.failed > w.failed || g.passed < w.passed:
				t.Errorf("%s: scenario %s: %d passed, %d failed; directly %d passed, %d failed: %s", tc.note, name, g.passed, g.failed, w.passed, w.failed, g.failures)
			}
		}
		t.Logf("%s: %d scenarios as directly", tc.note, len(got))
	}
}

// scenarioResult counts the checks of one scenario.
type scenarioResult struct {
	passed, failed int
	failures       string
}

// runConformance runs the suite's server scenarios against url with the
// suite's own Node, and reads the checks of each scenario.
func runConformance(t *testing.T, dir, label, url string) map[string]scenarioResult {
	t.Helper()
	out := filepath.Join(t.TempDir(), label)
	cmd := exec.Command(filepath.Join(dir, "node_modules", ".bin", "node"),
		filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js"),
		"server", "--url", url, "-o", out)
	log, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("running the conformance suite: %v\n%s", err, log)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatalf("reading the suite's results: %v\n%s", err, log)
	}
	results := map[string]scenarioResult{}
	for _, e := range entries {
		// server-NAME-TIMESTAMP: the timestamp is the last 24 bytes.
		name := strings.TrimPrefix(e.Name(), "server-")
		if len(name) > 25 {
			name = name[:len(name)-25]
		}
		raw, err := os.ReadFile(filepath.Join(out, e.Name(), "checks.json"))
		if err != nil {
			t.Fatal(err)
		}
		var checks []struct {
			ID           string `json:"id"`
			Status       string `json:"status"`
			ErrorMessage string `json:"errorMessage"`
		}
		if err := json.Unmarshal(raw, &checks); err != nil {
			t.Fatal(err)
		}
		var r scenarioResult
		for _, c := range checks {
			switch c.Status {
			case "SUCCESS":
				r.passed++
			case "FAILURE":
				r.failed++
				r.failures += c.ID + ": " + c.ErrorMessage + "; "
			}
		}
		results[name] = r
	}
	return results
}
