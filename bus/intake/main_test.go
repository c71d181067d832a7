package intake_test

import (
	"testing"

	"github.com/gated/gated/bus/bustest"
)

// pluginEnv, when set, makes the test binary serve that reviewer instead
// of running tests (the helper-process pattern), so the intake tests can
// review through a real plugin process over real gRPC.
const pluginEnv = "GATED_BUS_TEST_PLUGIN"

func TestMain(m *testing.M) { bustest.MainServingSOP(m, pluginEnv) }
