package bus_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/gated/gated/bus"
)

// TestLockDataDir checks that a data directory has one holder at a time,
// that the refusal names the directory and the holder's pid, and that the
// lock can be taken again once released.
func TestLockDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	first, err := bus.LockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = bus.LockDataDir(dir)
	var inUse *bus.DataDirInUseError
	if !errors.As(err, &inUse) || !errors.Is(err, bus.ErrDataDirInUse) || inUse.PID != os.Getpid() {
		t.Fatalf("second lock: %v; want a DataDirInUseError naming pid %d", err, os.Getpid())
	}
	if msg := err.Error(); !strings.Contains(msg, dir) || !strings.Contains(msg, "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("the refusal does not name the directory and the pid: %s", msg)
	}
	first.Release()
	first.Release() // a second release does nothing
	again, err := bus.LockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again.Release()
}

// TestLockDataDirRefusesUnusableDirs checks that a data directory that
// cannot be one is refused with an error naming it.
func TestLockDataDirRefusesUnusableDirs(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		note string
		dir  string
		say  string
	}{
		{note: "a regular file", dir: file, say: "is not a directory"},
		{note: "under a regular file", dir: filepath.Join(file, "data"), say: "not a directory"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			l, err := bus.LockDataDir(tc.dir)
			if err == nil {
				l.Release()
				t.Fatalf("%s was locked", tc.dir)
			}
			if !strings.Contains(err.Error(), tc.dir) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("error %q does not name %s and say %q", err, tc.dir, tc.say)
			}
		})
	}
}

// TestStartEmbeddedSaysWhy checks that an embedded server that cannot
// start says the server's own reason at once, instead of timing out.
func TestStartEmbeddedSaysWhy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		note string
		cfg  bus.EmbeddedConfig
		say  []string
	}{
		{note: "port in use", cfg: bus.EmbeddedConfig{Listen: ln.Addr().String(), StoreDir: t.TempDir()},
			say: []string{ln.Addr().String(), "address already in use"}},
		{note: "store is a file", cfg: bus.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: file},
			say: []string{file, "not a directory"}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			s, err := bus.StartEmbedded(tc.cfg, zap.NewNop())
			if err == nil {
				s.Shutdown()
				t.Fatal("the server started")
			}
			for _, w := range tc.say {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "within") {
				t.Fatalf("error %q is a time-out, not the cause", err)
			}
		})
	}
	if err := bus.CheckEmbeddedListen(bus.EmbeddedConfig{Listen: ln.Addr().String()}); err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("CheckEmbeddedListen on a port in use: %v", err)
	}
	if err := bus.CheckEmbeddedListen(bus.EmbeddedConfig{Listen: "127.0.0.1:0"}); err != nil {
		t.Fatalf("CheckEmbeddedListen on port 0: %v", err)
	}
}
