package server

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
// writable) and its client port; with --http and --metrics-listen, their
// ports. release gives the lock back; the kernel also drops it when the
// process ends.
func claimServeResources(o Config) (release func(), err error) {
	var lock *bus.DataDirLock
	release = func() { lock.Release() }
	if o.NATSURL == "" {
		if lock, err = bus.LockDataDir(o.DataDir); err != nil {
			if errors.Is(err, bus.ErrDataDirInUse) {
				return nil, fmt.Errorf("%w: stop that gated first, or give this one its own --data-dir", err)
			}
			return nil, err
		}
		if err := bus.CheckEmbeddedListen(bus.EmbeddedConfig{Listen: o.NATSListen}); err != nil {
			lock.Release()
			return nil, fmt.Errorf("--nats-listen: %w", err)
		}
	}
	for _, l := range []struct{ flag, addr string }{{"--http", o.HTTPAddr}, {"--metrics-listen", o.MetricsListen}} {
		if l.addr == "" {
			continue
		}
		if err := checkListen(l.addr); err != nil {
			lock.Release()
			return nil, fmt.Errorf("listening on %s %s: %w", l.flag, l.addr, err)
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
