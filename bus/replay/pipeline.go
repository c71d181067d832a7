package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/policies"
)

// A replay is a pipeline. One goroutine reads the audit range and cuts it
// into batches of replayBatchSize messages; a pool of workers decodes each
// batch (the records and the policy.decided data); the calling goroutine
// takes the decoded batches in stream order, checks the range as audit
// verify does, and pairs every verdict with its proposal's policy.decided
// record; the pool then decides the pairs again under the candidate, each
// worker into a report of its own. The reports are summed at the end, and
// the lists they keep (the first flips, the inputs not rebuildable) are
// cut to the first ones in stream order, so the report is the same
// whatever the number of workers and however they are scheduled.

// Config tunes Run. The zero value lists no flips, checks no MACs and
// decides on GOMAXPROCS goroutines.
type Config struct {
	// Show is how many flips, and review changes, the report lists; -1
	// lists all of them.
	Show int
	// Read counts the messages read, for a progress line; may be nil.
	Read *atomic.Int64
	// Keys are the audit keys whose MACs the range check accepts; with
	// none, MACs are not checked.
	Keys [][]byte
	// Reviewers is the candidate reviewer set-up recorded reviews are
	// checked against; nil counts every recorded review stale.
	Reviewers *Reviewers
	// Rereview, when set, runs a candidate reviewer again on the recorded
	// review requests of its persona; Run finishes it.
	Rereview *Rereviewer
	// Anchors are heads kept from an earlier audit verify.
	Anchors []audit.Head
	// Workers is how many goroutines decode and decide; GOMAXPROCS when
	// 0 or less.
	Workers int
}

// replayBatchSize is how many messages a decode task holds, and how many
// verdicts a decide task holds: enough that the hand-over costs little
// beside the work, few enough that every worker gets some.
const replayBatchSize = 256

// replayGCPercent is the garbage collector's target while a replay runs.
// A replay allocates much and keeps little (the policy.decided records
// whose verdicts are still ahead, the batches in flight), so collecting
// at four times the live heap instead of twice costs a few megabytes and
// saves about a tenth of its CPU time (BenchmarkReplay).
const replayGCPercent = 400

// TuneGC sets the process's garbage collector target for a replay and
// returns the function that restores it. It changes a setting of the
// whole process: a command calls it once, around Run.
func TuneGC() (restore func()) {
	old := debug.SetGCPercent(replayGCPercent)
	return func() { debug.SetGCPercent(old) }
}

// replayEvent is one event of a record a replay reads, with the record's
// stream sequence.
type replayEvent struct {
	Seq   uint64
	Event gated.AuditEvent
}

// replayItem is an event of a batch's record, with its data decoded when
// it is a policy.decided event (policy) or a review event (review).
type replayItem struct {
	ev     *replayEvent
	policy *recordedPolicy
	review reviewRecord
}

// replayBatch is a run of messages read in stream order.
type replayBatch struct {
	entries []audit.Entry
	// items holds, for each entry that is a record of a proposal's
	// tenant, its events.
	items [][]replayItem
	// done is closed once the batch is decoded.
	done chan struct{}
}

// decode decodes the batch's messages and the data of the policy.decided
// and review events.
func (b *replayBatch) decode() {
	defer close(b.done)
	b.items = make([][]replayItem, len(b.entries))
	for i := range b.entries {
		e := &b.entries[i]
		e.Decode()
		r := e.Record
		if r == nil || r.Tenant == gated.UnknownTenant {
			continue
		}
		evs := r.Events()
		items := make([]replayItem, len(evs))
		held := make([]replayEvent, len(evs))
		for j, ev := range evs {
			held[j] = replayEvent{Seq: e.Seq, Event: ev}
			it := replayItem{ev: &held[j]}
			switch ev.Event {
			case gated.EventPolicyDecided:
				it.policy = decodeRecordedPolicyValid(ev.Data)
			case gated.EventReviewStarted, gated.EventReviewDone:
				it.review = decodeReviewRecord(it.ev)
			}
			items[j] = it
		}
		b.items[i] = items
	}
}

