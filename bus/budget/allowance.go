package budget

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// A read is admitted from an allowance: a block of the reads of a scope's
// window that this process leased from the scope's record with one
// compare-and-set, where the whole block counts at once. Until the block
// is spent, reads are admitted from it without a round trip; what is left
// of it when its lease ends goes back to the record. So the reads a window
// admits over every process never exceed its limit: each was counted in
// the record, under a compare-and-set, before it was admitted. What the
// leasing costs is the other way: the record counts the blocks' unused
// parts too, so a scope may be refused while fewer than its limit were
// admitted, by at most the blocks other processes hold unused (one block
// each, see blockSize), and the counters the policy sees are at most that
// many over. A process that ends without giving its block back leaves it
// counted until the window ends. docs/BUDGETS.md gives the bound.

// allowanceLease is how long a block stays with this process after it was
// leased: what is left of it then goes back to the record.
const allowanceLease = time.Second

// maxBlock bounds a block; blockShare bounds it to a share of the limit.
const (
	maxBlock   = 1024
	blockShare = 64
)

// blockSize is the size of the block to lease from a window of limit r
// that counts used already, when this process would like want: at least
// one and at most maxBlock, and under a limit at most 1/blockShare of it
// and a quarter of what the window has left, so that blocks shrink near
// the limit. It is called only when the window has room (used < r.Max).
func blockSize(r Rate, used, want int64) int64 {
	n := min(max(want, 1), maxBlock)
	if r.Max > 0 {
		n = min(n, max(1, r.Max/blockShare), max(1, (r.Max-used)/4))
	}
	return n
}

// allowance is what this process holds of one scope's reads: what is
// left of the blocks it leased in one window under one limit.
type allowance struct {
	mu sync.Mutex
	// start (Unix ms), interval (s) and max name the window and the limit
	// the blocks were leased under.
	start, interval, max int64
	left                 int64
	// block is the size of the next block this process asks for; leased
	// is when it leased the last one (wall clock).
	block  int64
	leased time.Time
	// refill is closed when the lease under way ends; nil when none is.
	refill chan struct{}
	// due is set while the return of what is left is scheduled.
	due bool
	// gone is set once the allowance is idle and removed from s.allow:
	// a read that finds it set asks s.allow again.
	gone bool
}

// holds reports whether a's blocks are of the window of r at now.
func (a *allowance) holds(r Rate, now time.Time) bool {
	return a.start == windowStart(now, r.Interval) && a.interval == int64(r.Interval/time.Second) && a.max == r.Max
}

// allowanceOf returns the allowance of the record under key.
func (s *Store) allowanceOf(key string) *allowance {
	s.allowMu.Lock()
	defer s.allowMu.Unlock()
	a, ok := s.allow[key]
	if !ok {
		a = &allowance{block: 1}
		s.allow[key] = a
	}
	return a
}

// admitRead admits a read of req from the agent's allowance, then the
// tenant's; a refusal by the tenant's puts the agent's read back.
func (s *Store) admitRead(ctx context.Context, req engine.BudgetRequest) (*gated.BudgetRefusal, error) {
	cfg := s.Config()
	al, tl := cfg.Agent(req.Tenant, req.Agent).Reads, cfg.Tenant(req.Tenant).Reads
	ak := agentKey(req.Tenant, req.Agent)
	refusal, err := s.takeRead(ctx, ak, agentScope(req.Tenant, req.Agent), al, req.Now)
	if err != nil || refusal != nil {
		if refusal != nil {
			refusal.Scope, refusal.Agent = gated.ScopeAgent, req.Agent
		}
		return refusal, err
	}
	refusal, err = s.takeRead(ctx, tenantKey(req.Tenant), tenantScope(req.Tenant), tl, req.Now)
	if err != nil || refusal != nil {
		s.untakeRead(ak, agentScope(req.Tenant, req.Agent), al, req.Now)
		if refusal != nil {
			refusal.Scope = gated.ScopeTenant
		}
	}
	return refusal, err
}

