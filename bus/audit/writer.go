package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gated/gated"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/jsonscan"
	"github.com/gated/gated/internal/telemetry"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Writer writes gated's audit records to the GATED_AUDIT stream: one per
// gated process, shared by every delivery's trail.
//
// Each tenant's records form one hash chain over every gated instance:
// record n carries the SHA-256 of record n-1. A writer takes every event
// queued for it and publishes them as one JetStream atomic batch (group
// commit: one round trip, nothing interleaves), the first record of each
// tenant carrying the stream sequence of the tenant's last record as an
// expected last subject sequence. When another instance wrote first, the
// batch is refused whole; the writer reloads the heads, re-chains and
// retries. Where batches cost more than they save (see PublishAuto), or
// the server does not take them, records go one at a time with the same
// checks.
type Writer struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	cfg    Config
	signer auditSigner
	log    *zap.Logger

	// batching is true while records go out as atomic batches;
	// pipelined, when they go out as PublishPipelined runs.
	batching  atomic.Bool
	pipelined bool
	stats     struct{ records, publishes, conflicts, retries atomic.Uint64 }
	writers   []*shard

	// mu guards closed: Close closes the writers' queues under the write
	// lock, so no Record sends on a closed queue. A Record holds the read
	// lock while it waits on a full queue, so Close first closes closing,
	// which wakes every such Record, before it takes the write lock.
	mu          sync.RWMutex
	closed      bool
	closing     chan struct{}
	closingOnce sync.Once
	// ctx bounds the writers' publishes; Close cancels it once its own
	// deadline has passed.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewWriter opens the audit stream, decides between atomic batches and
// one-at-a-time publishing, and starts the writers. The stream must exist
// (bus.Setup creates it): else the error wraps ErrNoStream. Close the
// Writer to drain it.
func NewWriter(ctx context.Context, js jetstream.JetStream, cfg Config) (*Writer, error) {
	nc := js.Conn()
	cfg, err := cfg.withDefaults(nc)
	if err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoStream
	}
	if err != nil {
		return nil, fmt.Errorf("opening stream %s: %w", Stream, err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	a := &Writer{
		nc: nc, js: js, stream: stream, cfg: cfg, signer: newAuditSigner(cfg.Key), log: cfg.Log,
		ctx: wctx, cancel: cancel, closing: make(chan struct{}),
	}
	info := stream.CachedInfo()
	switch {
	case cfg.Publish == PublishOneAtATime:
	case cfg.Publish == PublishPipelined:
		a.pipelined = true
	case cfg.Publish == PublishAuto && info != nil && info.Config.Replicas <= 1 && info.Config.Storage == jetstream.FileStorage:
		a.log.Debug("audit records are pipelined: atomic batches on an R1 file stream are synced to disk one by one")
		a.pipelined = true
	case info == nil || !info.Config.AllowAtomicPublish:
		a.log.Warn("the audit stream does not allow atomic batches; audit records are published one at a time",
			zap.String("stream", Stream))
	case !serverAtLeast(nc.ConnectedServerVersion(), 2, 12):
		a.log.Warn("the NATS server predates atomic batches (2.12); audit records are published one at a time",
			zap.String("server_version", nc.ConnectedServerVersion()))
	default:
		a.batching.Store(true)
	}
	writers, run := cfg.Writers, (*shard).run
	if a.pipelined {
		// A run is contiguous in the stream: one writer publishes it all.
		writers, run = 1, (*shard).runPipelined
	}
	heads := max(cfg.HeadCache/writers, 1)
	for range writers {
		w := &shard{a: a, in: make(chan *auditItem, cfg.QueueLen), heads: make(map[string]chainHead), maxHeads: heads}
		a.writers = append(a.writers, w)
		a.wg.Go(func() { run(w) })
	}
	return a, nil
}

// Batching reports whether records go out as atomic batches (true) or
// not: one at a time, or pipelined (see Pipelined).
func (a *Writer) Batching() bool { return a.batching.Load() }

// Pipelined reports whether records go out as PublishPipelined runs.
func (a *Writer) Pipelined() bool { return a.pipelined }

// Stats counts what a Writer did since it started.
type Stats struct {
	// Records stored, and Publishes: the round trips that stored them (an
	// atomic batch or a single record each).
	Records, Publishes uint64
	// Conflicts: publishes refused because another gated instance
	// extended a chain first. Retries: publishes tried again, conflicts
	// included.
	Conflicts, Retries uint64
}

// Stats returns the Writer's counters.
func (a *Writer) Stats() Stats {
	return Stats{
		Records: a.stats.records.Load(), Publishes: a.stats.publishes.Load(),
		Conflicts: a.stats.conflicts.Load(), Retries: a.stats.retries.Load(),
	}
}

// KeyID is the id of the key records are MACed with, or empty when the
// Writer has no key.
func (a *Writer) KeyID() string { return a.signer.keyID }

// Instance is the name the Writer gives events that name no instance.
func (a *Writer) Instance() string { return a.cfg.Instance }

// Trail starts the audit trail of one delivery. It implements
// engine.AuditTrail; it is safe for concurrent use.
func (a *Writer) Trail() engine.AuditTrail {
	return &auditTrail{a: a, done: make(chan struct{})}
}

// Close stops taking events and waits until every queued event is
// stored or has failed its trail. A Record or Seal waiting on a full
// queue fails with ErrClosed. When ctx ends first, the writers'
// publishes are cancelled, the events still queued fail their trails,
// and Close returns ctx's error once the writers have stopped (which they
// do promptly: everything they wait on is bounded by the cancelled
// context).
func (a *Writer) Close(ctx context.Context) error {
	// Wake the Records blocked on a full queue, which hold the read lock,
	// so that the write lock is not held up by a writer that is stuck.
	a.closingOnce.Do(func() { close(a.closing) })
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		for _, w := range a.writers {
			close(w.in)
		}
	}
	a.mu.Unlock()
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
		a.cancel()
		return nil
	case <-ctx.Done():
		a.cancel()
		<-done
		return fmt.Errorf("draining the audit queue: %w", ctx.Err())
	}
}

