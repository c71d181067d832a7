package console_test

import (
	"os"
	"testing"

	"github.com/gated/gated/plugins/sdk"
	"github.com/gated/gated/plugins/sop"
)

// pluginEnv, when set, makes the test binary serve the bundled SOP
// reviewer instead of running tests (the helper-process pattern), so the
// console's tests review through a real plugin process over real gRPC.
const pluginEnv = "GATED_CONSOLE_TEST_PLUGIN"

func TestMain(m *testing.M) {
	switch os.Getenv(pluginEnv) {
	case "":
		os.Exit(m.Run())
	case "sop":
		sdk.Serve(sop.Reviewer{Version: "test"})
	}
	os.Exit(2)
}