// replayPair is a verdict event and its proposal's policy.decided event
// (nil when the range holds none).
type replayPair struct {
	r *replayEvent
	p *recordedPolicy
}

// replayTask is work for one worker of the pool, given the worker's own
// report.
type replayTask func(rep *Report)

// Run reads the audit range q selects and decides every recorded
// proposal again under the candidate policy ev, with the personas of reg,
// on cfg.Workers goroutines. The range is checked as audit verify checks
// the stream; a range that is not intact is reported (Report.Intact), not
// returned as an error. Run returns audit.ErrNoStream when there is no
// audit stream, and ctx's error when it is cancelled.
func Run(ctx context.Context, js jetstream.JetStream, q audit.Query, ev *policies.Evaluator,
	reg engine.Personas, cfg Config) (*Report, error) {
	workers := cfg.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	end, err := rangeEnd(ctx, js, q)
	if err != nil {
		return nil, err
	}
	// The pipeline runs on a context of its own, cancelled once it is
	// done; the range check after it runs on the caller's.
	outer := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()

	tasks := make(chan replayTask, 2*workers)
	locals := make([]*Report, workers)
	var pool sync.WaitGroup
	for i := range locals {
		locals[i] = newReport(ev.Revision())
		locals[i].reviewers = cfg.Reviewers
		pool.Go(func() {
			for t := range tasks {
				t(locals[i])
			}
		})
	}
	batches := make(chan *replayBatch, 4*workers)
	var (
		reader    sync.WaitGroup
		readErr   error
		readBusy  time.Duration
		queueWait time.Duration
	)
	q.Undecoded = true
	reader.Go(func() {
		defer close(batches)
		b := &replayBatch{done: make(chan struct{})}
		// hand gives batch b to the pool to decode and to the sequence
		// below, in that order: the sequence never waits for a batch no
		// worker was given.
		hand := func() error {
			t, cur := time.Now(), b
			defer func() { queueWait += time.Since(t) }()
			select {
			case tasks <- func(*Report) { cur.decode() }:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case batches <- cur:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}
		err := audit.Read(ctx, js, q, func(e audit.Entry) error {
			if cfg.Read != nil {
				cfg.Read.Add(1)
			}
			b.entries = append(b.entries, e)
			if len(b.entries) < replayBatchSize {
				return nil
			}
			err := hand()
			b = &replayBatch{entries: make([]audit.Entry, 0, replayBatchSize), done: make(chan struct{})}
			return err
		})
		if err == nil && len(b.entries) > 0 {
			err = hand()
		}
		readErr = err
		readBusy = time.Since(start) - queueWait
	})

	checker := audit.NewChecker(audit.VerifyOptions{Tenant: q.Tenant, Keys: cfg.Keys, Anchors: cfg.Anchors})
	// pending holds the policy.decided records whose verdicts are still
	// ahead, by tenant and proposal.
	pending := map[[2]string]*recordedPolicy{}
	pairs := make([]replayPair, 0, replayBatchSize)
	decide := func() bool {
		todo := pairs
		pairs = make([]replayPair, 0, replayBatchSize)
		select {
		case tasks <- func(rep *Report) {
			for _, p := range todo {
				rep.verdict(ctx, ev, reg, p.r, p.p, cfg.Show)
			}
		}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	// starved is the time the sequence waited for the reader; rerr is
	// why a --rereview job could not be queued.
	var (
		starved time.Duration
		rerr    error
	)
sequence:
	for {
		t := time.Now()
		b, ok := <-batches
		starved += time.Since(t)
		if !ok {
			break
		}
		select {
		case <-b.done:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break sequence
		}
		for i, e := range b.entries {
			checker.Add(e)
			for _, it := range b.items[i] {
				r := it.ev
				key := [2]string{r.Event.Tenant, r.Event.ProposalID}
				switch r.Event.Event {
				case gated.EventPolicyDecided:
					pending[key] = it.policy
				case gated.EventReviewStarted, gated.EventReviewDone:
					if p := pending[key]; p != nil {
						p.addReview(r, it.review)
					}
				case gated.EventVerdict:
					p := pending[key]
					pairs = append(pairs, replayPair{r: r, p: p})
					delete(pending, key)
					if len(pairs) == replayBatchSize && !decide() {
						break sequence
					}
					// The pair's policy record takes no more reviews once its
					// verdict is read, so the pool may read it from here on.
					if cfg.Rereview != nil {
						if rerr = cfg.Rereview.submit(ctx, r, p); rerr != nil {
							break sequence
						}
					}
				}
			}
		}
	}
	if len(pairs) > 0 && ctx.Err() == nil {
		decide()
	}
	cancelled := ctx.Err()
	if cancelled != nil || rerr != nil {
		// The sequence stopped first: stop the reader. A complete read
		// leaves the context alone, as the pool still decides on it (and
		// starts the candidate's plugins with it).
		cancel()
	}
	reader.Wait()
	// Neither the reader nor the sequence gives the pool work any more.
	close(tasks)
	pool.Wait()
	var rereview *RereviewReport
	if cfg.Rereview != nil {
		rereview = cfg.Rereview.finish()
	}
	switch {
	case rerr != nil:
		return nil, fmt.Errorf("re-reviewing: %w", rerr)
	case readErr != nil && cancelled == nil:
		return nil, fmt.Errorf("reading the audit stream: %w", readErr)
	case cancelled != nil:
		return nil, fmt.Errorf("reading the audit stream: %w", cancelled)
	}

	total := time.Since(start)
	rep := newReport(ev.Revision())
	for _, l := range locals {
		rep.merge(l)
	}
	rep.Rereview = rereview
	slices.SortFunc(rep.Shown, func(a, b Flip) int { return cmp.Compare(a.Seq, b.Seq) })
	rep.Shown = firstN(rep.Shown, cfg.Show)
	slices.SortFunc(rep.ReviewChanges, func(a, b ReviewChange) int { return cmp.Compare(a.Seq, b.Seq) })
	rep.ReviewChanges = firstN(rep.ReviewChanges, cfg.Show)
	bySeq := func(a, b Missing) int { return cmp.Compare(a.Seq, b.Seq) }
	slices.SortFunc(rep.UnrebuildableNamed, bySeq)
	rep.UnrebuildableNamed = firstN(rep.UnrebuildableNamed, maxNamed)
	slices.SortFunc(rep.ReviewStaleNamed, bySeq)
	rep.ReviewStaleNamed = firstN(rep.ReviewStaleNamed, maxNamed)

	chk, anchored := checker.Finish(end)
	if rep.Integrity, err = checkIntegrity(outer, js, q, chk, anchored); err != nil {
		return nil, err
	}
	rep.FirstSeq, rep.LastSeq, rep.Records = chk.FirstSeq, chk.LastSeq, chk.Records
	rep.Problems, rep.Intact = chk.Problems, len(chk.Problems) == 0
	rep.Workers = workers
	rep.Seconds = total.Seconds()
	rep.ReadSeconds = readBusy.Seconds()
	rep.DecideSeconds = (total - starved).Seconds()
	if rep.ReadSeconds > 0 {
		rep.ReadRate = float64(chk.Messages) / rep.ReadSeconds
	}
	if rep.DecideSeconds > 0 {
		rep.DecideRate = float64(rep.Replayed) / rep.DecideSeconds
	}
	if rep.Seconds > 0 {
		rep.Rate = float64(rep.Replayed) / rep.Seconds
	}
	return rep, nil
}

// RangeSize estimates how many messages Run reads of the range q
// selects, for a progress line: the stream's messages from the start
// sequence on. It returns audit.ErrNoStream when there is no audit
// stream.
func RangeSize(ctx context.Context, js jetstream.JetStream, q audit.Query) (int, error) {
	s, err := js.Stream(ctx, audit.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, audit.ErrNoStream
	}
	if err != nil {
		return 0, fmt.Errorf("opening stream %s: %w", audit.Stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading stream %s: %w", audit.Stream, err)
	}
	first := max(info.State.FirstSeq, q.StartSeq)
	if info.State.LastSeq < first {
		return 0, nil
	}
	return int(info.State.LastSeq - first + 1), nil
}
