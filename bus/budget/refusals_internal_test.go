package budget

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/engine"
)

// countedWrites is a bucket that counts its writes and fails them while
// fail is set.
type countedWrites struct {
	jetstream.KeyValue
	writes atomic.Int64
	fail   atomic.Bool
}

func (k *countedWrites) Create(ctx context.Context, key string, v []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if k.fail.Load() {
		return 0, errWrite
	}
	k.writes.Add(1)
	return k.KeyValue.Create(ctx, key, v, opts...)
}

func (k *countedWrites) Update(ctx context.Context, key string, v []byte, rev uint64) (uint64, error) {
	if k.fail.Load() {
		return 0, errWrite
	}
	k.writes.Add(1)
	return k.KeyValue.Update(ctx, key, v, rev)
}

// refusalStore is a store over kv whose refusals are written only when a
// test says so.
func refusalStore(kv jetstream.KeyValue) *Store {
	st := New(kv, nil, nil)
	st.refEvery = time.Hour
	return st
}

// storedRefusals is what a process that counted none reads of acme's and
// its agent bot's refusals at now.
func storedRefusals(t *testing.T, kv jetstream.KeyValue, now time.Time) (tenant, agent int64) {
	t.Helper()
	st, err := New(kv, nil, nil).State(t.Context(), "acme", "bot", now)
	if err != nil {
		t.Fatal(err)
	}
	return st.Tenant.Refusals, st.Agent.Refusals
}

func refuse(t *testing.T, st *Store, kind engine.RefusalKind, now time.Time) {
	t.Helper()
	if err := st.Refused(t.Context(), "acme", "bot", kind, now); err != nil {
		t.Fatal(err)
	}
}

