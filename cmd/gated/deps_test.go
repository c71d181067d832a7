package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// notInGated are packages gated's binary must not compile: the load
// generator is gated-bench's. A package is refused when its import path
// is one of these or lies under one.
var notInGated = []string{
	"github.com/gated/gated/internal/bench",
	"github.com/gated/gated/cmd/gated-bench",
}

// TestGatedDoesNotCompileTheLoadGenerator lists, as `go list -deps`
// does, what gated's binary compiles, and fails on the load generator.
func TestGatedDoesNotCompileTheLoadGenerator(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	const pkg = "github.com/gated/gated/cmd/gated"
	out, err := exec.CommandContext(t.Context(), goTool, "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != pkg {
		t.Fatalf("go list -deps %s does not end with the package itself:\n%s", pkg, out)
	}
	for _, d := range deps {
		for _, s := range notInGated {
			if d == s || strings.HasPrefix(d, s+"/") {
				t.Errorf("gated compiles %s, which is gated-bench's", d)
			}
		}
	}
}
