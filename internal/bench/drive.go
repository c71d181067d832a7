package bench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Sender sends proposal i of path p and waits for its answer. It returns
// the answer; an *UnexpectedError when the answer is not the one the path
// expects; any other error when there was no answer.
type Sender func(ctx context.Context, p Path, i int) (Answer, error)

// Answer is what one send got back.
type Answer struct {
	// Size is the answer's size in bytes.
	Size int
	// Stages splits the wait at gated's decision; nil when the answer
	// does not tell (the floor's).
	Stages *StageTimes
}

// StageTimes splits one proposal's wait at the moments gated started
// deciding it and decided it. Deciding is gated's own measure (the
// verdict's latency_ms); ToGated and AfterDeciding compare this process's
// clock with gated's (the verdict's decided_at), so they are only set when
// both run on one host.
type StageTimes struct {
	// ToGated runs from the publish to the moment gated began deciding:
	// the stream's store, the delivery to gated, its hand-over to a
	// decider.
	ToGated time.Duration
	// Deciding runs from there to the verdict: the policy, and the review
	// if there is one.
	Deciding time.Duration
	// AfterDeciding runs from the verdict to its arrival here: the audit
	// trail sealed, the verdict stored and published.
	AfterDeciding time.Duration
	// SameClock is set when ToGated and AfterDeciding were measured.
	SameClock bool
}

// record files one send's result.
func record(rec *Recorder, start time.Time, lat time.Duration, a Answer, err error) {
	switch {
	case err == nil:
		rec.Done(start, lat, true, a.Size)
		rec.stages(a.Stages)
	case unexpected(err):
		rec.Done(start, lat, false, a.Size)
		rec.note(err)
	case errors.Is(err, context.Canceled):
	default:
		rec.Fail(err)
	}
}

// Plan is how many proposals each path sends, and how many it keeps in
// flight.
type Plan struct {
	Counts      map[Path]int
	Concurrency Concurrency
	// Ramp spreads the first sends of each path's senders evenly over
	// this long, so that a large closed loop reaches its steady state
	// without one burst of Concurrency proposals at the start. Zero
	// starts every sender at once.
	Ramp time.Duration
}

// Total is the proposals of the plan.
func (p Plan) Total() int {
	n := 0
	for _, c := range p.Counts {
		n += c
	}
	return n
}

// Drive runs the plan: each path has its own closed loop of
// Concurrency[path] senders, so a slow path never holds up a fast one in
// the fleet. Sender k of C starts k/C of plan.Ramp after the first. done
// counts answers and failures as they happen.
func Drive(ctx context.Context, plan Plan, send Sender, done *atomic.Int64) map[Path]*Recorder {
	recs := map[Path]*Recorder{}
	var wg sync.WaitGroup
	for _, p := range Paths {
		n := plan.Counts[p]
		if n <= 0 {
			continue
		}
		rec := &Recorder{}
		recs[p] = rec
		var next atomic.Int64
		senders := min(max(plan.Concurrency[p], 1), n)
		for k := range senders {
			wg.Go(func() {
				if !sleep(ctx, plan.Ramp*time.Duration(k)/time.Duration(senders)) {
					return
				}
				for {
					i := int(next.Add(1)) - 1
					if i >= n || ctx.Err() != nil {
						return
					}
					start := time.Now()
					a, err := send(ctx, p, i)
					record(rec, start, time.Since(start), a, err)
					if done != nil {
						done.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	return recs
}

// sleep waits d, or less when ctx ends first; it reports whether ctx is
// still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Probe sends policy-decided proposals (denied and read in turn) at a
// fixed rate until ctx ends, each on its own, whatever the answers of
// earlier ones: an open loop, so the latency it records is what a new
// proposal meets while the rest of the load runs. Latency counts from the
// moment a probe was due, not from when it went out.
func Probe(ctx context.Context, rate float64, send Sender) *Recorder {
	rec := &Recorder{}
	if rate <= 0 {
		return rec
	}
	every := time.Duration(float64(time.Second) / rate)
	var wg sync.WaitGroup
	begin := time.Now()
	for i := 0; ; i++ {
		due := begin.Add(time.Duration(i) * every)
		if !sleep(ctx, time.Until(due)) {
			wg.Wait()
			return rec
		}
		p := PathDenied
		if i%2 == 1 {
			p = PathRead
		}
		wg.Go(func() {
			// A probe sent before the end is waited for after it.
			a, err := send(context.WithoutCancel(ctx), p, i)
			record(rec, due, time.Since(due), a, err)
		})
	}
}
