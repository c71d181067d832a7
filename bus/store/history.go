package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/engine"
)

// History bounds: approvals decided, and whose run was last reported,
// more than historyWindow ago, or beyond the newest historyMax, drop out
// of a target's history.
const (
	historyWindow = time.Hour
	historyMax    = 32
)

func targetKey(tenant, key string) string { return tenant + ".targets." + key }

// Recent implements engine.TargetHistory.
func (s *Verdicts) Recent(ctx context.Context, tenant, key string) ([]engine.Verdict, error) {
	e, err := s.kv.Get(ctx, targetKey(tenant, key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.decodeHistory(ctx, tenant, key, e.Revision(), e.Value())
}

// remember appends an approval to its target's history with optimistic
// concurrency: gated processes that approve on the same target at once
// retry instead of overwriting each other. Each attempt reads the history
// as it stands; a history changed between the read and the write fails
// the update and the next attempt reads it afresh.
func (s *Verdicts) remember(ctx context.Context, v *engine.Verdict) error {
	key := targetKey(v.Tenant, v.TargetKey)
	entry := engine.Verdict{
		V: v.V, ProposalID: v.ProposalID, Tenant: v.Tenant, Action: v.Action, Kind: v.Kind,
		Outcome: v.Outcome, Approved: v.Approved, Stage: v.Stage, DecidedAt: v.DecidedAt, TargetKey: v.TargetKey, Agent: v.Agent,
	}
	for attempt := 0; attempt < 8; attempt++ {
		var (
			list []engine.Verdict
			rev  uint64
		)
		e, err := s.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			rev = e.Revision()
			if list, err = s.decodeHistory(ctx, v.Tenant, v.TargetKey, rev, e.Value()); err != nil {
				list = nil // a corrupt history is replaced, not trusted
			}
		}
		cutoff := v.DecidedAt.Add(-historyWindow)
		kept := list[:0]
		for _, h := range list {
			// An approval whose run was reported within the window stays,
			// so that a failure is seen for as long after it as the
			// history keeps anything.
			if h.DecidedAt.After(cutoff) || h.Execution != nil && h.Execution.At.After(cutoff) {
				kept = append(kept, h)
			}
		}
		kept = append(kept, entry)
		if len(kept) > historyMax {
			kept = kept[len(kept)-historyMax:]
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

// RecordExecution sets the execution of proposal id's entry in the
// history of tenant's target, by compare-and-set, so that the policy sees
// it (input.history[i].execution). A final status (succeeded, failed) is
// never replaced by a started that arrives after it. It reports false
// when the history holds no entry of id: the approval is older than the
// history keeps, or names no target.
func (s *Verdicts) RecordExecution(ctx context.Context, tenant, target, id string, ex engine.Execution) (bool, error) {
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
		i := slices.IndexFunc(list, func(v engine.Verdict) bool { return v.ProposalID == id })
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
