package natstest

import (
	"net"
	"testing"
)

// TestFreePortNeverTwice asks for many ports and binds each: none is
// returned twice, and each one can be listened on when it is returned.
func TestFreePortNeverTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		port := FreePort(t)
		if seen[port] {
			t.Fatalf("port %d returned twice", port)
		}
		seen[port] = true
		ln, err := net.Listen("tcp", FreeAddr(t))
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
	}
}
