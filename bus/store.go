package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/engine"
)

// VerdictStore keeps verdicts in the GATED_VERDICTS bucket under
// "<tenant>.<id>", the approvals on a target under
// "<tenant>.targets.<target key>" and review claims under
// "<tenant>.claims.<id>". Verdict keys have two tokens and the others three
// with a fixed second token, so none can collide. It implements
// engine.VerdictStore.
type VerdictStore struct {
	kv jetstream.KeyValue
}

var _ engine.VerdictStore = (*VerdictStore)(nil)

// NewVerdictStore wraps a bucket.
func NewVerdictStore(kv jetstream.KeyValue) *VerdictStore { return &VerdictStore{kv: kv} }

// Get implements engine.VerdictStore.
func (s *VerdictStore) Get(ctx context.Context, tenant, id string) (*engine.Verdict, error) {
	e, err := s.kv.Get(ctx, tenant+"."+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, engine.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	var v engine.Verdict
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return nil, fmt.Errorf("decoding stored verdict %s.%s: %w", tenant, id, err)
	}
	return &v, nil
}

// Create implements engine.VerdictStore: the first verdict for a key wins.
func (s *VerdictStore) Create(ctx context.Context, v *engine.Verdict) (*engine.Verdict, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	_, err = s.kv.Create(ctx, v.Tenant+"."+v.ProposalID, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		stored, gerr := s.Get(ctx, v.Tenant, v.ProposalID)
		if gerr != nil {
			return nil, fmt.Errorf("reading the verdict stored first: %w", gerr)
		}
		return stored, engine.ErrExists
	}
	if err != nil {
		return nil, err
	}
	if v.Approved && v.TargetKey != "" {
		if err := s.remember(ctx, v); err != nil {
			return nil, fmt.Errorf("recording approval on target %s: %w", v.TargetKey, err)
		}
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

// Recent implements engine.VerdictStore.
func (s *VerdictStore) Recent(ctx context.Context, tenant, key string) ([]engine.Verdict, error) {
	e, err := s.kv.Get(ctx, targetKey(tenant, key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var list []engine.Verdict
	if err := json.Unmarshal(e.Value(), &list); err != nil {
		return nil, fmt.Errorf("decoding history of target %s: %w", key, err)
	}
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
	for attempt := 0; attempt < 8; attempt++ {
		var list []engine.Verdict
		var rev uint64
		e, err := s.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			rev = e.Revision()
			if err := json.Unmarshal(e.Value(), &list); err != nil {
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

func claimKey(tenant, id string) string { return tenant + ".claims." + id }

// Claim implements engine.VerdictStore. Claims are taken and replaced with
// the bucket's compare-and-set, so of two gated processes claiming at once
// one wins and the other is told who holds the claim. Staleness is judged
// by this process's clock.
func (s *VerdictStore) Claim(ctx context.Context, tenant, id string, c engine.Claim) (engine.Claim, error) {
	key := claimKey(tenant, id)
	data, err := json.Marshal(c)
	if err != nil {
		return engine.Claim{}, err
	}
	for attempt := 0; attempt < 8; attempt++ {
		e, err := s.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound): // never claimed, or released
			_, err = s.kv.Create(ctx, key, data)
		case err != nil:
			return engine.Claim{}, fmt.Errorf("reading review claim %s: %w", key, err)
		default:
			var held engine.Claim
			// A claim that cannot be read is no one's: it is replaced.
			if json.Unmarshal(e.Value(), &held) == nil && !c.Supersedes(held) && time.Now().Before(held.Until) {
				return held, fmt.Errorf("%w: %s.%s by %s until %s", engine.ErrClaimed, tenant, id, held.Holder, held.Until.Format(time.RFC3339))
			}
			_, err = s.kv.Update(ctx, key, data, e.Revision())
		}
		if err == nil {
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
// revision it read, so a claim taken over meanwhile is left alone.
func (s *VerdictStore) Release(ctx context.Context, tenant, id, holder string) error {
	key := claimKey(tenant, id)
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading review claim %s: %w", key, err)
	}
	var held engine.Claim
	if json.Unmarshal(e.Value(), &held) == nil && held.Holder != holder {
		return nil
	}
	err = s.kv.Purge(ctx, key, jetstream.LastRevision(e.Revision()))
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
			var v engine.Verdict
			if err := json.Unmarshal(e.Value(), &v); err != nil {
				return nil, fmt.Errorf("decoding stored verdict %s: %w", key, err)
			}
			return &v, nil
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

// RunRecord implements engine.VerdictStore.
func (s *VerdictStore) RunRecord(ctx context.Context, tenant, runID string) (*engine.RunRecord, error) {
	return nil, nil
}

// Replace implements engine.VerdictStore.
func (s *VerdictStore) Replace(ctx context.Context, prev, next *engine.Verdict) (*engine.Verdict, error) {
	return nil, errors.New("replace: not yet supported")
}
