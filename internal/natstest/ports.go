package natstest

import (
	"net"
	"strconv"
	"sync"
	"testing"
)

// handedOut holds every port FreePort returned in this test binary.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// FreePort returns a loopback port that nobody listens on right now and
// that FreePort has not returned before in this test binary. The port is
// free only until someone binds it: a test that picks the ports of a NATS
// server and of gated's HTTP listener one after the other would otherwise
// be handed the same port twice when the kernel reuses the first one, and
// the second listener would fail with "address already in use".
func FreePort(t testing.TB) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	// Listeners held open while looking cannot be handed back by the
	// kernel, so a port seen before is skipped, not retried.
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	for range 1000 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ln)
		port := ln.Addr().(*net.TCPAddr).Port
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
	t.Fatal("no loopback port that was not handed out before")
	return 0
}

// FreeAddr is FreePort as a host:port address on 127.0.0.1.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}
