package budget

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/natstest"
)

// testBucket is the budget bucket on a test server of its own.
func testBucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	_, js := natstest.Connect(t, natstest.Server(t))
	kv, err := Setup(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// gatedGets is a bucket whose reads are counted and, while hold is set,
// wait for a value on release after the server has answered: a held read
// returns the record as it was when the read began.
type gatedGets struct {
	jetstream.KeyValue
	gets    atomic.Int64
	hold    atomic.Bool
	release chan struct{}
}

func (g *gatedGets) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	hold := g.hold.Load()
	e, err := g.KeyValue.Get(ctx, key)
	g.gets.Add(1)
	if hold {
		<-g.release
	}
	return e, err
}

// TestReadsShareOneGet: readers that arrive while a read of their record
// is under way wait for the next read, and share it; each reader sees a
// read that began after it arrived, so a write done before it read is
// always seen.
func TestReadsShareOneGet(t *testing.T) {
	kv := testBucket(t)
	g := &gatedGets{KeyValue: kv, release: make(chan struct{})}
	st := New(g, nil, nil)
	now := time.Now()
	key, scope := tenantKey("acme"), tenantScope("acme")
	// admit counts one read in the tenant's record, as a block of one
	// leased for a read does.
	admit := func(id string) {
		t.Helper()
		if _, err := st.apply(t.Context(), key, scope, func(c *counters) (any, bool) {
			c.add(gated.LimitReads, st.Config().Tenant("acme").Reads, now, 1)
			return nil, true
		}); err != nil {
			t.Fatalf("counting %s: %v", id, err)
		}
	}
	admit("p-1")

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
	if got := (<-first).state(st.Config().Tenant("acme"), now).Reads; got != 1 {
		t.Errorf("the held read saw %d reads counted, want 1: it began before the second admission", got)
	}
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

// gatedWrites is a bucket whose writes wait for a value on release.
type gatedWrites struct {
	jetstream.KeyValue
	writes  atomic.Int64
	release chan struct{}
}

func (g *gatedWrites) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	g.writes.Add(1)
	<-g.release
	return g.KeyValue.Create(ctx, key, value, opts...)
}

func (g *gatedWrites) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	g.writes.Add(1)
	<-g.release
	return g.KeyValue.Update(ctx, key, value, rev)
}

// TestFirstChangeReturnsWithItsWrite: the caller whose change started
// the writes of a record returns once its own change is written, not
// after the changes that arrived meanwhile: under a steady flow of
// changes it would otherwise write for the others and never return.
func TestFirstChangeReturnsWithItsWrite(t *testing.T) {
	kv := testBucket(t)
	g := &gatedWrites{KeyValue: kv, release: make(chan struct{})}
	st := New(g, nil, nil)
	key, scope := tenantKey("acme"), tenantScope("acme")
	bump := func(c *counters) (any, bool) {
		c.ReviewEnds = append(c.ReviewEnds, slotCount{End: 1, N: 1})
		return nil, true
	}
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { _, err := st.apply(t.Context(), key, scope, bump); first <- err }()
	for g.writes.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	go func() { _, err := st.apply(t.Context(), key, scope, bump); second <- err }()
	ks := st.state(key)
	for {
		ks.mu.Lock()
		n := len(ks.pending)
		ks.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	g.release <- struct{}{} // the first change's write
	for g.writes.Load() < 2 {
		time.Sleep(time.Millisecond) // the second change's write has begun
	}
	select {
	case err := <-first:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first change did not return while the second one was being written")
	}
	close(g.release)
	if err := <-second; err != nil {
		t.Fatal(err)
	}
}