// takeRead admits one read of the scope of key under r at now from this
// process's allowance, leasing a block from the record when it has none
// left. One lease is under way at a time per record; the reads that find
// the allowance empty meanwhile wait for it. A refusal comes from the
// record, read in the attempt that refuses; an error admits nothing.
func (s *Store) takeRead(ctx context.Context, key, scope string, r Rate, now time.Time) (*gated.BudgetRefusal, error) {
	a := s.allowanceOf(key)
	for {
		a.mu.Lock()
		if a.gone {
			a.mu.Unlock()
			a = s.allowanceOf(key)
			continue
		}
		if !a.holds(r, now) {
			// Another window, or another limit: what is left counts in
			// its own window, which ends with it, or under the limit
			// replaced (over-counting until its window ends).
			a.start, a.interval, a.max = windowStart(now, r.Interval), int64(r.Interval/time.Second), r.Max
			a.left = 0
		}
		if a.left > 0 {
			a.left--
			a.mu.Unlock()
			return nil, nil
		}
		if wait := a.refill; wait != nil {
			a.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("admitting a read of %s: %w", scope, ctx.Err())
			}
		}
		wall := time.Now()
		if !a.leased.IsZero() {
			// The block adapts to the rate: doubled when the last one
			// was spent within a quarter of its lease, halved when it
			// lasted more than half.
			switch took := wall.Sub(a.leased); {
			case took < s.allowFor/4:
				a.block = min(2*a.block, maxBlock)
			case took > s.allowFor/2:
				a.block = max(1, a.block/2)
			}
		}
		want, done := a.block, make(chan struct{})
		a.refill = done
		a.mu.Unlock()

		res, err := s.apply(ctx, key, scope, func(c *counters) (any, bool) {
			if refusal := c.over(gated.LimitReads, r, now); refusal != nil {
				return refusal, false
			}
			n := blockSize(r, c.used(gated.LimitReads, r, now), want)
			c.add(gated.LimitReads, r, now, n)
			return n, true
		})

		a.mu.Lock()
		a.refill = nil
		close(done)
		if n, _ := res.(int64); err == nil && n > 0 && a.holds(r, now) {
			// One for this read; the rest for the next ones.
			a.left += n - 1
			a.leased = wall
			s.scheduleReturn(key, scope, a)
		}
		a.mu.Unlock()
		if err != nil {
			// The block may have been counted all the same: an
			// over-count until its window ends, never an admission.
			return nil, err
		}
		refusal, _ := res.(*gated.BudgetRefusal)
		return refusal, nil
	}
}

// untakeRead puts back into the allowance of key a read takeRead admitted
// that the tenant's limit then refused. When the window or the limit
// changed meanwhile, it stays counted (over-counting until its window
// ends).
func (s *Store) untakeRead(key, scope string, r Rate, now time.Time) {
	a := s.allowanceOf(key)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.holds(r, now) {
		a.left++
		s.scheduleReturn(key, scope, a)
	}
}

// scheduleReturn schedules the return of what a has left at the end of
// its lease, unless it is scheduled already; with nothing left, the end
// of the lease still removes a once it is idle. a.mu is held.
func (s *Store) scheduleReturn(key, scope string, a *allowance) {
	if a.due {
		return
	}
	a.due = true
	time.AfterFunc(s.allowFor, func() { s.giveBack(context.Background(), key, scope, a, false) })
}

// giveBack takes what a has left off the record it was leased from, once
// its last block's lease has ended (or at once, with atOnce set), then
// removes a from s.allow if it is idle (forgetIdle). A failure leaves it
// counted until its window ends: an over-count, never an under-count.
func (s *Store) giveBack(ctx context.Context, key, scope string, a *allowance, atOnce bool) error {
	defer s.forgetIdle(key, a)
	a.mu.Lock()
	if rest := s.allowFor - time.Since(a.leased); !atOnce && rest > 0 {
		// A block leased since: its own lease ends later.
		time.AfterFunc(rest, func() { s.giveBack(context.Background(), key, scope, a, false) })
		a.mu.Unlock()
		return nil
	}
	n, start, interval := a.left, a.start, a.interval
	a.left, a.due = 0, false
	a.mu.Unlock()
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	_, err := s.apply(ctx, key, scope, func(c *counters) (any, bool) {
		return nil, c.giveBack(gated.LimitReads, start, interval, n)
	})
	return err
}

// forgetIdle removes a, the allowance of key, from s.allow when nothing
// is left of it, no lease or return is under way and its last lease has
// ended: the agent names are the proposals' own, so an allowance must not
// outlive its use. The next read of key starts a new one.
func (s *Store) forgetIdle(key string, a *allowance) {
	s.allowMu.Lock()
	defer s.allowMu.Unlock()
	if s.allow[key] != a {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.left == 0 && !a.due && a.refill == nil && time.Since(a.leased) >= s.allowFor {
		a.gone = true
		delete(s.allow, key)
	}
}

// dropAllowances forgets every allowance, unreturned (Reset removed the
// records they were leased from).
func (s *Store) dropAllowances() {
	s.allowMu.Lock()
	defer s.allowMu.Unlock()
	for _, a := range s.allow {
		a.mu.Lock()
		a.left = 0
		a.mu.Unlock()
	}
}
