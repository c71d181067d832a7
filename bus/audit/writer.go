package bus

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	mrand "math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated/engine"
)

// Errors of the Auditor and its trails.
var (
	// ErrAuditorClosed means the Auditor was closed: the event was not
	// recorded.
	ErrAuditorClosed = errors.New("the auditor is closed")
	// ErrTrailSealed means the trail was sealed already; start a new trail
	// with Auditor.Trail.
	ErrTrailSealed = errors.New("the audit trail is sealed")
	// ErrNoAuditStream means the GATED_AUDIT stream does not exist: run
	// `gated serve` (or Setup) against the server first.
	ErrNoAuditStream = errors.New("the audit stream " + AuditStream + " does not exist (has gated serve run against this NATS server?)")
)

// JetStream error codes of atomic batch publishing (nats-server 2.12+),
// which nats.go does not name.
const (
	errCodeAtomicDisabled      jetstream.ErrorCode = 10174
	errCodeAtomicIncomplete    jetstream.ErrorCode = 10176
	errCodeAtomicTooMany       jetstream.ErrorCode = 10210
	headerBatchID                                  = "Nats-Batch-Id"
	headerBatchSeq                                 = "Nats-Batch-Sequence"
	headerBatchCommit                              = "Nats-Batch-Commit"
	maxServerAtomicBatch                           = 1000
	maxPublishRetries                              = 24
	defaultAuditWriters                            = 4
	defaultAuditMaxBatch                           = 256
	defaultAuditHeadCache                          = 16384
	defaultAuditQueueLen                           = 4096
	defaultAuditPublishTimeout                     = 10 * time.Second
	auditMsgOverhead                               = 512 // subject and headers, generously
)

// AuditorConfig configures an Auditor. The zero value is usable; every
// field documents its default.
type AuditorConfig struct {
	// Instance names this gated process in the events it records whose
	// Instance is empty. Default "<hostname>-<pid>".
	Instance string
	// Key MACs every record, so that Verify given the same key tells
	// gated's records from anyone else's. At least MinAuditKeyLen bytes.
	// Default none: records carry their hash and chain link only, and a
	// forged record that follows the format cannot be detected.
	Key []byte
	// Log receives what no caller can act on: conflicts with other gated
	// instances, the fall back to one-at-a-time publishing. Default: none.
	Log *zap.Logger
	// Writers is how many goroutines publish records. Each owns the
	// tenants whose name hashes to it, so one tenant's round trips do not
	// hold up another's. Default 4.
	Writers int
	// MaxBatch bounds the records of one atomic batch (one round trip).
	// Default 256; at most 1000, the server's limit.
	MaxBatch int
	// MaxBatchBytes bounds the bytes of one atomic batch. Default: the
	// connection's max payload.
	MaxBatchBytes int
	// HeadCache bounds how many tenants' chain heads are remembered, over
	// all writers; a forgotten head costs one look-up. Default 16384.
	HeadCache int
	// QueueLen bounds the events waiting for each writer; Record blocks
	// while its writer's queue is full. Default 4096.
	QueueLen int
	// PublishTimeout bounds one publish round trip and one head look-up.
	// Default 10s. A publish that times out fails the trails concerned.
	PublishTimeout time.Duration
	// Publish chooses how queued records go out. Default PublishAuto.
	Publish PublishMode
}

// PublishMode chooses between atomic batches and one record per round
// trip. Both check every tenant's chain against the stream, so the chain
// is the same either way; only the cost differs.
type PublishMode int

const (
	// PublishAuto sends atomic batches to a replicated or memory stream,
	// where a batch costs about one round trip, and pipelines records
	// (PublishPipelined) to an R1 file stream (the embedded server's).
	// There the server stages each batch in a file store of its own and
	// syncs it to disk before committing: milliseconds per batch, during
	// which no other write to the stream proceeds, which costs more than
	// batching saves.
	PublishAuto PublishMode = iota
	// PublishBatches sends every group of two records or more as one
	// atomic batch, whatever the stream.
	PublishBatches
	// PublishOneAtATime publishes each record on its own and waits for its
	// acknowledgement. Servers without atomic batches (before 2.12, or a
	// stream without AllowAtomicPublish) get this unless they are asked
	// to pipeline.
	PublishOneAtATime
	// PublishPipelined publishes records one by one without waiting for
	// each acknowledgement, as runs in which every record names its
	// predecessor as the stream's last message (Nats-Expected-Last-Msg-Id)
	// and the first record of each tenant names the tenant's last record.
	// A run is therefore contiguous in the stream: every tenant's chain is
	// checked as with the other modes, and a failure ends the run and
	// publishes the rest again. One writer publishes every tenant (the
	// Writers setting is not used). Each record carries a Nats-Msg-Id, which
	// the stream remembers for its duplicate window. Another instance that
	// writes to the stream ends this one's run, so instances that share a
	// busy audit stream publish faster with atomic batches.
	PublishPipelined
)

