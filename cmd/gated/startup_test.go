package main

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/bus"
)

// TestServeRefusesALockedDataDir holds a data directory's lock, as a
// running gated does, and starts serve on it: serve must refuse at once,
// naming the directory and the lock's holder, and write nothing into the
// directory (no stream, no audit key) that belongs to the holder.
func TestServeRefusesALockedDataDir(t *testing.T) {
	dir := t.TempDir()
	held, err := bus.LockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	// A serve that is not refused runs until its context ends: the bound
	// keeps such a failure from waiting for go test's timeout.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err = run(ctx, []string{"serve", "--data-dir", dir, "--nats-listen", "127.0.0.1:0", "--log-level", "error", "--log-format", "json"})
	if !errors.Is(err, bus.ErrDataDirInUse) || exitCode(err) != exitFailure {
		t.Fatalf("serve on a locked data directory: exit %d, err %v; want exit %d and ErrDataDirInUse", exitCode(err), err, exitFailure)
	}
	for _, want := range []string{dir, "pid " + strconv.Itoa(os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{bus.DataDirLockFile}) {
		t.Errorf("the refused serve left %v in the data directory, want only %s", names, bus.DataDirLockFile)
	}

}
