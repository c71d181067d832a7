package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
)

func runKey(tenant, runID string) string { return tenant + ".runs." + runID }

// RunRecord implements engine.RunRecords. A record that cannot be
// decoded is an error, not an empty record: the policy refuses rounds out
// of order and closed runs from it, so it is never guessed.
func (s *Verdicts) RunRecord(ctx context.Context, tenant, runID string) (*gated.RunRecord, error) {
	rec, _, err := s.runRecord(ctx, tenant, runID)
	return rec, err
}

// runRecord reads a run record and its revision; nil and 0 when there is
// none.
func (s *Verdicts) runRecord(ctx context.Context, tenant, runID string) (*gated.RunRecord, uint64, error) {
	if !gated.ValidTenant(tenant) || !gated.ValidID(runID) {
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
func (s *Verdicts) updateRun(ctx context.Context, tenant, runID string, change func(*gated.RunRecord) bool) (*gated.RunRecord, error) {
	key := runKey(tenant, runID)
	for attempt := 0; attempt < 16; attempt++ {
		rec, rev, err := s.runRecord(ctx, tenant, runID)
		if err != nil {
			return nil, err
		}
		work := rec
		if work == nil {
			work = &gated.RunRecord{Tenant: tenant, RunID: runID}
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
// (gated.Records): a continuation, an escalation or an approval. A round
// already held, by v's proposal or another, is left as it is.
func (s *Verdicts) recordRound(ctx context.Context, v *gated.Verdict) error {
	if !gated.Records(v) {
		return nil
	}
	if _, err := s.updateRun(ctx, v.Tenant, v.Run.RunID, func(r *gated.RunRecord) bool { return r.Add(v) }); err != nil {
		return fmt.Errorf("recording round %d of run %s: %w", v.Run.Round, v.Run.RunID, err)
	}
	return nil
}

// PendingRound returns the round of v's run that v's follow-up belongs
// to, when that follow-up is still to be sent: the round is recorded for
// v's proposal with v's follow-up and is not marked sent. Otherwise it
// returns nil.
//
// A round missing from the record is recorded first, as Create would
// have: a gated that stored the verdict and died before recording the
// round leaves that to the replay. Add leaves a round held by another
// proposal alone, so a round still has one follow-up.
func (s *Verdicts) PendingRound(ctx context.Context, v *gated.Verdict) (*gated.RunRound, error) {
	rec, err := s.updateRun(ctx, v.Tenant, v.Run.RunID, func(r *gated.RunRecord) bool { return r.Add(v) })
	if err != nil {
		return nil, fmt.Errorf("recording round %d of run %s: %w", v.Run.Round, v.Run.RunID, err)
	}
	round := rec.Round(v.Run.Round)
	if round == nil || round.ProposalID != v.ProposalID || round.Next != v.Run.Next || round.Sent {
		return nil, nil
	}
	return round, nil
}

// MarkSent records that the follow-up of v's round is stored in the run
// stream, so a later replay of v does not publish it again.
func (s *Verdicts) MarkSent(ctx context.Context, v *gated.Verdict) error {
	_, err := s.updateRun(ctx, v.Tenant, v.Run.RunID, func(r *gated.RunRecord) bool {
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
