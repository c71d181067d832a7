package budget

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// Refusals are counted in this process first and written to the records
// in the background: every refusalFlush, one compare-and-set of each
// record that counted any carries all of them, so a burst of refusals
// costs one write per record per interval and a decision never waits on
// one. The counts this process has not written yet are added to what the
// policy sees (State), so its own refusals show at once; another
// process's show once that process has written them, at most one interval
// and one write later. A process that dies unflushed (kill -9) loses what
// it counted since its last write: at most one interval's refusals. A
// write that fails keeps its counts for the next, which is tried one
// interval later; what is kept is bounded, like a record, to the refusal
// window's slots. docs/BUDGETS.md gives the bounds.

// refusalFlush is how often the refusals counted are written.
const refusalFlush = 200 * time.Millisecond

// flushWrites bounds the records a flush writes at once.
const flushWrites = 8

// pendingRefusals are the refusals of one record this process counted
// and has not written yet: counted holds those not yet taken by a write,
// writing those of the write under way.
type pendingRefusals struct {
	tenant, scope string
	counted       *counters
	writing       []refusalSlot
}

// Refused implements engine.Budgets: the refusal is counted in this
// process and written with the next flush. It never waits on the store.
func (s *Store) Refused(_ context.Context, tenant, agent string, kind engine.RefusalKind, now time.Time) error {
	t, budget := ms(now), kind == engine.RefusedBudget
	s.refMu.Lock()
	defer s.refMu.Unlock()
	s.pendingOf(tenant, tenantKey(tenant), tenantScope(tenant)).counted.countRefusal(t, budget)
	s.pendingOf(tenant, agentKey(tenant, agent), agentScope(tenant, agent)).counted.countRefusal(t, budget)
	s.scheduleFlush()
	return nil
}

// pendingOf returns the pending refusals of the record under key. s.refMu
// is held.
func (s *Store) pendingOf(tenant, key, scope string) *pendingRefusals {
	p, ok := s.refusals[key]
	if !ok {
		p = &pendingRefusals{tenant: tenant, scope: scope, counted: newCounters(scope)}
		s.refusals[key] = p
	}
	return p
}

// scheduleFlush schedules the next write of the pending refusals, unless
// it is scheduled already. s.refMu is held.
func (s *Store) scheduleFlush() {
	if s.refDue {
		return
	}
	s.refDue = true
	time.AfterFunc(s.refEvery, func() { _ = s.flushRefusals() })
}

// flushRefusals writes every record's pending refusals, the records side
// by side, one compare-and-set each (shared with the record's other
// changes that ride in the same write). A record whose write fails keeps its
// refusals for the next flush, one interval later. Flushes run one at a
// time.
func (s *Store) flushRefusals() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	type write struct {
		key string
		p   *pendingRefusals
	}
	var writes []write
	s.refMu.Lock()
	s.refDue = false
	for key, p := range s.refusals {
		if len(p.counted.RefusalSlots) == 0 {
			delete(s.refusals, key)
			continue
		}
		p.writing, p.counted.RefusalSlots = p.counted.RefusalSlots, nil
		writes = append(writes, write{key, p})
	}
	s.refMu.Unlock()

	errs := make([]error, len(writes))
	var wg sync.WaitGroup
	slots := make(chan struct{}, flushWrites)
	for i, w := range writes {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			// Not bounded by a caller: the write's own timeout bounds it,
			// and its answer says whether the refusals were counted.
			_, errs[i] = s.apply(context.Background(), w.key, w.p.scope, func(c *counters) (any, bool) {
				c.prune(latest(w.p.writing))
				for _, r := range w.p.writing {
					c.addRefusals(r)
				}
				return nil, true
			})
		})
	}
	wg.Wait()

	s.refMu.Lock()
	defer s.refMu.Unlock()
	for i, w := range writes {
		if errs[i] != nil {
			// Kept for the next flush, pruned to the window.
			for _, r := range w.p.writing {
				w.p.counted.addRefusals(r)
			}
			w.p.counted.prune(latest(w.p.counted.RefusalSlots))
			s.scheduleFlush()
			s.emit(Event{Tenant: w.p.tenant, RefusalsUnwritten: errs[i]})
		}
		w.p.writing = nil
	}
	return errors.Join(errs...)
}

// latest is the time of the latest refusal of slots, by the clock that
// stamped it: what is pruned is what its window no longer holds.
func latest(slots []refusalSlot) time.Time {
	var t int64
	for _, r := range slots {
		t = max(t, r.Last)
	}
	return time.UnixMilli(t)
}

// Stop writes the refusals this process counted and has not written yet.
// It returns when they are written, or fail to be, or when ctx ends.
func (s *Store) Stop(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- s.flushRefusals() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// withPending adds to st, the counters of the record under key, the
// refusals this process counted and has not written yet (those of a
// write under way too: for the moment between its write and its end
// they are seen twice, never not at all).
func (s *Store) withPending(key string, st gated.BudgetCounters, now time.Time) gated.BudgetCounters {
	s.refMu.Lock()
	defer s.refMu.Unlock()
	p, ok := s.refusals[key]
	if !ok {
		return st
	}
	for _, slots := range [][]refusalSlot{p.counted.RefusalSlots, p.writing} {
		n, budget := refusalsAt(slots, now)
		st.Refusals += n
		st.BudgetRefusals += budget
	}
	return st
}