func (c AuditorConfig) withDefaults(nc *nats.Conn) (AuditorConfig, error) {
	if c.Instance == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "gated"
		}
		c.Instance = host + "-" + strconv.Itoa(os.Getpid())
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	if c.Writers == 0 {
		c.Writers = defaultAuditWriters
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = defaultAuditMaxBatch
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = int(nc.MaxPayload())
	}
	if c.HeadCache == 0 {
		c.HeadCache = defaultAuditHeadCache
	}
	if c.QueueLen == 0 {
		c.QueueLen = defaultAuditQueueLen
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = defaultAuditPublishTimeout
	}
	switch {
	case len(c.Key) > 0 && len(c.Key) < MinAuditKeyLen:
		return c, fmt.Errorf("%w: the audit key has %d bytes; use at least %d random bytes", ErrInvalidConfig, len(c.Key), MinAuditKeyLen)
	case c.Writers < 1:
		return c, fmt.Errorf("%w: audit writers %d must be at least 1", ErrInvalidConfig, c.Writers)
	case c.MaxBatch < 1 || c.MaxBatch > maxServerAtomicBatch:
		return c, fmt.Errorf("%w: audit max batch %d must be between 1 and %d", ErrInvalidConfig, c.MaxBatch, maxServerAtomicBatch)
	case c.MaxBatchBytes < 1:
		return c, fmt.Errorf("%w: audit max batch bytes %d must be positive", ErrInvalidConfig, c.MaxBatchBytes)
	case c.HeadCache < c.Writers:
		return c, fmt.Errorf("%w: audit head cache %d must be at least the %d writers", ErrInvalidConfig, c.HeadCache, c.Writers)
	case c.QueueLen < 1:
		return c, fmt.Errorf("%w: audit queue length %d must be at least 1", ErrInvalidConfig, c.QueueLen)
	case c.Publish < PublishAuto || c.Publish > PublishPipelined:
		return c, fmt.Errorf("%w: unknown audit publish mode %d", ErrInvalidConfig, c.Publish)
	case c.PublishTimeout < 0:
		return c, fmt.Errorf("%w: audit publish timeout %s is negative", ErrInvalidConfig, c.PublishTimeout)
	}
	return c, nil
}

// Auditor writes gated's audit records to the GATED_AUDIT stream: one per
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
type Auditor struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	cfg    AuditorConfig
	signer auditSigner
	log    *zap.Logger

	// batching is true while records go out as atomic batches;
	// pipelined, when they go out as PublishPipelined runs.
	batching  atomic.Bool
	pipelined bool
	stats     struct{ records, publishes, conflicts, retries atomic.Uint64 }
	writers   []*auditWriter

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

// NewAuditor opens the audit stream, decides between atomic batches and
// one-at-a-time publishing, and starts the writers. The stream must exist
// (Setup creates it): else the error wraps ErrNoAuditStream. Close the
// Auditor to drain it.
func NewAuditor(ctx context.Context, js jetstream.JetStream, cfg AuditorConfig) (*Auditor, error) {
	nc := js.Conn()
	cfg, err := cfg.withDefaults(nc)
	if err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, AuditStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoAuditStream
	}
	if err != nil {
		return nil, fmt.Errorf("opening stream %s: %w", AuditStream, err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	a := &Auditor{
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
			zap.String("stream", AuditStream))
	case !serverAtLeast(nc.ConnectedServerVersion(), 2, 12):
		a.log.Warn("the NATS server predates atomic batches (2.12); audit records are published one at a time",
			zap.String("server_version", nc.ConnectedServerVersion()))
	default:
		a.batching.Store(true)
	}
	writers, run := cfg.Writers, (*auditWriter).run
	if a.pipelined {
		// A run is contiguous in the stream: one writer publishes it all.
		writers, run = 1, (*auditWriter).runPipelined
	}
	heads := max(cfg.HeadCache/writers, 1)
	for range writers {
		w := &auditWriter{a: a, in: make(chan *auditItem, cfg.QueueLen), heads: make(map[string]auditHead), maxHeads: heads}
		a.writers = append(a.writers, w)
		a.wg.Go(func() { run(w) })
	}
	return a, nil
}

