package budget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// read returns the record of key, an empty one when there is none. The
// record is always read afresh: from a read of the bucket that starts
// after read was called. Reads of one key that wait at the same time
// share one such read (every proposal reads two records for its policy
// input, most of them the same two). When the record read is at the
// revision this process last wrote or read for its changes, the copy
// decoded then is returned instead of decoding the same bytes again. The
// returned record is shared: callers only read it.
func (s *Store) read(ctx context.Context, key, scope string) (*counters, error) {
	r := &keyRead{scope: scope, done: make(chan struct{})}
	ks := s.state(key)
	ks.mu.Lock()
	ks.readers = append(ks.readers, r)
	if !ks.reading {
		ks.reading = true
		go s.readLoop(key, ks)
	}
	ks.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("reading budget counters %s: %w", key, ctx.Err())
	}
	if r.err != nil {
		return nil, r.err
	}
	if !r.found {
		return newCounters(scope), nil
	}
	if r.c.Scope != scope {
		// Decoded for another caller's scope: read for this one's,
		// which checks the record's own.
		return decodeCounters(r.raw, scope)
	}
	return r.c, nil
}

// keyRead is one caller waiting in read for a record.
type keyRead struct {
	scope string
	done  chan struct{}
	found bool
	c     *counters
	raw   []byte
	err   error
}

// readLoop reads the record of key from the bucket for the callers that
// wait for it, once for all of those that wait when the read starts, and
// again while more arrive. Every caller thus gets a read that started
// after it called.
func (s *Store) readLoop(key string, ks *keyState) {
	for {
		ks.mu.Lock()
		batch := ks.readers
		ks.readers = nil
		if len(batch) == 0 {
			ks.reading = false
			ks.mu.Unlock()
			return
		}
		ks.mu.Unlock()
		var res keyRead
		ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		e, err := s.kv.Get(ctx, key)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			res.err = fmt.Errorf("reading budget counters %s: %w", key, err)
		default:
			res.found, res.raw = true, e.Value()
			if res.c = ks.at(e.Revision()); res.c == nil || res.c.Scope != batch[0].scope {
				res.c, res.err = decodeCounters(res.raw, batch[0].scope)
			}
		}
		for _, r := range batch {
			r.found, r.c, r.raw, r.err = res.found, res.c, res.raw, res.err
			close(r.done)
		}
	}
}

// keyState is this process's pending changes of one record and the
// record as it last saw it.
type keyState struct {
	mu      sync.Mutex
	pending []*change
	running bool
	// readers wait for the next read of the record; reading is set
	// while a readLoop serves them.
	readers []*keyRead
	reading bool
	// cached is the record at rev as this process last read or wrote it;
	// nil when unknown. Only the commit leader sets them, under mu, and a
	// record once cached is never changed (a commit changes a clone), so
	// read may hand it out.
	cached *counters
	rev    uint64
}

// set records c as the record at rev (c nil: unknown).
func (ks *keyState) set(c *counters, rev uint64) {
	ks.mu.Lock()
	ks.cached, ks.rev = c, rev
	ks.mu.Unlock()
}

// at returns the cached record when it is the one at rev, else nil.
func (ks *keyState) at(rev uint64) *counters {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.cached == nil || ks.rev != rev {
		return nil
	}
	return ks.cached
}

// change is one change of a record: fn changes c and returns its result
// and whether it changed anything.
type change struct {
	fn   func(c *counters) (any, bool)
	res  any
	err  error
	done chan struct{}
}

func (s *Store) state(key string) *keyState {
	s.mu.Lock()
	defer s.mu.Unlock()
	ks, ok := s.keys[key]
	if !ok {
		ks = &keyState{}
		s.keys[key] = ks
	}
	return ks
}

// apply runs fn on the record of key under a compare-and-set. Changes
// that arrive while another is being written are applied together, in
// order, in the next write.
func (s *Store) apply(ctx context.Context, key, scope string, fn func(c *counters) (any, bool)) (any, error) {
	ch := &change{fn: fn, done: make(chan struct{})}
	ks := s.state(key)
	ks.mu.Lock()
	ks.pending = append(ks.pending, ch)
	if !ks.running {
		// A goroutine of its own writes the batches until no change
		// waits, not the first caller: under a steady flow of changes it
		// would write for the others and never return to its own
		// proposal. The writes are bounded by their own timeout, not by a
		// caller's context, since every caller's changes ride on them.
		ks.running = true
		go s.commitLoop(key, scope, ks)
	}
	ks.mu.Unlock()
	select {
	case <-ch.done:
		return ch.res, ch.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// commitLoop writes the changes waiting on the record of key, batch by
// batch, until none waits.
func (s *Store) commitLoop(key, scope string, ks *keyState) {
	for {
		ks.mu.Lock()
		batch := ks.pending
		ks.pending = nil
		if len(batch) == 0 {
			ks.running = false
			ks.mu.Unlock()
			return
		}
		ks.mu.Unlock()
		s.commit(key, scope, ks, batch)
	}
}

// commit applies batch to the record of key and writes it with a
// compare-and-set, reading it again and retrying while other processes
// write it first.
func (s *Store) commit(key, scope string, ks *keyState, batch []*change) {
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	finish := func(err error) {
		for _, ch := range batch {
			if err != nil {
				ch.res, ch.err = nil, err
			}
			close(ch.done)
		}
	}
	for attempt := 0; ; attempt++ {
		// fresh says the record was read in this attempt: a batch that
		// changes nothing (a refusal, a release of no lease) is only
		// answered from a record known to be current, since only a write
		// would tell a cached one is stale.
		fresh := ks.cached == nil
		if ks.cached == nil {
			e, err := s.kv.Get(ctx, key)
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound):
				ks.set(newCounters(scope), 0)
			case err != nil:
				finish(fmt.Errorf("reading budget counters %s: %w", key, err))
				return
			default:
				c, err := decodeCounters(e.Value(), scope)
				if err != nil {
					finish(err)
					return
				}
				ks.set(c, e.Revision())
			}
		}
		next := ks.cached.clone()
		changed := false
		for _, ch := range batch {
			var ok bool
			ch.res, ok = ch.fn(next)
			changed = changed || ok
		}
		if !changed {
			if fresh {
				finish(nil)
				return
			}
			ks.set(nil, 0)
			continue
		}
		data, err := json.Marshal(next)
		if err != nil {
			finish(fmt.Errorf("encoding budget counters %s: %w", key, err))
			return
		}
		var rev uint64
		if ks.rev == 0 {
			rev, err = s.kv.Create(ctx, key, data)
		} else {
			rev, err = s.kv.Update(ctx, key, data, ks.rev)
		}
		if err == nil {
			ks.set(next, rev)
			finish(nil)
			return
		}
		ks.set(nil, 0)
		if !casConflict(err) {
			finish(fmt.Errorf("writing budget counters %s: %w", key, err))
			return
		}
		// Another gated wrote first: read again after a short, jittered
		// pause, so that two writers do not collide in step.
		pause := time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 5)))
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			finish(fmt.Errorf("%w: %s: %v", ErrBusy, key, ctx.Err()))
			return
		}
	}
}

func casConflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
