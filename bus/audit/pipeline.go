package audit

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// errCodeWrongLastMsgID is JetStream's answer to a message whose
// Nats-Expected-Last-Msg-Id is not the stream's last message id.
const errCodeWrongLastMsgID jetstream.ErrorCode = 10070

// defaultAuditWindow bounds the records a pipelined writer has published
// and not yet seen acknowledged.
const defaultAuditWindow = 1024

// auditPipe publishes a writer's records without waiting for each
// acknowledgement (PublishPipelined), while keeping every tenant's chain
// checked by the stream:
//
//   - Records go out in runs. Every record of a run but the first names the
//     one published before it, of any tenant, as the stream's expected last
//     message (Nats-Expected-Last-Msg-Id, against the Nats-Msg-Id each
//     record carries). A stored record therefore directly follows its
//     predecessor in the run, so the run is contiguous in the stream up to
//     it, and once a record fails every later record of the run fails too.
//   - The first record of each tenant in a run also names the tenant's last
//     record, read from the stream or acknowledged in an earlier run, as
//     the tenant's expected last record, as one-at-a-time publishing does.
//     Contiguity carries that check over to the tenant's later records of
//     the run: no other writer can have extended the chain in between.
//
// When a record fails, the writer stops publishing, waits for every
// record in flight (the rest of the run fails), forgets every head and
// starts a new run with the failed records, in their order.
type auditPipe struct {
	w *shard

	// Owned by the writer goroutine.
	run     uint64 // the current run; heads learned in it have run == this
	prefix  string // this writer's message ids are prefix + a counter
	counter uint64
	lastID  string // id of the run's last record; empty at a run's start

	// pending carries published records, and barriers, to the acker in
	// publish order.
	pending chan pipeEntry
	broken  atomic.Bool   // a record of the run failed
	wake    chan struct{} // wakes the writer when a record fails

	mu     sync.Mutex
	failed []*auditItem // records to publish again, in publish order
}

// pipeEntry is a published record awaiting its acknowledgement, or a
// barrier: the acker answers it once everything published before it is
// settled.
type pipeEntry struct {
	it      *auditItem
	fut     jetstream.PubAckFuture
	sent    time.Time
	barrier chan []*auditItem
}

func newAuditPipe(w *shard) *auditPipe {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &auditPipe{
		w: w, run: 1, prefix: hex.EncodeToString(b[:]) + ".",
		pending: make(chan pipeEntry, defaultAuditWindow), wake: make(chan struct{}, 1),
	}
}

// runPipelined is the writer loop of PublishPipelined.
func (w *shard) runPipelined() {
	p := newAuditPipe(w)
	var acker sync.WaitGroup
	acker.Go(p.ack)
	defer func() {
		close(p.pending)
		acker.Wait()
	}()
	var queue []*auditItem // records to publish before reading w.in again
	open := true
	for {
		if p.broken.Load() {
			// The records that failed are older than any still queued.
			queue = append(p.resync(), queue...)
			continue
		}
		var it *auditItem
		switch {
		case len(queue) > 0:
			it, queue = queue[0], queue[1:]
		case open:
			select {
			case it, open = <-w.in:
			case <-p.wake: // a record in flight failed
				continue
			}
			if !open {
				continue
			}
		default:
			// Closed and nothing left to publish: settle what is in flight,
			// and publish again what failed.
			if queue = p.resync(); len(queue) == 0 {
				return
			}
			continue
		}
		if err := it.trail.failed(); err != nil {
			it.settle(0, err)
			continue
		}
		if err := w.a.ctx.Err(); err != nil {
			it.settle(0, fmt.Errorf("storing audit event on %s: %w", it.ev.subject, err))
			continue
		}
		p.publish(it)
	}
}

