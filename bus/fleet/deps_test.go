package fleet_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// serverDeps are the packages a fleet must not compile: the NATS server,
// OPA, the plugin host, and gated's own server side, the engine included
// (the model a fleet speaks is package gated). A package is refused
// when its import path is one of these or lies under one.
var serverDeps = []string{
	"github.com/nats-io/nats-server",
	"github.com/open-policy-agent/opa",
	"github.com/hashicorp/go-plugin",
	"github.com/gated/gated/bus",
	"github.com/gated/gated/policies",
	"github.com/gated/gated/plugins",
	"github.com/gated/gated/personas",
	"github.com/gated/gated/cmd",
	"github.com/gated/gated/engine",
}

// fleetSide are gated's packages a fleet may import under serverDeps.
var fleetSide = map[string]bool{
	"github.com/gated/gated/bus/fleet":    true,
	"github.com/gated/gated/engine/wire":  true,
	"github.com/gated/gated/engine/grant": true,
}

// TestFleetDoesNotCompileTheServer lists, as `go list -deps` does, what a
// fleet built on this package compiles, and fails on any package of the
// server side: a fleet that imports the client must not build nats-server,
// OPA or go-plugin.
func TestFleetDoesNotCompileTheServer(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	for _, pkg := range []string{
		"github.com/gated/gated",
		"github.com/gated/gated/bus/fleet",
		"github.com/gated/gated/engine/wire",
		"github.com/gated/gated/examples/fleet",
		"github.com/gated/gated/examples/orchestrator",
		"github.com/gated/gated/mcpgate",
	} {
		t.Run(pkg, func(t *testing.T) {
			out, err := exec.CommandContext(t.Context(), goTool, "list", "-deps", pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
			}
			deps := strings.Fields(string(out))
			if len(deps) == 0 || deps[len(deps)-1] != pkg {
				t.Fatalf("go list -deps %s does not end with the package itself:\n%s", pkg, out)
			}
			var bad []string
			for _, d := range deps {
				if fleetSide[d] {
					continue
				}
				for _, s := range serverDeps {
					if d == s || strings.HasPrefix(d, s+"/") {
						bad = append(bad, d)
						break
					}
				}
			}
			if len(bad) > 0 {
				t.Errorf("%s compiles %d server-side packages, e.g. %s", pkg, len(bad), strings.Join(bad[:min(len(bad), 5)], ", "))
			}
		})
	}
}
