package budget

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine"
)

// gatedGets is a bucket whose reads are counted and, while hold is set,
// wait for a value on release before they go to the server.
type gatedGets struct {
	jetstream.KeyValue
	gets    atomic.Int64
	hold    atomic.Bool
	release chan struct{}
}

func (g *gatedGets) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	g.gets.Add(1)
	if g.hold.Load() {
		<-g.release
	}
	return g.KeyValue.Get(ctx, key)
}

// TestReadsShareOneGet: readers that arrive while a read of their record
// is under way wait for the next read, and share it; each reader sees a
// read that began after it arrived, so a write done before it read is
// always seen.
func TestReadsShareOneGet(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	kv, err := Setup(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedGets{KeyValue: kv, release: make(chan struct{})}
	st := New(g, nil, nil)
	now := time.Now()
	admit := func(id string) {
		t.Helper()
		if r, err := st.Admit(t.Context(), engine.BudgetRequest{Tenant: "acme", Agent: "a", ID: id, Use: engine.BudgetRead, Now: now}); err != nil || r != nil {
			t.Fatalf("admitting %s: %v %v", id, r, err)
		}
	}
	admit("p-1")
	key, scope := tenantKey("acme"), tenantScope("acme")

	// The first reader's read is held at the bucket; ten more arrive.
	g.hold.Store(true)
	g.gets.Store(0)
	first := make(chan *counters, 1)
	go func() {
		c, err := st.read(t.Context(), key, scope)
		if err != nil {
			t.Error(err)
		}
		first <- c
	}()
	for g.gets.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	// A write lands after the first read began: the first reader may
	// miss it, the later ones may not.
	g.hold.Store(false)
	admit("p-2")
	g.hold.Store(true)
	g.gets.Store(1)
	ks := st.state(key)
	var wg sync.WaitGroup
	later := make([]*counters, 10)
	for i := range later {
		wg.Go(func() {
			c, err := st.read(t.Context(), key, scope)
			if err != nil {
				t.Error(err)
			}
			later[i] = c
		})
	}
	for {
		ks.mu.Lock()
		n := len(ks.readers)
		ks.mu.Unlock()
		if n == len(later) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	g.hold.Store(false)
	close(g.release)
	<-first
	wg.Wait()
	if n := g.gets.Load(); n != 2 {
		t.Errorf("%d reads of the bucket for 11 readers, want 2: one held, one for the ten that waited", n)
	}
	for i, c := range later {
		if got := c.state(st.Config().Tenant("acme"), now).Reads; got != 2 {
			t.Errorf("reader %d saw %d reads counted, want the 2 admitted before it read", i, got)
		}
	}
}
