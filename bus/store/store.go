package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// Verdicts keeps verdicts in the GATED_VERDICTS bucket. Its keys:
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
// one that is not gated's is an error wrapping gated.ErrCorruptRecord,
// reported to the hook of WithCorruptRecordHook, and never replayed or
// used as state.
type Verdicts struct {
	kv      jetstream.KeyValue
	corrupt CorruptRecordHook
}

var _ engine.VerdictStore = (*Verdicts)(nil)

// New wraps a bucket.
func New(kv jetstream.KeyValue, opts ...Option) *Verdicts {
	s := &Verdicts{kv: kv}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// CorruptRecordHook is told of every record a Verdicts store read back and
// refused. It runs on the goroutine that read the record, so it should
// return soon; ctx is the reader's.
type CorruptRecordHook func(ctx context.Context, e *RecordError)

// Option configures a Verdicts store.
type Option func(*Verdicts)

// WithCorruptRecordHook has the store call hook for every record it
// refuses (see RecordError). Default: none; the refusal is still an error
// for the caller.
func WithCorruptRecordHook(hook CorruptRecordHook) Option {
	return func(s *Verdicts) { s.corrupt = hook }
}

// Get implements engine.VerdictReader. An entry that is not a verdict for
// tenant and id is a *RecordError.
func (s *Verdicts) Get(ctx context.Context, tenant, id string) (*gated.Verdict, error) {
	v, _, err := s.get(ctx, tenant, id)
	return v, err
}

// get reads the verdict of tenant and id and its revision; on a
// *RecordError the revision is the corrupt entry's.
func (s *Verdicts) get(ctx context.Context, tenant, id string) (*gated.Verdict, uint64, error) {
	e, err := s.kv.Get(ctx, tenant+"."+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, gated.ErrNotFound
	}
	if err != nil {
		return nil, 0, err
	}
	v, err := s.decodeVerdict(ctx, tenant, id, e.Revision(), e.Value())
	return v, e.Revision(), err
}

// Create implements engine.VerdictWriter: the first verdict for a key wins.
// An approval's place in its target's history is not Create's: the
// engine joins it there first (Join).
// An entry under the key that is not a verdict for it is no verdict: it
// is replaced, at its revision, so that a proposal under a key somebody
// else wrote into still gets its verdict.
func (s *Verdicts) Create(ctx context.Context, v *gated.Verdict) (*gated.Verdict, error) {
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
			return stored, gated.ErrExists
		case errors.Is(gerr, gated.ErrNotFound):
			continue // deleted in between: create it again
		case !errors.Is(gerr, gated.ErrCorruptRecord):
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
	if err := s.recordRound(ctx, v); err != nil {
		return nil, err
	}
	return v, nil
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

// Replace implements engine.VerdictReplacer. The swap is a compare-and-set
// on the verdict's key at the revision that held prev, so of two
// replacements of one verdict (two operators deciding at once) one wins
// and the other gets the winner's verdict and gated.ErrExists. It
// returns gated.ErrNotFound when no verdict is stored for prev's key.
// next must have prev's tenant and proposal id.
//
// The run record is kept after the swap, as Create keeps it: if that
// fails, the verdict is replaced already and the error says the round is
// not recorded; the follow-up publisher records it (see FollowUps.Send).
func (s *Verdicts) Replace(ctx context.Context, prev, next *gated.Verdict) (*gated.Verdict, error) {
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
			return nil, gated.ErrNotFound
		}
		if err != nil {
			return nil, fmt.Errorf("reading verdict %s: %w", key, err)
		}
		stored, err := s.decodeVerdict(ctx, prev.Tenant, prev.ProposalID, e.Revision(), e.Value())
		if err != nil {
			return nil, err
		}
		if stored.AuditSeq != prev.AuditSeq {
			return stored, gated.ErrExists
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