// enqueue hands a record of trail t to the writer that owns its tenant.
func (a *Writer) enqueue(ctx context.Context, t *auditTrail, evs []gated.AuditEvent, final bool) error {
	enc, err := encodeRecord(evs, true) // Record and Seal checked every event
	if err != nil {
		return err
	}
	enc.compress = !a.cfg.Uncompressed
	if size := enc.size() + auditMsgOverhead; int64(size) > a.nc.MaxPayload() {
		return fmt.Errorf("audit record %s of about %d bytes exceeds the NATS max payload of %d bytes", evs[len(evs)-1].Event, size, a.nc.MaxPayload())
	}
	it := &auditItem{ev: enc, trail: t, final: final, events: len(evs)}
	w := a.writers[shardOf(enc.tenant, len(a.writers))]
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return ErrClosed
	}
	select {
	case w.in <- it:
		return nil
	default:
	}
	// The queue is full. Wait for room holding the read lock (the queue
	// cannot be closed meanwhile), but give way to Close.
	select {
	case w.in <- it:
		return nil
	case <-a.closing:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("queueing audit record %s: %w", evs[len(evs)-1].Event, ctx.Err())
	}
}

// isClosed reports whether Close has begun.
func (a *Writer) isClosed() bool {
	select {
	case <-a.closing:
		return true
	default:
		return false
	}
}

// checkEvent refuses an event no record can hold, when it is recorded.
func checkEvent(ev gated.AuditEvent) error {
	switch t := bytes.TrimSpace(ev.Data); {
	case !validAuditTenant(ev.Tenant):
		return fmt.Errorf("audit event %s: tenant %q is not a tenant token", ev.Event, ev.Tenant)
	case !validEventName(ev.Event):
		return fmt.Errorf("audit event name %q is not an event name", ev.Event)
	case len(t) > 0 && !jsonscan.Valid(t):
		return fmt.Errorf("encoding audit event %s: data is not JSON", ev.Event)
	}
	return nil
}

func shardOf(tenant string, n int) int {
	if n == 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(tenant))
	return int(h.Sum32() % uint32(n))
}

// auditTrail is the trail of one delivery. It holds the events recorded
// until the trail is flushed or sealed, and stores them as one record:
// the events of a proposal recorded with nothing slow in between share
// one record, its envelope and its chain link.
type auditTrail struct {
	a *Writer

	// enq keeps the trail's records in order from taking the held events
	// to queueing them; it is not held by the writers, so a Record waiting
	// for room in a full queue cannot block them.
	enq sync.Mutex

	mu       sync.Mutex
	held     []gated.AuditEvent // recorded, not yet queued
	heldSize int
	pending  int // records queued and not yet stored or failed
	sealed   bool
	err      error
	finalSeq uint64
	done     chan struct{} // closed once sealed and nothing is pending
}

var _ engine.AuditTrail = (*auditTrail)(nil)

// maxHeld bounds the bytes of event data a trail holds in one record,
// well under the smallest max payload NATS servers are configured with.
const maxHeld = 256 << 10

