package status

import (
	"fmt"
	"testing"
	"time"

	"github.com/gated/gated/engine/wire"
)

// TestWatchFloodKeepsOtherTenantsWatches: a tenant asking for more
// proposals than its bound forgets its own oldest asks, never another
// tenant's, and every ask leaves the watch set within its bounds.
func TestWatchFloodKeepsOtherTenantsWatches(t *testing.T) {
	p := NewPublisher(nil, nil)
	p.perTenant = 8
	now := time.Now()
	good := wire.StatusSubject("good", "p1")
	p.watch("good", good, now)
	for i := range 100 {
		p.watch("evil", wire.StatusSubject("evil", fmt.Sprintf("p%d", i)), now)
		if n, q := len(p.watched), p.asks["evil"]; n > 1+p.perTenant || len(q) > p.perTenant || cap(q) > 2*p.perTenant+1 {
			t.Fatalf("ask %d: %d watched, evil holds %d (capacity %d), want at most %d", i, n, len(q), cap(q), p.perTenant)
		}
	}
	if !p.wanted(good) {
		t.Fatal("good's watch was forgotten by evil's asks")
	}
	if p.wanted(wire.StatusSubject("evil", "p0")) || !p.wanted(wire.StatusSubject("evil", "p99")) {
		t.Fatal("evil's oldest ask kept or its newest forgotten")
	}
}

// TestLapsedWatchesAreDropped: the asks that lapsed are dropped by the
// next asks of their tenant, two at most each.
func TestLapsedWatchesAreDropped(t *testing.T) {
	p := NewPublisher(nil, nil)
	then := time.Now().Add(-2 * WatchTTL)
	for i := range 6 {
		p.watch("acme", wire.StatusSubject("acme", fmt.Sprintf("old%d", i)), then)
	}
	if p.wanted(wire.StatusSubject("acme", "old0")) {
		t.Fatal("a lapsed ask is still wanted")
	}
	now := time.Now()
	for i := range 3 {
		p.watch("acme", wire.StatusSubject("acme", fmt.Sprintf("new%d", i)), now)
	}
	if n := len(p.watched); n != 3 {
		t.Fatalf("%d asks held, want the 3 live ones", n)
	}
}