// Batching reports whether records go out as atomic batches (true) or
// not: one at a time, or pipelined (see Pipelined).
func (a *Auditor) Batching() bool { return a.batching.Load() }

// Pipelined reports whether records go out as PublishPipelined runs.
func (a *Auditor) Pipelined() bool { return a.pipelined }

// AuditorStats counts what an Auditor did since it started.
type AuditorStats struct {
	// Records stored, and Publishes: the round trips that stored them (an
	// atomic batch or a single record each).
	Records, Publishes uint64
	// Conflicts: publishes refused because another gated instance
	// extended a chain first. Retries: publishes tried again, conflicts
	// included.
	Conflicts, Retries uint64
}

// Stats returns the Auditor's counters.
func (a *Auditor) Stats() AuditorStats {
	return AuditorStats{
		Records: a.stats.records.Load(), Publishes: a.stats.publishes.Load(),
		Conflicts: a.stats.conflicts.Load(), Retries: a.stats.retries.Load(),
	}
}

// KeyID is the id of the key records are MACed with, or empty when the
// Auditor has no key.
func (a *Auditor) KeyID() string { return a.signer.keyID }

// Instance is the name the Auditor gives events that name no instance.
func (a *Auditor) Instance() string { return a.cfg.Instance }

// Trail starts the audit trail of one delivery. It implements
// engine.AuditTrail; it is safe for concurrent use.
func (a *Auditor) Trail() engine.AuditTrail {
	return &auditTrail{a: a, done: make(chan struct{})}
}

// Close stops taking events and waits until every queued event is
// stored or has failed its trail. A Record or Seal waiting on a full
// queue fails with ErrAuditorClosed. When ctx ends first, the writers'
// publishes are cancelled, the events still queued fail their trails,
// and Close returns ctx's error once the writers have stopped (which they
// do promptly: everything they wait on is bounded by the cancelled
// context).
func (a *Auditor) Close(ctx context.Context) error {
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

// enqueue hands an event to the writer that owns its tenant.
func (a *Auditor) enqueue(ctx context.Context, t *auditTrail, ev engine.AuditEvent, final bool) error {
	if ev.Instance == "" {
		ev.Instance = a.cfg.Instance
	}
	enc, err := encodeEvent(ev)
	if err != nil {
		return err
	}
	if size := len(enc.json) + auditMsgOverhead; int64(size) > a.nc.MaxPayload() {
		return fmt.Errorf("audit event %s of about %d bytes exceeds the NATS max payload of %d bytes", ev.Event, size, a.nc.MaxPayload())
	}
	it := &auditItem{ev: enc, trail: t, final: final}
	w := a.writers[shard(enc.tenant, len(a.writers))]
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return ErrAuditorClosed
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
		return ErrAuditorClosed
	case <-ctx.Done():
		return fmt.Errorf("queueing audit event %s: %w", ev.Event, ctx.Err())
	}
}

func shard(tenant string, n int) int {
	if n == 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(tenant))
	return int(h.Sum32() % uint32(n))
}

// auditTrail is the trail of one delivery.
type auditTrail struct {
	a *Auditor

	mu       sync.Mutex
	pending  int // events queued and not yet stored or failed
	sealed   bool
	err      error
	finalSeq uint64
	done     chan struct{} // closed once sealed and nothing is pending
}

var _ engine.AuditTrail = (*auditTrail)(nil)

// Record implements engine.AuditTrail: it queues the event and returns.
// It fails when the trail lost an earlier event, is sealed, or the
// Auditor is closed.
func (t *auditTrail) Record(ctx context.Context, ev engine.AuditEvent) error {
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
	t.pending++
	t.mu.Unlock()
	if err := t.a.enqueue(ctx, t, ev, false); err != nil {
		t.finish(nil, 0, err)
		return err
	}
	return nil
}

