package operator_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestOperatorDoesNotCompileTheServer lists, as `go list -deps` does, what
// a tool built on this package compiles, and fails on the NATS server,
// OPA, the plugin host or gated's server side: signing and sending a
// decision must not need them.
func TestOperatorDoesNotCompileTheServer(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	const pkg = "github.com/gated/gated/bus/operator"
	out, err := exec.CommandContext(t.Context(), goTool, "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != pkg {
		t.Fatalf("go list -deps %s does not end with the package itself:\n%s", pkg, out)
	}
	refused := []string{
		"github.com/nats-io/nats-server",
		"github.com/open-policy-agent/opa",
		"github.com/hashicorp/go-plugin",
		"github.com/gated/gated/policies",
		"github.com/gated/gated/plugins",
		"github.com/gated/gated/personas",
		"github.com/gated/gated/cmd",
	}
	for _, d := range deps {
		switch d {
		case "github.com/gated/gated/bus", "github.com/gated/gated/bus/intake", "github.com/gated/gated/bus/grants":
			t.Errorf("%s imports %s, the server side", pkg, d)
		}
		for _, r := range refused {
			if d == r || strings.HasPrefix(d, r+"/") {
				t.Errorf("%s compiles %s", pkg, d)
			}
		}
	}
}