// TestRefusalsOverTwoProcessesCountedOnce: refusals counted by two
// processes at once are in the records exactly once each once both
// wrote them, written by one write of each record per process, and a
// second Stop writes nothing more.
func TestRefusalsOverTwoProcessesCountedOnce(t *testing.T) {
	const n = 300
	kv := &countedWrites{KeyValue: testBucket(t)}
	stores := []*Store{refusalStore(kv), refusalStore(kv)}
	now := time.Now()
	var wg sync.WaitGroup
	for _, st := range stores {
		for i := range n {
			wg.Go(func() { refuse(t, st, engine.RefusedRejected, now.Add(time.Duration(i)*time.Millisecond)) })
		}
	}
	wg.Wait()
	later := now.Add(time.Second)
	for range 2 {
		for _, st := range stores {
			if err := st.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if tenant, agent := storedRefusals(t, kv, later); tenant != 2*n || agent != 2*n {
			t.Fatalf("the records count %d refusals for the tenant and %d for the agent, want %d each", tenant, agent, 2*n)
		}
	}
	// Two records by two processes: four writes, one more for a
	// compare-and-set lost to the other process.
	if w := kv.writes.Load(); w < 4 || w > 6 {
		t.Fatalf("%d refusals written in %d writes, want 4 (one per record and process) and a retry or two", 4*n, w)
	}
}

// TestRefusalSeenAtOnceWrittenLater: a refusal shows in this process's
// counters at once, before it is written; the others see it once it is.
func TestRefusalSeenAtOnceWrittenLater(t *testing.T) {
	kv := testBucket(t)
	st := refusalStore(kv)
	now := time.Now()
	refuse(t, st, engine.RefusedBudget, now)
	got, err := st.State(t.Context(), "acme", "bot", now)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tenant.Refusals != 1 || got.Agent.Refusals != 1 || got.Agent.BudgetRefusals != 1 || got.Tenant.BudgetRefusals != 1 {
		t.Fatalf("this process reads %+v at once, want one budget refusal for the tenant and the agent", got)
	}
	if tenant, agent := storedRefusals(t, kv, now); tenant != 0 || agent != 0 {
		t.Fatalf("another process reads %d and %d refusals before the write, want none yet", tenant, agent)
	}
	if err := st.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if tenant, agent := storedRefusals(t, kv, now); tenant != 1 || agent != 1 {
		t.Fatalf("another process reads %d and %d refusals after Stop, want 1 each", tenant, agent)
	}
	// Written, they are not counted twice here.
	if got, err = st.State(t.Context(), "acme", "bot", now); err != nil || got.Agent.Refusals != 1 || got.Tenant.Refusals != 1 {
		t.Fatalf("this process reads %+v (%v) after the write, want one refusal each", got, err)
	}
}

// TestRefusalsWrittenInTheBackground: with no Stop, the refusals are
// written by the flush the first of them scheduled.
func TestRefusalsWrittenInTheBackground(t *testing.T) {
	kv := testBucket(t)
	st := New(kv, nil, nil)
	st.refEvery = time.Millisecond
	now := time.Now()
	for range 3 {
		refuse(t, st, engine.RefusedRejected, now)
	}
	for {
		if tenant, agent := storedRefusals(t, kv, now); tenant == 3 && agent == 3 {
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatal("the refusals were never written")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestRefusalsKeptWhileTheStoreFails: refusals whose write fails are kept,
// still seen by this process, and written once the store works again;
// what is kept stays within the record's bound however long it fails.
func TestRefusalsKeptWhileTheStoreFails(t *testing.T) {
	kv := &countedWrites{KeyValue: testBucket(t)}
	var unwritten atomic.Int64
	st := New(kv, nil, func(e Event) {
		if e.RefusalsUnwritten != nil {
			unwritten.Add(1)
		}
	})
	st.refEvery = time.Hour
	kv.fail.Store(true)
	now := time.Now()
	const n = 2000 // over more slots than a record keeps
	for i := range n {
		refuse(t, st, engine.RefusedRejected, now.Add(time.Duration(i-n)*time.Second))
	}
	for range 2 {
		if err := st.Stop(t.Context()); !errors.Is(err, errWrite) {
			t.Fatalf("Stop with the store failing: %v, want the write's error", err)
		}
	}
	if got := unwritten.Load(); got != 4 {
		t.Fatalf("%d failed writes reported, want 4 (two records, two flushes)", got)
	}
	st.refMu.Lock()
	for key, p := range st.refusals {
		if len(p.counted.RefusalSlots) > maxRefusalSlots || len(p.writing) > 0 {
			t.Errorf("record %s keeps %d slots (%d being written), want at most %d", key, len(p.counted.RefusalSlots), len(p.writing), maxRefusalSlots)
		}
	}
	st.refMu.Unlock()
	got, err := st.State(t.Context(), "acme", "bot", now)
	if err != nil {
		t.Fatal(err)
	}
	// One refusal a second up to a second before now: those after the
	// window's cut (now-600s, itself on the cut and out) are 599; a slot
	// counted whole may add the older ones beside them, never fewer.
	const inWindow = int64(engine.RefusalWindow/time.Second) - 1
	if got.Agent.Refusals < inWindow || got.Tenant.Refusals < inWindow {
		t.Fatalf("with the store failing this process reads %+v, want the %d refusals of the window", got, inWindow)
	}
	kv.fail.Store(false)
	if err := st.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if tenant, agent := storedRefusals(t, kv, now); tenant != got.Tenant.Refusals || agent != got.Agent.Refusals {
		t.Fatalf("once the store works the records count %d and %d, want the %d and %d kept", tenant, agent, got.Tenant.Refusals, got.Agent.Refusals)
	}
}

// peakWrites is a bucket that keeps the most writes it had under way at
// once.
type peakWrites struct {
	jetstream.KeyValue
	now, peak atomic.Int64
}

func (k *peakWrites) enter() func() {
	n := k.now.Add(1)
	for p := k.peak.Load(); n > p && !k.peak.CompareAndSwap(p, n); p = k.peak.Load() {
	}
	// Held a moment, so that writes started together overlap.
	time.Sleep(time.Millisecond)
	return func() { k.now.Add(-1) }
}

func (k *peakWrites) Create(ctx context.Context, key string, v []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	defer k.enter()()
	return k.KeyValue.Create(ctx, key, v, opts...)
}

func (k *peakWrites) Update(ctx context.Context, key string, v []byte, rev uint64) (uint64, error) {
	defer k.enter()()
	return k.KeyValue.Update(ctx, key, v, rev)
}

// TestRefusalFlushBoundsItsWrites: a flush of many records runs at most
// flushWrites of their writes at once, and writes every refusal.
func TestRefusalFlushBoundsItsWrites(t *testing.T) {
	kv := testBucket(t)
	pw := &peakWrites{KeyValue: kv}
	st := refusalStore(pw)
	now := time.Now()
	const agents = 64
	for i := range agents {
		if err := st.Refused(t.Context(), "acme", fmt.Sprintf("bot%d", i), engine.RefusedBudget, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if p := pw.peak.Load(); p > flushWrites {
		t.Fatalf("%d writes under way at once, want at most %d", p, flushWrites)
	}
	for i := range agents {
		got, err := New(kv, nil, nil).State(t.Context(), "acme", fmt.Sprintf("bot%d", i), now)
		if err != nil {
			t.Fatal(err)
		}
		if got.Agent.Refusals != 1 {
			t.Fatalf("bot%d: %d refusals stored, want 1", i, got.Agent.Refusals)
		}
	}
	if tenant, _ := storedRefusals(t, kv, now); tenant != agents {
		t.Fatalf("acme: %d refusals stored, want %d", tenant, agents)
	}
}
