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

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// readStores are n stores over one bucket, as n gated processes share
// it, enforcing limits. Their blocks go back only when a test says so.
func readStores(t *testing.T, kv jetstream.KeyValue, limits string, n int) []*Store {
	t.Helper()
	cfg, err := ParseConfig("budgets.yaml", []byte(limits))
	if err != nil {
		t.Fatal(err)
	}
	stores := make([]*Store, n)
	for i := range stores {
		stores[i] = New(kv, cfg, nil)
		stores[i].allowFor = time.Hour
	}
	return stores
}

func readReq(id string, now time.Time) engine.BudgetRequest {
	return engine.BudgetRequest{Tenant: "acme", Agent: "bot", ID: id, Use: engine.BudgetRead, Now: now}
}

// recordReads is the reads the record of key counts in the window of r at
// now, read from the bucket.
func recordReads(t *testing.T, kv jetstream.KeyValue, key, scope string, r Rate, now time.Time) int64 {
	t.Helper()
	e, err := kv.Get(t.Context(), key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeCounters(e.Value(), scope)
	if err != nil {
		t.Fatal(err)
	}
	return c.used(gated.LimitReads, r, now)
}

// admitUntilRefused admits reads from st until one is refused, and
// returns how many were admitted and the refusal.
func admitUntilRefused(t *testing.T, st *Store, now time.Time) (int64, *gated.BudgetRefusal) {
	t.Helper()
	for n := int64(0); ; n++ {
		r, err := st.Admit(t.Context(), readReq("r", now))
		if err != nil {
			t.Fatal(err)
		}
		if r != nil {
			return n, r
		}
	}
}

// TestReadsOverProcessesAdmitExactlyTheLimit: three processes admitting
// reads of one agent from blocks they lease, four callers each, admit
// exactly the limit between them and not one more, whatever the blocks'
// sizes; each refusal says the window is spent.
func TestReadsOverProcessesAdmitExactlyTheLimit(t *testing.T) {
	kv := testBucket(t)
	stores := readStores(t, kv, "defaults: {agent: {reads: 3000/1m}}", 3)
	now := time.Now()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, st := range stores {
		for range 4 {
			wg.Go(func() {
				for {
					r, err := st.Admit(t.Context(), readReq("r", now))
					if err != nil {
						t.Error(err)
						return
					}
					if r != nil {
						if r.Limit != gated.LimitReads || r.Scope != gated.ScopeAgent || r.Max != 3000 || r.Used != 3000 {
							t.Errorf("refused by %+v, want the agent's reads at 3000 of 3000", r)
						}
						return
					}
					admitted.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if got := admitted.Load(); got != 3000 {
		t.Fatalf("%d reads admitted over three processes, want exactly the limit of 3000", got)
	}
	r := stores[0].Config().Agent("acme", "bot").Reads
	if got := recordReads(t, kv, agentKey("acme", "bot"), agentScope("acme", "bot"), r, now); got != 3000 {
		t.Fatalf("the agent's record counts %d reads, want 3000", got)
	}
}

// TestReadBlockOfAVanishedProcess: a process that leased a block and
// vanished without giving it back cannot make the window admit more than
// its limit: the others are refused once the record is spent, short of
// the limit by no more than its block, and the block stops counting when
// the window ends. A block given back at its lease's end is admitted by
// the others.
func TestReadBlockOfAVanishedProcess(t *testing.T) {
	const limits = "defaults: {agent: {reads: 1000/1m}}"
	now := time.Now()
	key, scope := agentKey("acme", "bot"), agentScope("acme", "bot")
	for _, tc := range []struct {
		note      string
		giveBack  bool
		wantOther int64
	}{
		{"vanished", false, 1000 - 8},
		{"given back", true, 1000 - 1},
	} {
		t.Run(tc.note, func(t *testing.T) {
			kv := testBucket(t)
			stores := readStores(t, kv, limits, 2)
			gone, other := stores[0], stores[1]
			gone.allowanceOf(key).block = 8
			if r, err := gone.Admit(t.Context(), readReq("r", now)); err != nil || r != nil {
				t.Fatalf("admitting the first read: %v %v", r, err)
			}
			rate := gone.Config().Agent("acme", "bot").Reads
			if got := recordReads(t, kv, key, scope, rate, now); got != 8 {
				t.Fatalf("the record counts %d reads after a block of 8 was leased, want 8", got)
			}
			if tc.giveBack {
				if err := gone.giveBack(t.Context(), key, scope, gone.allowanceOf(key), true); err != nil {
					t.Fatal(err)
				}
			}
			n, r := admitUntilRefused(t, other, now)
			if n != tc.wantOther {
				t.Fatalf("the other process admitted %d reads, want %d", n, tc.wantOther)
			}
			if r.Used != 1000 || r.Scope != gated.ScopeAgent {
				t.Fatalf("refused by %+v, want the agent's 1000 reads spent", r)
			}
			// The policy sees no fewer reads than were admitted, and no
			// more than a block over.
			st, err := other.State(t.Context(), "acme", "bot", now)
			if err != nil {
				t.Fatal(err)
			}
			if admitted := 1 + n; st.Agent.Reads < admitted || st.Agent.Reads > admitted+blockSize(rate, 0, maxBlock) {
				t.Fatalf("the policy sees %d reads, want from the %d admitted to a block more", st.Agent.Reads, admitted)
			}
			// The next window counts none of the block.
			next := time.UnixMilli(windowStart(now, time.Minute)).Add(time.Minute)
			if r, err := other.Admit(t.Context(), readReq("r", next)); err != nil || r != nil {
				t.Fatalf("a read in the next window: %v %v", r, err)
			}
			if got := recordReads(t, kv, key, scope, rate, next); got > blockSize(rate, 0, maxBlock) {
				t.Fatalf("the next window counts %d reads after one was admitted, want no more than a block", got)
			}
		})
	}
}

// TestReadBlockGoesBackAtItsLeasesEnd: what a process has left of its
// block goes back to the record once the block's lease ends, with no
// read asking for it.
func TestReadBlockGoesBackAtItsLeasesEnd(t *testing.T) {
	kv := testBucket(t)
	st := readStores(t, kv, "defaults: {agent: {reads: 1000/1m}}", 1)[0]
	st.allowFor = time.Millisecond
	key, scope := agentKey("acme", "bot"), agentScope("acme", "bot")
	st.allowanceOf(key).block = 8
	now := time.Now()
	if r, err := st.Admit(t.Context(), readReq("r", now)); err != nil || r != nil {
		t.Fatalf("admitting a read: %v %v", r, err)
	}
	rate := st.Config().Agent("acme", "bot").Reads
	for i := 0; recordReads(t, kv, key, scope, rate, now) != 1; i++ {
		if i == 30000 {
			t.Fatal("the block's unused reads never went back to the record")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTenantRefusalPutsTheAgentsReadBack: a read the agent's allowance
// admitted and the tenant's limit refused goes back to the agent's
// allowance: given back, the agent's record counts the admitted reads
// only.
func TestTenantRefusalPutsTheAgentsReadBack(t *testing.T) {
	kv := testBucket(t)
	st := readStores(t, kv, "defaults: {agent: {reads: 1000/1m}, tenant: {reads: 5/1m}}", 1)[0]
	now := time.Now()
	for range 3 {
		n, r := admitUntilRefused(t, st, now)
		if r.Scope != gated.ScopeTenant || r.Used != 5 {
			t.Fatalf("refused by %+v, want the tenant's 5 reads spent", r)
		}
		if n != 5 {
			t.Fatalf("%d reads admitted, want the tenant's 5", n)
		}
		now = now.Add(time.Minute)
	}
	key, scope := agentKey("acme", "bot"), agentScope("acme", "bot")
	if err := st.giveBack(t.Context(), key, scope, st.allowanceOf(key), true); err != nil {
		t.Fatal(err)
	}
	if got := recordReads(t, kv, key, scope, st.Config().Agent("acme", "bot").Reads, now.Add(-time.Minute)); got != 5 {
		t.Fatalf("the agent's record counts %d reads of the last window, want the 5 admitted", got)
	}
}

// failingWrites is a bucket whose writes fail.
type failingWrites struct{ jetstream.KeyValue }

var errWrite = errors.New("the bucket is gone")

func (failingWrites) Create(context.Context, string, []byte, ...jetstream.KVCreateOpt) (uint64, error) {
	return 0, errWrite
}

func (failingWrites) Update(context.Context, string, []byte, uint64) (uint64, error) {
	return 0, errWrite
}

// TestReadBlockNotLeasedAdmitsNothing: when the record cannot be written,
// no block is leased and no read is admitted, again and again.
func TestReadBlockNotLeasedAdmitsNothing(t *testing.T) {
	st := New(failingWrites{testBucket(t)}, nil, nil)
	for i := range 3 {
		r, err := st.Admit(t.Context(), readReq("r", time.Now()))
		if !errors.Is(err, errWrite) || r != nil {
			t.Fatalf("read %d with the record unwritable: %v %v, want the write's error", i, r, err)
		}
	}
}

// TestBlockSize: a block is at least one read, at most maxBlock, and
// under a limit at most 1/blockShare of it and a quarter of what is left.
func TestBlockSize(t *testing.T) {
	for _, tc := range []struct {
		max, used, want, got int64
	}{
		{0, 0, 1 << 20, maxBlock},
		{0, 0, 0, 1},
		{6000, 0, 1 << 20, 6000 / blockShare},
		{6000, 5800, 1 << 20, 50},
		{1000, 996, 64, 1},
		{1000, 999, 64, 1},
		{10, 0, 64, 1},
	} {
		if got := blockSize(Rate{Max: tc.max, Interval: time.Minute}, tc.used, tc.want); got != tc.got {
			t.Errorf("blockSize(max %d, used %d, want %d) = %d, want %d", tc.max, tc.used, tc.want, got, tc.got)
		}
	}
}

// TestReadBlockGoesBackToItsOwnWindow: a block leased in a window that
// has ended, given back after another process counted reads in the next
// one, takes nothing off the next one's count.
func TestReadBlockGoesBackToItsOwnWindow(t *testing.T) {
	kv := testBucket(t)
	stores := readStores(t, kv, "defaults: {agent: {reads: 1000/1m}}", 2)
	key, scope := agentKey("acme", "bot"), agentScope("acme", "bot")
	now := time.Now()
	stores[0].allowanceOf(key).block = 8
	if r, err := stores[0].Admit(t.Context(), readReq("r", now)); err != nil || r != nil {
		t.Fatalf("admitting a read: %v %v", r, err)
	}
	next := time.UnixMilli(windowStart(now, time.Minute)).Add(time.Minute)
	for range 10 {
		if r, err := stores[1].Admit(t.Context(), readReq("r", next)); err != nil || r != nil {
			t.Fatalf("admitting a read in the next window: %v %v", r, err)
		}
	}
	if err := stores[0].giveBack(t.Context(), key, scope, stores[0].allowanceOf(key), true); err != nil {
		t.Fatal(err)
	}
	if got := recordReads(t, kv, key, scope, stores[0].Config().Agent("acme", "bot").Reads, next); got < 10 {
		t.Fatalf("the next window counts %d reads after 10 were admitted in it, want 10 or more", got)
	}
}

// TestIdleAllowancesAreForgotten: the agent a proposal names is its own
// word, so the allowances of agents idle past their lease, their blocks
// given back, are removed: varying the agent does not grow memory.
func TestIdleAllowancesAreForgotten(t *testing.T) {
	kv := testBucket(t)
	st := readStores(t, kv, "defaults: {agent: {reads: 1000/1m}}", 1)[0]
	st.allowFor = time.Millisecond
	now := time.Now()
	for i := range 50 {
		req := readReq("r", now)
		req.Agent = fmt.Sprintf("bot%d", i)
		if r, err := st.Admit(t.Context(), req); err != nil || r != nil {
			t.Fatalf("admitting a read: %v %v", r, err)
		}
	}
	size := func() int {
		st.allowMu.Lock()
		defer st.allowMu.Unlock()
		return len(st.allow)
	}
	for i := 0; size() != 0; i++ {
		if i == 30000 {
			t.Fatalf("%d allowances kept after their leases ended, want none", size())
		}
		time.Sleep(time.Millisecond)
	}
	// A read after its allowance was removed is admitted from a new one.
	if r, err := st.Admit(t.Context(), readReq("r", now)); err != nil || r != nil {
		t.Fatalf("admitting a read: %v %v", r, err)
	}
}
