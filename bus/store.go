package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/engine"
)

// VerdictStore keeps verdicts in the GATED_VERDICTS bucket. Its keys:
//
//	<tenant>.<id>                  the verdict of proposal id
//	<tenant>.targets.<target key>  the recent approvals on a target
//	<tenant>.claims.<id>           the review claim on proposal id
//	<tenant>.runs.<run id>         gated's record of a run's rounds
//
// Verdict keys have two tokens (ids are single tokens) and the others
// three or more with a fixed second token, so none can collide. It
// implements engine.VerdictStore.
//
// Every record it reads back is checked against its key (see RecordError):
// one that is not gated's is an error wrapping engine.ErrCorruptRecord,
// reported to the hook of WithCorruptRecordHook, and never replayed or
// used as state.
type VerdictStore struct {
	kv      jetstream.KeyValue
	seen    seenHistories
	corrupt CorruptRecordHook
}

var _ engine.VerdictStore = (*VerdictStore)(nil)

// NewVerdictStore wraps a bucket.
func NewVerdictStore(kv jetstream.KeyValue, opts ...StoreOption) *VerdictStore {
	s := &VerdictStore{kv: kv}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// Get implements engine.VerdictStore. An entry that is not a verdict for
// tenant and id is a *RecordError.
func (s *VerdictStore) Get(ctx context.Context, tenant, id string) (*engine.Verdict, error) {
	v, _, err := s.get(ctx, tenant, id)
	return v, err
}

// get reads the verdict of tenant and id and its revision; on a
// *RecordError the revision is the corrupt entry's.
func (s *VerdictStore) get(ctx context.Context, tenant, id string) (*engine.Verdict, uint64, error) {
	e, err := s.kv.Get(ctx, tenant+"."+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, engine.ErrNotFound
	}
	if err != nil {
		return nil, 0, err
	}
	v, err := s.decodeVerdict(ctx, tenant, id, e.Revision(), e.Value())
	return v, e.Revision(), err
}

// Create implements engine.VerdictStore: the first verdict for a key wins.
// An entry under the key that is not a verdict for it is no verdict: it
// is replaced, at its revision, so that a proposal under a key somebody
// else wrote into still gets its verdict.
func (s *VerdictStore) Create(ctx context.Context, v *engine.Verdict) (*engine.Verdict, error) {
	data, err := v.JSON()
	if err != nil {
		return nil, err
	}
	key := v.Tenant + "." + v.ProposalID
	for attempt := 0; ; attempt++ {
		if attempt == 8 {
			return nil, fmt.Errorf("verdict %s kept changing under concurrent writes", key)
		}
		_, err = s.kv.Create(ctx, key, data)
		if !errors.Is(err, jetstream.ErrKeyExists) {
			break
		}
		stored, rev, gerr := s.get(ctx, v.Tenant, v.ProposalID)
		switch {
		case gerr == nil:
			return stored, engine.ErrExists
		case errors.Is(gerr, engine.ErrNotFound):
			continue // deleted in between: create it again
		case !errors.Is(gerr, engine.ErrCorruptRecord):
			return nil, fmt.Errorf("reading the verdict stored first: %w", gerr)
		}
		_, err = s.kv.Update(ctx, key, data, rev)
		if err == nil || !casConflict(err) {
			break
		}
		// Written in between: look again.
	}
	if err != nil {
		return nil, err
	}
	if v.Approved && v.TargetKey != "" {
		if err := s.remember(ctx, v); err != nil {
			return nil, fmt.Errorf("recording approval on target %s: %w", v.TargetKey, err)
		}
	}
	if err := s.recordRound(ctx, v); err != nil {
		return nil, err
	}
	return v, nil
}

// History bounds: approvals older than HistoryWindow, or beyond the
// newest HistoryMax, drop out of a target's history.
const (
	HistoryWindow = time.Hour
	HistoryMax    = 32
)

func targetKey(tenant, key string) string { return tenant + ".targets." + key }

// Recent implements engine.VerdictStore. It keeps what it read for the
// approval that may follow (seenHistories).
func (s *VerdictStore) Recent(ctx context.Context, tenant, key string) ([]engine.Verdict, error) {
	tk := targetKey(tenant, key)
	e, err := s.kv.Get(ctx, tk)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		s.seen.put(tk, seenHistory{})
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	list, err := s.decodeHistory(ctx, tenant, key, e.Revision(), e.Value())
	if err != nil {
		// Not the history: an approval that follows replaces it.
		s.seen.put(tk, seenHistory{rev: e.Revision()})
		return nil, err
	}
	s.seen.put(tk, seenHistory{rev: e.Revision(), value: e.Value()})
	return list, nil
}

// remember appends an approval to its target's history with optimistic
// concurrency: gated processes that approve on the same target at once
// retry instead of overwriting each other.
func (s *VerdictStore) remember(ctx context.Context, v *engine.Verdict) error {
	key := targetKey(v.Tenant, v.TargetKey)
	entry := engine.Verdict{
		V: v.V, ProposalID: v.ProposalID, Tenant: v.Tenant, Action: v.Action, Kind: v.Kind,
		Outcome: v.Outcome, Approved: v.Approved, Stage: v.Stage, DecidedAt: v.DecidedAt, TargetKey: v.TargetKey, Agent: v.Agent,
	}
	// The first attempt starts from the history the policy read, when
	// this store read it; a history changed since fails the update and
	// the next attempt reads it afresh.
	seen, fresh := s.seen.take(key)
	for attempt := 0; attempt < 8; attempt++ {
		var list []engine.Verdict
		if attempt > 0 || !fresh {
			e, err := s.kv.Get(ctx, key)
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound):
				seen = seenHistory{}
			case err != nil:
				return err
			default:
				seen = seenHistory{rev: e.Revision(), value: e.Value()}
			}
		}
		rev := seen.rev
		if seen.value != nil {
			var err error
			if list, err = s.decodeHistory(ctx, v.Tenant, v.TargetKey, rev, seen.value); err != nil {
				list = nil // a corrupt history is replaced, not trusted
			}
		}
		cutoff := v.DecidedAt.Add(-HistoryWindow)
		kept := list[:0]
		for _, h := range list {
			if h.DecidedAt.After(cutoff) {
				kept = append(kept, h)
			}
		}
		kept = append(kept, entry)
		if len(kept) > HistoryMax {
			kept = kept[len(kept)-HistoryMax:]
		}
		data, err := json.Marshal(kept)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, key, data)
		} else {
			_, err = s.kv.Update(ctx, key, data, rev)
		}
		if err == nil {
			return nil
		}
		if !casConflict(err) {
			return err
		}
	}
	return fmt.Errorf("target history kept changing under concurrent updates")
}

