package main

import (
	"bufio"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPGateLaunch: the upstream command may be named by --upstream-cmd,
// for launchers that drop "--" (the MCP inspector), and --listen says
// where it listens at the default log level.
func TestMCPGateLaunch(t *testing.T) {
	h := startMCPHarness(t)
	t.Run("--upstream-cmd", func(t *testing.T) {
		log := filepath.Join(t.TempDir(), "calls.jsonl")
		cs, _ := connectMCP(t, &mcp.CommandTransport{Command: gatedCommand(t, append(h.gatedArgs("acme"), "--upstream-cmd", h.ops+" --log "+log)...)})
		if res := callTool(t, cs, "list_services", map[string]any{"host": "web-1"}, ""); res.IsError {
			t.Fatalf("list_services: %s", resultText(res))
		}
		if calls := readOpsLog(t, log); len(calls) != 1 || calls[0].Tool != "list_services" {
			t.Fatalf("the server executed %v, want list_services once", calls)
		}
	})
	t.Run("--upstream-cmd and -- together", func(t *testing.T) {
		cmd := gatedCommand(t, append(h.gatedArgs("acme"), "--upstream-cmd", h.ops, "--", h.ops)...)
		cmd.Stderr = nil
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "alternatives") {
			t.Fatalf("got %v: %s, want a usage error", err, out)
		}
	})
	t.Run("--listen says where", func(t *testing.T) {
		listen := freeTCPAddr(t)
		args := slices.DeleteFunc(h.gatedArgs("acme"), func(s string) bool { return s == "--log-level" || s == "error" })
		cmd := gatedCommand(t, append(args, "--listen", listen, "--", h.ops)...)
		cmd.Stderr = nil
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		line, err := bufio.NewReader(stderr).ReadString('\n')
		if want := "http://" + listen + "/mcp"; err != nil || !strings.Contains(line, want) {
			t.Fatalf("first line on standard error: %q (%v), want one naming %s", line, err, want)
		}
	})
}
