package bus_test

import (
	"runtime/debug"
	"testing"

	"github.com/gated/gated/bus"
)

// TestSetEmbeddedMemoryLimit: gated with the embedded server gets its
// soft memory limit, unless GOMEMLIMIT gives one; undo puts the one
// before back.
func TestSetEmbeddedMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })

	t.Setenv("GOMEMLIMIT", "")
	limit, undo := bus.SetEmbeddedMemoryLimit()
	if limit != bus.EmbeddedMemoryLimit || debug.SetMemoryLimit(-1) != bus.EmbeddedMemoryLimit {
		t.Fatalf("limit %d, in force %d; want %d", limit, debug.SetMemoryLimit(-1), bus.EmbeddedMemoryLimit)
	}
	undo()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("after undo the limit is %d, want %d", got, before)
	}

	// GOMEMLIMIT wins: the runtime read it at start; the limit in force
	// is left alone.
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetMemoryLimit(1 << 30)
	limit, undo = bus.SetEmbeddedMemoryLimit()
	undo()
	if limit != 1<<30 || debug.SetMemoryLimit(-1) != 1<<30 {
		t.Fatalf("with GOMEMLIMIT the limit is %d (in force %d), want 1GiB left alone", limit, debug.SetMemoryLimit(-1))
	}
}