// seenHistories keeps, per target key, the history Recent last read: its
// revision and value. An approval's remember starts from it instead of
// reading the key again, which saves a round trip per approved review.
// The bucket's compare-and-set guards it: when the history changed after
// the read (another approval on the target, from this gated or another),
// the update fails and remember reads afresh. Entries are taken once;
// those no approval takes (a denied or failed proposal's) are dropped a
// generation later, so the memory kept is bounded.
type seenHistories struct {
	mu       sync.Mutex
	cur, old map[string]seenHistory
	bytes    int // of the values in cur
}

// seenHistory is one read of a target's history; rev is 0 when there
// was none.
type seenHistory struct {
	rev   uint64
	value []byte
}

// Bounds of one generation of seenHistories: the newer generation turns
// old once it holds this many entries or bytes, and the older is dropped.
const (
	seenHistoriesMax      = 4096
	seenHistoriesMaxBytes = 4 << 20
)

func (h *seenHistories) put(key string, s seenHistory) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur == nil || len(h.cur) >= seenHistoriesMax || h.bytes+len(s.value) > seenHistoriesMaxBytes {
		h.old, h.cur, h.bytes = h.cur, make(map[string]seenHistory), 0
	}
	if prev, ok := h.cur[key]; ok {
		h.bytes -= len(prev.value)
	}
	delete(h.old, key)
	h.cur[key] = s
	h.bytes += len(s.value)
}

func (h *seenHistories) take(key string) (seenHistory, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.cur[key]; ok {
		delete(h.cur, key)
		h.bytes -= len(s.value)
		return s, true
	}
	if s, ok := h.old[key]; ok {
		delete(h.old, key)
		return s, true
	}
	return seenHistory{}, false
}

func claimKey(tenant, id string) string { return tenant + ".claims." + id }

// Claim implements engine.VerdictStore. Claims are taken and replaced with
// the bucket's compare-and-set, so of two gated processes claiming at once
// one wins and the other is told who holds the claim. Staleness is judged
// by this process's clock. Most proposals were never claimed, so the claim
// is created first and read only when one is there already.
func (s *VerdictStore) Claim(ctx context.Context, tenant, id string, c engine.Claim) (engine.Claim, error) {
	key := claimKey(tenant, id)
	data, err := json.Marshal(storedClaim{Tenant: tenant, ProposalID: id, Claim: c})
	if err != nil {
		return engine.Claim{}, err
	}
	for attempt := 0; attempt < 8; attempt++ {
		rev, err := s.kv.Create(ctx, key, data)
		if err == nil {
			c.Revision = rev
			return c, nil
		}
		if !casConflict(err) {
			return engine.Claim{}, fmt.Errorf("writing review claim %s: %w", key, err)
		}
		e, err := s.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			continue // released in between: create it again
		case err != nil:
			return engine.Claim{}, fmt.Errorf("reading review claim %s: %w", key, err)
		}
		// A claim that is not gated's is no one's: it is replaced.
		held, herr := s.decodeClaim(ctx, tenant, id, e.Revision(), e.Value())
		if herr == nil && !c.Supersedes(held) && time.Now().Before(held.Until) {
			return held, fmt.Errorf("%w: %s.%s by %s until %s", engine.ErrClaimed, tenant, id, held.Holder, held.Until.Format(time.RFC3339))
		}
		rev, err = s.kv.Update(ctx, key, data, e.Revision())
		if err == nil {
			c.Revision = rev
			return c, nil
		}
		if !casConflict(err) {
			return engine.Claim{}, fmt.Errorf("writing review claim %s: %w", key, err)
		}
		// Another process claimed in between: look again.
	}
	return engine.Claim{}, fmt.Errorf("review claim %s kept changing under concurrent claims", key)
}

