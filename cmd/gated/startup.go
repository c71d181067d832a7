package main

import (
	"errors"
	"fmt"
	"net"

	"github.com/gated/gated/bus"
)

// claimServeResources takes what serve must own before it loads or starts
// anything, so that a start that cannot succeed fails at once with one
// line naming the path or address at fault: with the embedded server, the
// data directory's exclusive lock (which also proves the directory
// writable) and its client port; with --http, that port. release gives
// the lock back; the kernel also drops it when the process ends.
func claimServeResources(o serveOptions) (release func(), err error) {
	var lock *bus.DataDirLock
	release = func() { lock.Release() }
	if o.natsURL == "" {
		if lock, err = bus.LockDataDir(o.dataDir); err != nil {
			if errors.Is(err, bus.ErrDataDirInUse) {
				return nil, fmt.Errorf("%w: stop that gated first, or give this one its own --data-dir", err)
			}
			return nil, err
		}
		if err := bus.CheckEmbeddedListen(bus.EmbeddedConfig{Listen: o.natsListen}); err != nil {
			lock.Release()
			return nil, fmt.Errorf("--nats-listen: %w", err)
		}
	}
	if o.httpAddr != "" {
		if err := checkListen(o.httpAddr); err != nil {
			lock.Release()
			return nil, fmt.Errorf("listening on --http %s: %w", o.httpAddr, err)
		}
	}
	return release, nil
}

// checkListen reports whether a TCP listener could be opened on addr now.
func checkListen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return ln.Close()
}
