package bustest

import "testing"

// SkipShort skips a test that waits out real deadlines (ack waits, hold
// timeouts, start-up timeouts) when the tests run with -short, as make
// check runs them; make test runs every one.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("waits out real deadlines: skipped with -short (make check); make test runs it")
	}
}