// Release implements engine.VerdictStore. It purges the claim only at the
// revision it was taken at, so a claim taken over meanwhile is left alone;
// a claim of unknown revision is read first, and purged at the revision
// read if c's holder holds it.
func (s *VerdictStore) Release(ctx context.Context, tenant, id string, c engine.Claim) error {
	key := claimKey(tenant, id)
	rev := c.Revision
	if rev == 0 {
		e, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading review claim %s: %w", key, err)
		}
		// A claim that is not gated's is purged like one of c's holder.
		if held, err := s.decodeClaim(ctx, tenant, id, e.Revision(), e.Value()); err == nil && held.Holder != c.Holder {
			return nil
		}
		rev = e.Revision()
	}
	err := s.kv.Purge(ctx, key, jetstream.LastRevision(rev))
	if err != nil && !casConflict(err) {
		return fmt.Errorf("releasing review claim %s: %w", key, err)
	}
	return nil
}

// Await implements engine.VerdictStore with a watch on the verdict's key,
// which first delivers a verdict already stored.
func (s *VerdictStore) Await(ctx context.Context, tenant, id string) (*engine.Verdict, error) {
	key := tenant + "." + id
	w, err := s.kv.Watch(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("watching verdict %s: %w", key, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				return nil, fmt.Errorf("watching verdict %s: the watch ended", key)
			case e == nil || e.Operation() != jetstream.KeyValuePut:
				continue // end of the initial values, or a delete marker
			}
			v, err := s.decodeVerdict(ctx, tenant, id, e.Revision(), e.Value())
			if err != nil {
				continue // reported; the verdict is still to come
			}
			return v, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// casConflict reports whether a bucket write lost a compare-and-set race.
func casConflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

func runKey(tenant, runID string) string { return tenant + ".runs." + runID }

// RunRecord implements engine.VerdictStore. A record that cannot be
// decoded is an error, not an empty record: the policy refuses rounds out
// of order and closed runs from it, so it is never guessed.
func (s *VerdictStore) RunRecord(ctx context.Context, tenant, runID string) (*engine.RunRecord, error) {
	rec, _, err := s.runRecord(ctx, tenant, runID)
	return rec, err
}

// runRecord reads a run record and its revision; nil and 0 when there is
// none.
func (s *VerdictStore) runRecord(ctx context.Context, tenant, runID string) (*engine.RunRecord, uint64, error) {
	if !engine.ValidTenant(tenant) || !engine.ValidID(runID) {
		return nil, 0, fmt.Errorf("run record %s.%s: tenant and run id must be single tokens", tenant, runID)
	}
	key := runKey(tenant, runID)
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading run record %s: %w", key, err)
	}
	rec, err := s.decodeRunRecord(ctx, tenant, runID, e.Revision(), e.Value())
	if err != nil {
		return nil, 0, err
	}
	return rec, e.Revision(), nil
}

// updateRun applies change to a run's record with optimistic concurrency:
// gated processes that record rounds of one run at once retry instead of
// overwriting each other. change sees an empty record when none is
// stored, and reports whether it changed it; nothing is written when it
// did not. updateRun returns the record as stored afterwards, nil when
// there is none.
func (s *VerdictStore) updateRun(ctx context.Context, tenant, runID string, change func(*engine.RunRecord) bool) (*engine.RunRecord, error) {
	key := runKey(tenant, runID)
	for attempt := 0; attempt < 16; attempt++ {
		rec, rev, err := s.runRecord(ctx, tenant, runID)
		if err != nil {
			return nil, err
		}
		work := rec
		if work == nil {
			work = &engine.RunRecord{Tenant: tenant, RunID: runID}
		}
		if !change(work) {
			return rec, nil
		}
		data, err := json.Marshal(work)
		if err != nil {
			return nil, err
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, key, data)
		} else {
			_, err = s.kv.Update(ctx, key, data, rev)
		}
		if err == nil {
			return work, nil
		}
		if !casConflict(err) {
			return nil, fmt.Errorf("writing run record %s: %w", key, err)
		}
		// Another process recorded in between: apply the change again to
		// what it stored.
	}
	return nil, fmt.Errorf("run record %s kept changing under concurrent updates", key)
}

