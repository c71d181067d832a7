package budget

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/engine"
)

// leaseVersion is the schema version of a lease.
const leaseVersion = 1

// lease is the lease of one admitted review or hold, under a key of its
// own (see leaseKey): it makes an admission idempotent by proposal id (a
// redelivery finds it and counts nothing twice) and tells a release which
// slot of the scopes' records to take it from.
type lease struct {
	V int `json:"v"`
	// Agent is the agent whose record counts the lease, beside its
	// tenant's.
	Agent string `json:"agent"`
	// End is the end of the slot the lease counts in, Unix milliseconds.
	End int64 `json:"end"`
}

// liveAt reports whether the lease still counts at now: a redelivery
// of its proposal is admitted under it without counting again.
func (l *lease) liveAt(now time.Time) bool { return l != nil && l.End > ms(now) }

// leaseKey is the key of the lease of tenant's proposal id for use:
// <tenant>.lease.<use>.<id>. Proposal ids are key tokens.
func leaseKey(tenant string, use engine.BudgetUse, id string) string {
	return tenant + ".lease." + string(use) + "." + id
}

// decodeLease reads a lease strictly. Every error wraps
// ErrCorruptCounters.
func decodeLease(data []byte, key string) (*lease, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var l lease
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("%w: lease %s: %v", ErrCorruptCounters, key, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: lease %s: data after the lease", ErrCorruptCounters, key)
	}
	switch {
	case l.V != leaseVersion:
		return nil, fmt.Errorf("%w: lease %s: version %d, want %d", ErrCorruptCounters, key, l.V, leaseVersion)
	case l.End <= 0 || l.End != slotEnd(l.End):
		return nil, fmt.Errorf("%w: lease %s: end %d is not the end of a slot", ErrCorruptCounters, key, l.End)
	}
	return &l, nil
}

// lease reads the lease under key and its revision; nil and 0 when there
// is none.
func (s *Store) lease(ctx context.Context, key string) (*lease, uint64, error) {
	e, err := s.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, 0, nil
	case err != nil:
		return nil, 0, fmt.Errorf("reading budget lease %s: %w", key, err)
	}
	l, err := decodeLease(e.Value(), key)
	if err != nil {
		return nil, 0, err
	}
	return l, e.Revision(), nil
}

// putLease writes l under key: created when rev is 0, else replacing
// the lease at rev. It returns the revision written.
func (s *Store) putLease(ctx context.Context, key string, l lease, rev uint64) (uint64, error) {
	l.V = leaseVersion
	data, err := json.Marshal(l)
	if err != nil {
		return 0, fmt.Errorf("encoding budget lease %s: %w", key, err)
	}
	var written uint64
	if rev == 0 {
		written, err = s.kv.Create(ctx, key, data)
	} else {
		written, err = s.kv.Update(ctx, key, data, rev)
	}
	if err != nil {
		return 0, fmt.Errorf("writing budget lease %s: %w", key, err)
	}
	return written, nil
}

// maxMine bounds the review leases a process keeps for their release.
// Every review releases its own lease when it ends, so the map holds the
// reviews in flight; past the bound a release reads its lease first.
const maxMine = 1 << 16

// leaseAt is a lease as this process wrote it, at its revision.
type leaseAt struct {
	lease
	rev uint64
}

// keepLease keeps the review lease written under key at rev for its
// release. Leases of holds are not kept: another process may settle them.
func (s *Store) keepLease(use engine.BudgetUse, key string, l lease, rev uint64) {
	if use != engine.BudgetReview {
		return
	}
	s.mineMu.Lock()
	defer s.mineMu.Unlock()
	if _, ok := s.mine[key]; ok || len(s.mine) < maxMine {
		l.V = leaseVersion
		s.mine[key] = leaseAt{l, rev}
	}
}

// takeLease returns and forgets the lease this process kept under key.
func (s *Store) takeLease(key string) (leaseAt, bool) {
	s.mineMu.Lock()
	defer s.mineMu.Unlock()
	l, ok := s.mine[key]
	delete(s.mine, key)
	return l, ok
}
