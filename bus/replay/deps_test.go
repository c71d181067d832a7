package replay_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const replayPkg = "github.com/gated/gated/bus/replay"

// goList runs go list with args and returns its output's lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.CommandContext(t.Context(), goTool, append([]string{"list"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, out)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// TestReplayDependenciesPointOneWay: replay sits above the server side and
// below the command. It compiles no command, and no package but a command
// (or replay's own) imports it, so bus never depends on a replay.
func TestReplayDependenciesPointOneWay(t *testing.T) {
	for _, d := range goList(t, "-deps", replayPkg) {
		if strings.HasPrefix(d, "github.com/gated/gated/cmd/") {
			t.Errorf("replay compiles the command package %s", d)
		}
	}
	for _, line := range goList(t, "-e", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "github.com/gated/gated/...") {
		pkg, imports, _ := strings.Cut(line, " ")
		if pkg == replayPkg || strings.HasPrefix(pkg, replayPkg+"/") || strings.HasPrefix(pkg, "github.com/gated/gated/cmd/") {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if imp == replayPkg || strings.HasPrefix(imp, replayPkg+"/") {
				t.Errorf("%s imports %s: only a command may", pkg, imp)
			}
		}
	}
}
