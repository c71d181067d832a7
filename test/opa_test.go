package test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStockOPA runs the default bundle's and the examples' Rego tests with
// stock OPA (the opa command of the OPA module in go.mod, run through
// `go tool`): policy authors can use the upstream tool on the same files.
func TestStockOPA(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the opa command")
	}
	for _, args := range [][]string{
		{"test", "policies/"},
		{"test", "policies/", "examples/policies/"},
		{"check", "--strict", "policies/", "examples/policies/"},
	} {
		cmd := exec.Command("go", append([]string{"tool", "opa"}, args...)...)
		cmd.Dir = ".."
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("opa %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "test" && !strings.Contains(string(out), "PASS: ") {
			t.Fatalf("opa %s printed no PASS summary:\n%s", strings.Join(args, " "), out)
		}
		t.Logf("opa %s: %s", strings.Join(args, " "), strings.TrimSpace(lastLine(string(out))))
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