// Seal implements engine.AuditTrail: it queues the final event and waits
// until every event of the trail is stored, then returns the final
// event's stream sequence. An event that could not be stored fails Seal.
func (t *auditTrail) Seal(ctx context.Context, ev engine.AuditEvent) (uint64, error) {
	t.mu.Lock()
	switch {
	case t.sealed:
		t.mu.Unlock()
		return 0, ErrTrailSealed
	case t.err != nil:
		t.sealed = true
		err := t.err
		t.mu.Unlock()
		return 0, err
	}
	t.sealed = true
	t.pending++
	t.mu.Unlock()
	if err := t.a.enqueue(ctx, t, ev, true); err != nil {
		t.finish(nil, 0, err)
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

// auditItem is one queued event.
type auditItem struct {
	ev    encodedEvent
	trail *auditTrail
	final bool

	// Set while a batch is built.
	msg    *nats.Msg
	digest [sha256.Size]byte
	n      uint64
	// attempts counts the pipelined publishes of the record that failed
	// first in their run (PublishPipelined).
	attempts int
}

func (it *auditItem) size() int { return len(it.ev.json) + auditMsgOverhead }

func (it *auditItem) settle(seq uint64, err error) { it.trail.finish(it, seq, err) }

// auditHead is what a writer knows of a tenant's last record.
type auditHead struct {
	// n is the record's chain number; 0 when the tenant has no record, or
	// when its last message is not a valid record (the next record then
	// restarts the chain at 1, linked to that message).
	n uint64
	// digest is the SHA-256 of the last message's body and seq its stream
	// sequence (0 while a batch is being built); exists is false when the
	// tenant has no message.
	digest [sha256.Size]byte
	seq    uint64
	exists bool
	// run is the pipelined run (PublishPipelined) that published the
	// record; 0 when the head was read from the stream.
	run uint64
}

// next is the chain link of the record after h.
func (h auditHead) next() AuditChain {
	c := AuditChain{N: h.n + 1}
	if h.exists {
		c.Prev = hex.EncodeToString(h.digest[:])
	}
	return c
}

// auditWriter publishes the records of the tenants it owns. Its heads
// are its goroutine's alone.
type auditWriter struct {
	a        *Auditor
	in       chan *auditItem
	heads    map[string]auditHead
	maxHeads int
}

func (w *auditWriter) run() {
	cfg := w.a.cfg
	group := make([]*auditItem, 0, cfg.MaxBatch)
	var carry *auditItem
	for {
		first := carry
		carry = nil
		if first == nil {
			var ok bool
			if first, ok = <-w.in; !ok {
				return
			}
		}
		group = append(group[:0], first)
		size, open := first.size(), true
	collect:
		for len(group) < cfg.MaxBatch {
			select {
			case it, ok := <-w.in:
				if !ok {
					open = false
					break collect
				}
				if size+it.size() > cfg.MaxBatchBytes {
					carry = it
					break collect
				}
				group = append(group, it)
				size += it.size()
			default:
				break collect
			}
		}
		w.commit(group)
		clear(group)
		if !open {
			if carry != nil {
				w.commit([]*auditItem{carry})
			}
			return
		}
	}
}

// commit stores a group of events, or fails their trails.
func (w *auditWriter) commit(group []*auditItem) {
	live := group[:0:0]
	for _, it := range group {
		// A trail that lost an event will not seal: storing the rest of it
		// serves no one, and its proposal is decided again.
		if err := it.trail.failed(); err != nil {
			it.settle(0, err)
			continue
		}
		live = append(live, it)
	}
	if len(live) == 0 {
		return
	}
	if len(live) > 1 && w.a.batching.Load() {
		w.commitBatch(live)
		return
	}
	w.commitEach(live)
}

// commitEach publishes records one at a time, each checked against its
// tenant's last record.
func (w *auditWriter) commitEach(items []*auditItem) {
	for _, it := range items {
		if err := it.trail.failed(); err != nil {
			it.settle(0, err)
			continue
		}
		seq, err := w.publishOne(it)
		it.settle(seq, err)
	}
}

func (w *auditWriter) publishOne(it *auditItem) (uint64, error) {
	tenant := it.ev.tenant
	for attempt := 0; ; attempt++ {
		h, err := w.head(tenant)
		if err != nil {
			return 0, err
		}
		c := h.next()
		msg, digest := it.ev.msg(c, w.a.signer)
		expectHead(msg, tenant, h.seq)
		ctx, cancel := context.WithTimeout(w.a.ctx, w.a.cfg.PublishTimeout)
		ack, err := w.a.js.PublishMsg(ctx, msg)
		cancel()
		if err == nil {
			w.setHead(tenant, auditHead{n: c.N, digest: digest, seq: ack.Sequence, exists: true})
			w.a.stats.publishes.Add(1)
			w.a.stats.records.Add(1)
			return ack.Sequence, nil
		}
		w.forget(tenant)
		if w.retry(err, attempt) {
			continue
		}
		return 0, fmt.Errorf("storing audit event on %s: %w", it.ev.subject, err)
	}
}

// commitBatch publishes items as one atomic batch: all are stored, in
// order and contiguous, or none is.
func (w *auditWriter) commitBatch(items []*auditItem) {
	for attempt := 0; ; attempt++ {
		var heads map[string]auditHead
		heads, items = w.loadHeads(items)
		if len(items) == 0 {
			return
		}
		chained := make(map[string]bool, len(heads))
		id := batchID()
		for i, it := range items {
			h := heads[it.ev.tenant]
			c := h.next()
			it.msg, it.digest = it.ev.msg(c, w.a.signer)
			it.n = c.N
			if !chained[it.ev.tenant] {
				expectHead(it.msg, it.ev.tenant, h.seq)
				chained[it.ev.tenant] = true
			}
			heads[it.ev.tenant] = auditHead{n: c.N, digest: it.digest, exists: true}
			it.msg.Header.Set(headerBatchID, id)
			it.msg.Header.Set(headerBatchSeq, strconv.Itoa(i+1))
		}
		items[len(items)-1].msg.Header.Set(headerBatchCommit, "1")
		last, err := w.publishBatch(items, id)
		if err == nil {
			w.a.stats.publishes.Add(1)
			w.a.stats.records.Add(uint64(len(items)))
			first := last - uint64(len(items)) + 1
			for i, it := range items {
				seq := first + uint64(i)
				w.setHead(it.ev.tenant, auditHead{n: it.n, digest: it.digest, seq: seq, exists: true})
				it.settle(seq, nil)
			}
			return
		}
		for _, it := range items {
			w.forget(it.ev.tenant)
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeAtomicDisabled {
			w.a.batching.Store(false)
			w.a.log.Warn("the audit stream refused an atomic batch; audit records are published one at a time from now on", zap.Error(err))
			w.commitEach(items)
			return
		}
		if w.retry(err, attempt) {
			continue
		}
		err = fmt.Errorf("storing a batch of %d audit events: %w", len(items), err)
		for _, it := range items {
			it.settle(0, err)
		}
		return
	}
}

// loadHeads returns the head of every tenant of items. The items of a
// tenant whose head cannot be read fail; the others are returned.
func (w *auditWriter) loadHeads(items []*auditItem) (map[string]auditHead, []*auditItem) {
	heads := make(map[string]auditHead, 4)
	var failed map[string]error
	for _, it := range items {
		t := it.ev.tenant
		if _, ok := heads[t]; ok || failed[t] != nil {
			continue
		}
		h, err := w.head(t)
		if err != nil {
			if failed == nil {
				failed = make(map[string]error)
			}
			failed[t] = err
			continue
		}
		heads[t] = h
	}
	if failed == nil {
		return heads, items
	}
	kept := items[:0:0]
	for _, it := range items {
		if err := failed[it.ev.tenant]; err != nil {
			it.settle(0, err)
			continue
		}
		kept = append(kept, it)
	}
	return heads, kept
}

// publishBatch sends items as the atomic batch id and returns the stream
// sequence of the last one. Only the commit asks for an answer: one round
// trip for the whole batch.
func (w *auditWriter) publishBatch(items []*auditItem, id string) (uint64, error) {
	nc := w.a.nc
	for _, it := range items[:len(items)-1] {
		if err := nc.PublishMsg(it.msg); err != nil {
			return 0, err
		}
	}
	ctx, cancel := context.WithTimeout(w.a.ctx, w.a.cfg.PublishTimeout)
	defer cancel()
	resp, err := nc.RequestMsgWithContext(ctx, items[len(items)-1].msg)
	if err != nil {
		return 0, err
	}
	var ack struct {
		Error    *jetstream.APIError `json:"error"`
		Stream   string              `json:"stream"`
		Sequence uint64              `json:"seq"`
		Batch    string              `json:"batch"`
		Count    int                 `json:"count"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, fmt.Errorf("reading the batch acknowledgement: %w", err)
	}
	switch {
	case ack.Error != nil:
		return 0, ack.Error
	case ack.Batch != id || ack.Count != len(items):
		// A server that ignores the batch headers stored every message
		// on its own, unchecked: do not batch again.
		w.a.batching.Store(false)
		return 0, fmt.Errorf("the server acknowledged batch %q of %d messages, not %q of %d: it does not support atomic batches", ack.Batch, ack.Count, id, len(items))
	case ack.Stream != AuditStream || ack.Sequence < uint64(len(items)):
		return 0, fmt.Errorf("unexpected batch acknowledgement from stream %q at sequence %d", ack.Stream, ack.Sequence)
	}
	return ack.Sequence, nil
}

// head returns the tenant's head, reading the tenant's last message when
// it is not known.
func (w *auditWriter) head(tenant string) (auditHead, error) {
	if h, ok := w.heads[tenant]; ok {
		return h, nil
	}
	ctx, cancel := context.WithTimeout(w.a.ctx, w.a.cfg.PublishTimeout)
	defer cancel()
	// last_by_subj takes wildcards: the store finds the last message of
	// any of the tenant's subjects. (This is the STREAM.MSG.GET API: the
	// audit stream does not allow direct gets, whose last-by-subject form
	// puts the subject in the request subject, where a wildcard cannot go.)
	m, err := w.a.stream.GetLastMsgForSubject(ctx, AuditTenantSubject(tenant))
	var h auditHead
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return h, fmt.Errorf("reading the last audit record of tenant %s: %w", tenant, err)
	default:
		h.seq, h.digest, h.exists = m.Sequence, sha256.Sum256(m.Data), true
		rec, derr := DecodeAuditRecord(m.Subject, m.Header, m.Data)
		if derr != nil {
			w.a.log.Error("the last message of an audit chain is not a gated record; the chain restarts at 1, linked to it",
				zap.String("tenant", tenant), zap.Uint64("seq", m.Sequence), zap.Error(derr))
		} else {
			h.n = rec.Chain.N
		}
	}
	w.setHead(tenant, h)
	return h, nil
}

func (w *auditWriter) setHead(tenant string, h auditHead) {
	if _, ok := w.heads[tenant]; !ok && len(w.heads) >= w.maxHeads {
		for t := range w.heads { // evict one, any: a miss costs one look-up
			delete(w.heads, t)
			break
		}
	}
	w.heads[tenant] = h
}

func (w *auditWriter) forget(tenant string) { delete(w.heads, tenant) }

// retry reports whether a publish that failed with err on attempt is
// tried again, after a pause.
func (w *auditWriter) retry(err error, attempt int) bool {
	if !retryable(err) || attempt >= maxPublishRetries || w.a.ctx.Err() != nil {
		return false
	}
	w.a.stats.retries.Add(1)
	if isConflict(err) {
		// Another gated instance extended a chain: the heads were
		// forgotten, the records are re-chained on the new ones.
		w.a.stats.conflicts.Add(1)
		w.a.log.Debug("audit chain extended by another instance; re-chaining", zap.Error(err))
	}
	w.backoff(attempt)
	return true
}

// backoff waits a little, more after each attempt, with jitter so that
// instances racing for one tenant do not collide again in step.
func (w *auditWriter) backoff(attempt int) {
	d := time.Millisecond << min(attempt, 7)
	d += mrand.N(d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.a.ctx.Done():
	}
}

// expectHead makes msg's publish fail unless the tenant's last record is
// still at seq (0: the tenant has none).
func expectHead(msg *nats.Msg, tenant string, seq uint64) {
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(seq, 10))
	msg.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, AuditTenantSubject(tenant))
}

// isConflict reports whether err says another writer moved a tenant's
// chain first.
func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// retryable reports whether a publish that failed with err stored nothing
// and may be tried again: a conflict, an incomplete batch, too many
// batches in flight, or a stream leader that was being elected.
func retryable(err error) bool {
	if isConflict(err) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == errCodeAtomicIncomplete || apiErr.ErrorCode == errCodeAtomicTooMany
	}
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

func batchID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// serverAtLeast reports whether version (major.minor.patch, perhaps with
// a suffix) is at least major.minor.
func serverAtLeast(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.TrimLeftFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
