package wire

import (
	"runtime"
	"testing"
)

// A plugin's server keeps a worker idle for every review the host runs at
// once by default, after go-plugin's streams have taken theirs.
func TestPluginStreamWorkers(t *testing.T) {
	got := int(PluginStreamWorkers())
	if want := heldStreams + max(runtime.GOMAXPROCS(0), DefaultMaxConcurrency); got != want {
		t.Fatalf("PluginStreamWorkers = %d, want %d", got, want)
	}
	if got-heldStreams < DefaultMaxConcurrency {
		t.Fatalf("%d workers leave fewer than %d for reviews", got, DefaultMaxConcurrency)
	}
}
