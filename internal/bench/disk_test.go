package bench_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gated/gated/internal/bench"
)

func TestStreamDiskBytes(t *testing.T) {
	dir := t.TempDir()
	write := func(path string, n int) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.Repeat("x", n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("jetstream/$G/streams/GATED_AUDIT/msgs/1.blk", 100)
	write("jetstream/$G/streams/GATED_AUDIT/msgs/2.blk", 50)
	write("jetstream/acme/streams/GATED_AUDIT/msgs/1.blk", 7)
	// Not the stream's blocks: its metadata, another stream.
	write("jetstream/$G/streams/GATED_AUDIT/meta.inf", 1000)
	write("jetstream/$G/streams/GATED_PROPOSALS/msgs/1.blk", 1000)
	if got := bench.StreamDiskBytes(dir, "GATED_AUDIT"); got != 157 {
		t.Errorf("GATED_AUDIT takes %d bytes, want 157", got)
	}
	if got := bench.StreamDiskBytes(dir, "GATED_RUNS"); got != -1 {
		t.Errorf("a stream without files: %d, want -1", got)
	}
	if got := bench.SettledDiskBytes(dir, "GATED_AUDIT", 0, 0); got != 157 {
		t.Errorf("settled: %d, want 157", got)
	}
}
