package console_test

import (
	"testing"

	"github.com/gated/gated/bus/bustest"
)

// pluginEnv, when set, makes the test binary serve the bundled SOP
// reviewer instead of running tests (the helper-process pattern), so the
// console's tests review through a real plugin process over real gRPC.
const pluginEnv = "GATED_CONSOLE_TEST_PLUGIN"

func TestMain(m *testing.M) { bustest.MainServingSOP(m, pluginEnv) }
