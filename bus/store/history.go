package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// History bounds: approvals decided, and whose run was last reported,
// more than HistoryWindow ago, or beyond the newest historyMax, drop out
// of a target's history. The bucket must keep a target's key at least
// HistoryWindow after its last write, or the policy's windows would not
// see the approvals in it.
const (
	HistoryWindow = time.Hour
	historyMax    = 32
)

func targetKey(tenant, key string) string { return tenant + ".targets." + key }

// Recent implements engine.TargetHistory.
func (s *Verdicts) Recent(ctx context.Context, tenant, key string) (engine.History, error) {
	e, err := s.kv.Get(ctx, targetKey(tenant, key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return engine.History{}, nil
	}
	if err != nil {
		return engine.History{}, err
	}
	list, err := s.decodeHistory(ctx, tenant, key, e.Revision(), e.Value())
	if err != nil {
		return engine.History{}, err
	}
	return engine.History{Verdicts: list, Revision: e.Revision()}, nil
}

// Join implements engine.TargetHistory: the history is written with the
// bucket's compare-and-set at h's revision (created when h has none), so
// of two approvals that read one history only the first joins. The entry
// keeps what the policy reads of an approval; entries older than the
// history's window, and beyond its newest historyMax, drop out.
func (s *Verdicts) Join(ctx context.Context, v *gated.Verdict, h engine.History) (engine.History, error) {
	if !v.Approved || v.TargetKey == "" {
		return h, fmt.Errorf("joining a target's history: the verdict of %s.%s is no approval on a target", v.Tenant, v.ProposalID)
	}
	key := targetKey(v.Tenant, v.TargetKey)
	entry := gated.Verdict{
		V: v.V, ProposalID: v.ProposalID, Tenant: v.Tenant, Action: v.Action, Kind: v.Kind,
		Outcome: v.Outcome, Approved: v.Approved, Stage: v.Stage, DecidedAt: v.DecidedAt, TargetKey: v.TargetKey, Agent: v.Agent,
	}
	cutoff := v.DecidedAt.Add(-HistoryWindow)
	kept := make([]gated.Verdict, 0, len(h.Verdicts)+1)
	for _, o := range h.Verdicts {
		// An entry of the proposal itself was left by a decision that
		// crashed before its verdict was stored: this one replaces it. An
		// approval whose run was reported within the window stays, so that
		// a failure is seen for as long after it as the history keeps
		// anything.
		recent := o.DecidedAt.After(cutoff) || o.Execution != nil && o.Execution.At.After(cutoff)
		if recent && o.ProposalID != v.ProposalID {
			kept = append(kept, o)
		}
	}
	kept = append(kept, entry)
	if len(kept) > historyMax {
		kept = kept[len(kept)-historyMax:]
	}
	data, err := json.Marshal(kept)
	if err != nil {
		return h, err
	}
	var rev uint64
	if h.Revision == 0 {
		rev, err = s.kv.Create(ctx, key, data)
	} else {
		rev, err = s.kv.Update(ctx, key, data, h.Revision)
	}
	switch {
	case err == nil:
		return engine.History{Verdicts: kept, Revision: rev}, nil
	case !casConflict(err):
		return h, fmt.Errorf("writing target history %s: %w", key, err)
	}
	fresh, err := s.Recent(ctx, v.Tenant, v.TargetKey)
	if err != nil {
		return h, fmt.Errorf("reading target history %s: %w", key, err)
	}
	return fresh, fmt.Errorf("%w: target history %s is at revision %d, not %d", engine.ErrTargetChanged, key, fresh.Revision, h.Revision)
}

// RecordExecution sets the execution of proposal id's entry in the
// history of tenant's target, by compare-and-set, so that the policy sees
// it (input.history[i].execution). A final status (succeeded, failed) is
// never replaced by a started that arrives after it. It reports false
// when the history holds no entry of id: the approval is older than the
// history keeps, or names no target.
func (s *Verdicts) RecordExecution(ctx context.Context, tenant, target, id string, ex gated.Execution) (bool, error) {
	if target == "" {
		return false, nil
	}
	key := targetKey(tenant, target)
	for range 8 {
		e, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading the history of %s: %w", key, err)
		}
		list, err := s.decodeHistory(ctx, tenant, target, e.Revision(), e.Value())
		if err != nil {
			return false, err
		}
		i := slices.IndexFunc(list, func(v gated.Verdict) bool { return v.ProposalID == id })
		if i < 0 {
			return false, nil
		}
		if list[i].Execution.Final() && !(&ex).Final() {
			return true, nil
		}
		list[i].Execution = &ex
		data, err := json.Marshal(list)
		if err != nil {
			return false, err
		}
		if _, err = s.kv.Update(ctx, key, data, e.Revision()); err == nil {
			return true, nil
		}
		if !casConflict(err) {
			return false, fmt.Errorf("writing the history of %s: %w", key, err)
		}
	}
	return false, fmt.Errorf("the history of %s kept changing under concurrent updates", key)
}
