package audit

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// JetStream error codes of atomic batch publishing (nats-server 2.12+),
// which nats.go does not name.
const (
	errCodeAtomicDisabled   jetstream.ErrorCode = 10174
	errCodeAtomicIncomplete jetstream.ErrorCode = 10176
	errCodeAtomicTooMany    jetstream.ErrorCode = 10210
	headerBatchID                               = "Nats-Batch-Id"
	headerBatchSeq                              = "Nats-Batch-Sequence"
	headerBatchCommit                           = "Nats-Batch-Commit"
	maxPublishRetries                           = 24
	auditMsgOverhead                            = 512 // subject and headers, generously
)

// auditItem is one queued event.
type auditItem struct {
	ev    encodedEvent
	trail *auditTrail
	final bool
	// events is how many events the record holds.
	events int

	// Set while a batch is built.
	msg    *nats.Msg
	digest [sha256.Size]byte
	n      uint64
	// attempts counts the pipelined publishes of the record that failed
	// first in their run (PublishPipelined).
	attempts int
}

func (it *auditItem) size() int { return it.ev.size() + auditMsgOverhead }

func (it *auditItem) settle(seq uint64, err error) { it.trail.finish(it, seq, err) }

// chainHead is what a writer knows of a tenant's last record.
type chainHead struct {
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
func (h chainHead) next() Chain {
	c := Chain{N: h.n + 1}
	if h.exists {
		c.Prev = hex.EncodeToString(h.digest[:])
	}
	return c
}

// shard publishes the records of the tenants it owns. Its heads
// are its goroutine's alone.
type shard struct {
	a        *Writer
	in       chan *auditItem
	heads    map[string]chainHead
	maxHeads int
}

func (w *shard) run() {
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
func (w *shard) commit(group []*auditItem) {
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
func (w *shard) commitEach(items []*auditItem) {
	for _, it := range items {
		if err := it.trail.failed(); err != nil {
			it.settle(0, err)
			continue
		}
		seq, err := w.publishOne(it)
		it.settle(seq, err)
	}
}

func (w *shard) publishOne(it *auditItem) (uint64, error) {
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
			w.setHead(tenant, chainHead{n: c.N, digest: digest, seq: ack.Sequence, exists: true})
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
func (w *shard) commitBatch(items []*auditItem) {
	for attempt := 0; ; attempt++ {
		var heads map[string]chainHead
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
			heads[it.ev.tenant] = chainHead{n: c.N, digest: it.digest, exists: true}
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
				w.setHead(it.ev.tenant, chainHead{n: it.n, digest: it.digest, seq: seq, exists: true})
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
func (w *shard) loadHeads(items []*auditItem) (map[string]chainHead, []*auditItem) {
	heads := make(map[string]chainHead, 4)
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
func (w *shard) publishBatch(items []*auditItem, id string) (uint64, error) {
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
	case ack.Stream != Stream || ack.Sequence < uint64(len(items)):
		return 0, fmt.Errorf("unexpected batch acknowledgement from stream %q at sequence %d", ack.Stream, ack.Sequence)
	}
	return ack.Sequence, nil
}

// head returns the tenant's head, reading the tenant's last message when
// it is not known.
func (w *shard) head(tenant string) (chainHead, error) {
	if h, ok := w.heads[tenant]; ok {
		return h, nil
	}
	ctx, cancel := context.WithTimeout(w.a.ctx, w.a.cfg.PublishTimeout)
	defer cancel()
	// last_by_subj takes wildcards: the store finds the last message of
	// any of the tenant's subjects. (This is the STREAM.MSG.GET API: the
	// audit stream does not allow direct gets, whose last-by-subject form
	// puts the subject in the request subject, where a wildcard cannot go.)
	m, err := w.a.stream.GetLastMsgForSubject(ctx, tenantSubject(tenant))
	var h chainHead
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return h, fmt.Errorf("reading the last audit record of tenant %s: %w", tenant, err)
	default:
		h.seq, h.digest, h.exists = m.Sequence, sha256.Sum256(m.Data), true
		rec, derr := DecodeRecord(m.Subject, m.Header, m.Data)
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

func (w *shard) setHead(tenant string, h chainHead) {
	if _, ok := w.heads[tenant]; !ok && len(w.heads) >= w.maxHeads {
		for t := range w.heads { // evict one, any: a miss costs one look-up
			delete(w.heads, t)
			break
		}
	}
	w.heads[tenant] = h
}

func (w *shard) forget(tenant string) { delete(w.heads, tenant) }

// retry reports whether a publish that failed with err on attempt is
// tried again, after a pause.
func (w *shard) retry(err error, attempt int) bool {
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
func (w *shard) backoff(attempt int) {
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
	msg.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, tenantSubject(tenant))
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
