package server

import (
	"errors"
	"testing"

	"github.com/gated/gated/bus"
)

// TestClaimTakesAReleasedDataDir claims a data directory whose lock its
// holder released: the claim takes the lock.
func TestClaimTakesAReleasedDataDir(t *testing.T) {
	dir := t.TempDir()
	held, err := bus.LockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}

	held.Release()
	release, err := claimServeResources(Config{DataDir: dir, NATSListen: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("claiming the released data directory: %v", err)
	}
	defer release()
	if _, err := bus.LockDataDir(dir); !errors.Is(err, bus.ErrDataDirInUse) {
		t.Fatalf("locking the data directory serve claimed: %v, want ErrDataDirInUse", err)
	}
}