// recordRound adds v's round to its run's record when v records one
// (engine.Records): a continuation, an escalation or an approval. A round
// already held, by v's proposal or another, is left as it is.
func (s *VerdictStore) recordRound(ctx context.Context, v *engine.Verdict) error {
	if !engine.Records(v) {
		return nil
	}
	if _, err := s.updateRun(ctx, v.Tenant, v.Run.RunID, func(r *engine.RunRecord) bool { return r.Add(v) }); err != nil {
		return fmt.Errorf("recording round %d of run %s: %w", v.Run.Round, v.Run.RunID, err)
	}
	return nil
}

// pendingRound returns the round of v's run that v's follow-up belongs
// to, when that follow-up is still to be sent: the round is recorded for
// v's proposal with v's follow-up and is not marked sent. Otherwise it
// returns nil.
//
// A round missing from the record is recorded first, as Create would
// have: a gated that stored the verdict and died before recording the
// round leaves that to the replay. Add leaves a round held by another
// proposal alone, so a round still has one follow-up.
func (s *VerdictStore) pendingRound(ctx context.Context, v *engine.Verdict) (*engine.RunRound, error) {
	rec, err := s.updateRun(ctx, v.Tenant, v.Run.RunID, func(r *engine.RunRecord) bool { return r.Add(v) })
	if err != nil {
		return nil, fmt.Errorf("recording round %d of run %s: %w", v.Run.Round, v.Run.RunID, err)
	}
	round := rec.Round(v.Run.Round)
	if round == nil || round.ProposalID != v.ProposalID || round.Next != v.Run.Next || round.Sent {
		return nil, nil
	}
	return round, nil
}

// markSent records that the follow-up of v's round is stored in the run
// stream, so a later replay of v does not publish it again.
func (s *VerdictStore) markSent(ctx context.Context, v *engine.Verdict) error {
	_, err := s.updateRun(ctx, v.Tenant, v.Run.RunID, func(r *engine.RunRecord) bool {
		round := r.Round(v.Run.Round)
		if round == nil || round.ProposalID != v.ProposalID || round.Sent {
			return false
		}
		round.Sent = true
		return true
	})
	if err != nil {
		return fmt.Errorf("marking the follow-up of round %d of run %s sent: %w", v.Run.Round, v.Run.RunID, err)
	}
	return nil
}

// Replace implements engine.VerdictStore. The swap is a compare-and-set
// on the verdict's key at the revision that held prev, so of two
// replacements of one verdict (two operators deciding at once) one wins
// and the other gets the winner's verdict and engine.ErrExists. It
// returns engine.ErrNotFound when no verdict is stored for prev's key.
// next must have prev's tenant and proposal id.
//
// The run record is kept after the swap, as Create keeps it: if that
// fails, the verdict is replaced already and the error says the round is
// not recorded; the follow-up publisher records it (see FollowUps.Send).
func (s *VerdictStore) Replace(ctx context.Context, prev, next *engine.Verdict) (*engine.Verdict, error) {
	switch {
	case prev == nil || next == nil:
		return nil, errors.New("replacing a verdict: prev and next must both be verdicts")
	case next.Tenant != prev.Tenant || next.ProposalID != prev.ProposalID:
		return nil, fmt.Errorf("replacing verdict %s.%s with the verdict of %s.%s: a verdict is replaced under its own key",
			prev.Tenant, prev.ProposalID, next.Tenant, next.ProposalID)
	}
	key := prev.Tenant + "." + prev.ProposalID
	data, err := next.JSON()
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		if attempt == 8 {
			return nil, fmt.Errorf("verdict %s kept changing under concurrent writes", key)
		}
		e, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, engine.ErrNotFound
		}
		if err != nil {
			return nil, fmt.Errorf("reading verdict %s: %w", key, err)
		}
		stored, err := s.decodeVerdict(ctx, prev.Tenant, prev.ProposalID, e.Revision(), e.Value())
		if err != nil {
			return nil, err
		}
		if stored.AuditSeq != prev.AuditSeq {
			return stored, engine.ErrExists
		}
		_, err = s.kv.Update(ctx, key, data, e.Revision())
		if err == nil {
			break
		}
		if !casConflict(err) {
			return nil, fmt.Errorf("replacing verdict %s: %w", key, err)
		}
		// Written in between: the next look tells by whom.
	}
	if err := s.recordRound(ctx, next); err != nil {
		return nil, err
	}
	return next, nil
}
