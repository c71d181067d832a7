package bustest

import (
	"os"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/gated/gated/plugins"
	"github.com/gated/gated/plugins/sdk"
	"github.com/gated/gated/plugins/sop"
)

// MainServingSOP is a test binary's TestMain that, when the environment
// variable env is "sop", serves the bundled SOP reviewer instead of
// running the tests (the helper-process pattern), so that SOPHost can
// review through a real plugin process over real gRPC.
func MainServingSOP(m *testing.M, env string) {
	switch os.Getenv(env) {
	case "":
		os.Exit(m.Run())
	case "sop":
		sdk.Serve(sop.Reviewer{Version: "test"})
	}
	os.Exit(2)
}

// SOPHost runs the bundled SOP reviewer out of process: the test binary
// relaunched with env set to "sop", which its TestMain (MainServingSOP)
// serves. The host is closed when the test ends.
func SOPHost(t *testing.T, env string) *plugins.Host {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sum, err := plugins.FileSHA256(exe)
	if err != nil {
		t.Fatal(err)
	}
	h, err := plugins.NewHost(zaptest.NewLogger(t), "sop",
		plugins.Spec{Name: "sop", Path: exe, SHA256: sum, Env: []string{env + "=sop"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	if err := h.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return h
}