// publish sends one record of the run.
func (p *auditPipe) publish(it *auditItem) {
	w := p.w
	tenant := it.ev.tenant
	h, err := w.head(tenant)
	if err != nil {
		it.settle(0, err)
		return
	}
	c := h.next()
	msg, digest := it.ev.msg(c, w.a.signer)
	if h.run != p.run {
		expectHead(msg, tenant, h.seq)
	}
	p.counter++
	id := p.prefix + strconv.FormatUint(p.counter, 36)
	msg.Header.Set(jetstream.MsgIDHeader, id)
	if p.lastID != "" {
		msg.Header.Set(jetstream.ExpectedLastMsgIDHeader, p.lastID)
	}
	fut, err := w.a.js.PublishMsgAsync(msg)
	if err != nil {
		// Not sent: the records after it would name it as their
		// predecessor, so the run ends here.
		p.broken.Store(true)
		it.settle(0, fmt.Errorf("storing audit event on %s: %w", it.ev.subject, err))
		return
	}
	p.lastID = id
	w.setHead(tenant, chainHead{n: c.N, digest: digest, exists: true, run: p.run})
	p.pending <- pipeEntry{it: it, fut: fut, sent: time.Now()}
}

// resync waits until every record in flight is settled, then starts a
// new run. It returns the records to publish again, in their order.
func (p *auditPipe) resync() []*auditItem {
	done := make(chan []*auditItem, 1)
	p.pending <- pipeEntry{barrier: done}
	failed := <-done
	if !p.broken.Swap(false) && len(failed) == 0 {
		return nil
	}
	clear(p.w.heads)
	p.run++
	p.lastID = ""
	if len(failed) > 0 && failed[0].attempts > 0 {
		// A conflict with another writer: give it room.
		p.w.backoff(failed[0].attempts - 1)
	}
	return failed
}

// ack settles published records in publish order; it runs on its own
// goroutine until pending is closed.
func (p *auditPipe) ack() {
	w := p.w
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for e := range p.pending {
		if e.barrier != nil {
			p.mu.Lock()
			failed := p.failed
			p.failed = nil
			p.mu.Unlock()
			e.barrier <- failed
			continue
		}
		var (
			ack *jetstream.PubAck
			err error
		)
		select {
		case ack = <-e.fut.Ok():
		case err = <-e.fut.Err():
		default:
			timer.Reset(max(time.Until(e.sent.Add(w.a.cfg.PublishTimeout)), 0))
			select {
			case ack = <-e.fut.Ok():
			case err = <-e.fut.Err():
			case <-timer.C:
				err = fmt.Errorf("no acknowledgement within %s", w.a.cfg.PublishTimeout)
			case <-w.a.ctx.Done():
				err = w.a.ctx.Err()
			}
			timer.Stop()
		}
		if err == nil {
			w.a.stats.publishes.Add(1)
			w.a.stats.records.Add(1)
			e.it.settle(ack.Sequence, nil)
			continue
		}
		p.fail(e.it, err)
	}
}

// fail handles a record of the run that was not stored, or may not have
// been. The first failure of a run is its cause and counts against the
// record's retries; the records after it fail because it did.
func (p *auditPipe) fail(it *auditItem, err error) {
	w := p.w
	cause := !p.broken.Swap(true)
	defer func() {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}()
	retry := false
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeWrongLastMsgID && !cause:
		retry = true
	case retryable(err) && w.a.ctx.Err() == nil:
		it.attempts++
		retry = it.attempts <= maxPublishRetries
		w.a.stats.retries.Add(1)
		if isConflict(err) {
			w.a.stats.conflicts.Add(1)
		}
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeWrongLastMsgID && w.a.ctx.Err() == nil:
		// Another writer stored a record between two runs of this one.
		it.attempts++
		retry = it.attempts <= maxPublishRetries
		w.a.stats.retries.Add(1)
		w.a.stats.conflicts.Add(1)
	}
	if !retry {
		it.settle(0, fmt.Errorf("storing audit event on %s: %w", it.ev.subject, err))
		return
	}
	p.mu.Lock()
	p.failed = append(p.failed, it)
	p.mu.Unlock()
}