// Record implements engine.AuditTrail: it holds the event for the
// trail's next record and returns. It fails when the event cannot be
// recorded, when the trail lost an earlier record, is sealed, or the
// Writer is closed.
func (t *auditTrail) Record(ctx context.Context, ev gated.AuditEvent) error {
	if ev.Instance == "" {
		ev.Instance = t.a.cfg.Instance
	}
	if err := checkEvent(ev); err != nil {
		// The event is lost: the trail must not seal.
		t.mu.Lock()
		if t.err == nil && !t.sealed {
			t.err = err
		}
		t.mu.Unlock()
		return err
	}
	if t.a.isClosed() {
		return ErrClosed
	}
	t.enq.Lock()
	defer t.enq.Unlock()
	t.mu.Lock()
	switch {
	case t.sealed:
		t.mu.Unlock()
		return ErrTrailSealed
	case t.err != nil:
		err := t.err
		t.mu.Unlock()
		return err
	}
	// An event of another envelope, or one that would make the record
	// too large, starts a record of its own.
	var out []gated.AuditEvent
	if len(t.held) > 0 && (!sameEnvelope(t.held[0], ev) || t.heldSize+len(ev.Data) > maxHeld) {
		out = t.take()
	}
	t.held = append(t.held, ev)
	t.heldSize += len(ev.Data)
	t.mu.Unlock()
	return t.queue(ctx, out, false)
}

// Flush implements engine.AuditTrail: it queues the events held as one
// record, without waiting for it to be stored.
func (t *auditTrail) Flush(ctx context.Context) error {
	t.enq.Lock()
	defer t.enq.Unlock()
	t.mu.Lock()
	if t.sealed || t.err != nil {
		err := t.err
		t.mu.Unlock()
		if err == nil {
			err = ErrTrailSealed
		}
		return err
	}
	out := t.take()
	t.mu.Unlock()
	return t.queue(ctx, out, false)
}

// take returns the events held, for a record; t.mu is held.
func (t *auditTrail) take() []gated.AuditEvent {
	out := t.held
	if len(out) > 0 {
		t.pending++
	}
	t.held, t.heldSize = nil, 0
	return out
}

// queue hands the events taken to the writer as one record; t.enq is
// held. A record that cannot be queued fails the trail.
func (t *auditTrail) queue(ctx context.Context, evs []gated.AuditEvent, final bool) error {
	if len(evs) == 0 {
		return nil
	}
	if err := t.a.enqueue(ctx, t, evs, final); err != nil {
		t.finish(nil, 0, err)
		return err
	}
	return nil
}

// Seal implements engine.AuditTrail: it queues the final event, with the
// events held, and waits until every record of the trail is stored, then
// returns the stream sequence of the final event's record. A record that
// could not be stored fails Seal.
func (t *auditTrail) Seal(ctx context.Context, ev gated.AuditEvent) (seq uint64, err error) {
	ctx, span := telemetry.Start(ctx, telemetry.SpanAudit, telemetry.KindProducer)
	start := time.Now()
	defer func() { t.a.sealed(span, ev.Event, start, seq, err) }()
	if ev.Instance == "" {
		ev.Instance = t.a.cfg.Instance
	}
	if err := checkEvent(ev); err != nil {
		// Nothing of the trail is stored past this: its proposal is
		// decided again.
		t.mu.Lock()
		t.sealed, t.held = true, nil
		if t.err == nil {
			t.err = err
		}
		t.mu.Unlock()
		return 0, err
	}
	t.enq.Lock()
	t.mu.Lock()
	switch {
	case t.sealed:
		t.mu.Unlock()
		t.enq.Unlock()
		return 0, ErrTrailSealed
	case t.err != nil:
		t.sealed = true
		err := t.err
		t.mu.Unlock()
		t.enq.Unlock()
		return 0, err
	}
	t.sealed = true
	var first []gated.AuditEvent
	if len(t.held) > 0 && (!sameEnvelope(t.held[0], ev) || t.heldSize+len(ev.Data) > maxHeld) {
		first = t.take()
	}
	t.held = append(t.held, ev)
	last := t.take()
	t.mu.Unlock()
	err = t.queue(ctx, first, false)
	if err == nil {
		err = t.queue(ctx, last, true)
	} else {
		// The final record is not queued: settle it.
		t.finish(nil, 0, err)
	}
	t.enq.Unlock()
	if err != nil {
		return 0, err
	}
	select {
	case <-t.done:
	case <-ctx.Done():
		return 0, fmt.Errorf("waiting for the audit trail to be stored: %w", ctx.Err())
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return 0, t.err
	}
	return t.finalSeq, nil
}

// sealed reports one Seal to Config.OnSeal and ends its span.
func (a *Writer) sealed(span telemetry.Span, event string, start time.Time, seq uint64, err error) {
	if a.cfg.OnSeal != nil {
		a.cfg.OnSeal(time.Since(start), err)
	}
	if span.Recording() {
		span.String(telemetry.AttrAuditEvent, event)
		span.Int(telemetry.AttrAuditSeq, int64(seq))
	}
	span.End(err)
}

// failed returns the trail's error, if an event of it was lost.
func (t *auditTrail) failed() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// finish settles one event of the trail: stored at seq, or lost with err.
func (t *auditTrail) finish(it *auditItem, seq uint64, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending--
	switch {
	case err != nil && t.err == nil:
		t.err = err
	case err == nil && it != nil && it.final:
		t.finalSeq = seq
	}
	if t.sealed && t.pending == 0 {
		close(t.done)
	}
}
