package flow

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// Bucket is the key-value bucket of the flow state, keyed
// <tenant>.<agent key>.
const Bucket = "GATED_FLOWS"

// TTL is how long a record nobody writes stays: longer than any window
// the data may set (MaxWindow).
const TTL = 8 * 24 * time.Hour

// MaxWindow is the longest flow window the state can keep.
const MaxWindow = 7 * 24 * time.Hour

// casTries bounds the compare-and-set rounds of one change: each lost
// round means another process changed the record, which it did.
const casTries = 64

// Setup creates the bucket, or updates its configuration.
func Setup(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	if replicas == 0 {
		replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "Flow state by tenant and agent: the labelled actions each agent executed over the flow window.",
		History:     1,
		TTL:         TTL,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("creating bucket %s: %w", Bucket, err)
	}
	return kv, nil
}

// Store reads and changes the flow state in the bucket. It is safe for
// concurrent use, by any number of processes.
type Store struct{ kv jetstream.KeyValue }

var _ engine.Sessions = (*Store)(nil)

// New returns a Store over the bucket kv (Setup).
func New(kv jetstream.KeyValue) *Store { return &Store{kv: kv} }

var plainAgent = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Key is the key of agent's record of tenant: the agent itself when it is
// a plain token, else "=" and its hex (which no plain token can be); "="
// alone for proposals that name no agent. requested_by.session is no part
// of it: a new session id does not shed what the agent did.
func Key(tenant, agent string) string {
	if plainAgent.MatchString(agent) {
		return tenant + "." + agent
	}
	return tenant + ".=" + hex.EncodeToString([]byte(agent))
}

// Session returns the flow state of agent of tenant: empty when there is
// no record. An error means the record could not be read or is corrupt.
func (s *Store) Session(ctx context.Context, tenant, agent string) (gated.SessionState, error) {
	r, _, err := s.get(ctx, Key(tenant, agent))
	if err != nil {
		return gated.SessionState{}, err
	}
	return gated.NewSessionState(r.Recent), nil
}

// get reads the record at key and its revision (0: none).
func (s *Store) get(ctx context.Context, key string) (record, uint64, error) {
	e, err := s.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return record{V: recordVersion}, 0, nil
	case err != nil:
		return record{}, 0, fmt.Errorf("reading the flow state %s: %w", key, err)
	}
	r, err := decodeRecord(e.Value())
	if err != nil {
		return record{}, 0, fmt.Errorf("reading the flow state %s: %w", key, err)
	}
	return r, e.Revision(), nil
}

// Record adds the executed action a to agent's state of tenant, once per
// proposal, dropping the actions that ran window or more before it and
// keeping the newest max. It changes the record by compare-and-set: of
// two processes recording at once, both actions land. A corrupt record is
// not replaced (the flow rules deny on it until an operator clears it).
func (s *Store) Record(ctx context.Context, tenant, agent string, a gated.ExecutedAction, window time.Duration, max int) error {
	key := Key(tenant, agent)
	for range casTries {
		r, rev, err := s.get(ctx, key)
		if err != nil {
			return err
		}
		next, changed := r.add(a, window, max)
		if !changed {
			return nil
		}
		data, err := json.Marshal(next)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, key, data)
		} else {
			_, err = s.kv.Update(ctx, key, data, rev)
		}
		if err == nil || !lostRace(err) {
			if err != nil {
				return fmt.Errorf("writing the flow state %s: %w", key, err)
			}
			return nil
		}
	}
	return fmt.Errorf("writing the flow state %s: %d writers in a row changed it first", key, casTries)
}

// lostRace tells whether a create or update failed because another
// writer changed the record first.
func lostRace(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Snapshot is an agent's record as it is stored: its revision (0: there
// is none), and its actions, or why they do not decode.
type Snapshot struct {
	Revision uint64
	Recent   []gated.ExecutedAction
	Corrupt  string
}

// Snapshot reads agent's record of tenant, corrupt or not. An error means
// it could not be read.
func (s *Store) Snapshot(ctx context.Context, tenant, agent string) (Snapshot, error) {
	key := Key(tenant, agent)
	e, err := s.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return Snapshot{}, nil
	case err != nil:
		return Snapshot{}, fmt.Errorf("reading the flow state %s: %w", key, err)
	}
	snap := Snapshot{Revision: e.Revision()}
	if r, err := decodeRecord(e.Value()); err != nil {
		snap.Corrupt = err.Error()
	} else {
		snap.Recent = r.Recent
	}
	return snap, nil
}

// ErrChanged means the record is no longer at the revision a clear named.
var ErrChanged = errors.New("the flow state changed")

// Clear removes agent's state of tenant, corrupt or not, if its record is
// still at revision rev (Snapshot): else the error wraps ErrChanged and
// nothing is removed.
func (s *Store) Clear(ctx context.Context, tenant, agent string, rev uint64) error {
	key := Key(tenant, agent)
	err := s.kv.Delete(ctx, key, jetstream.LastRevision(rev))
	switch {
	case err == nil:
		return nil
	case lostRace(err):
		return fmt.Errorf("clearing the flow state %s: %w since revision %d", key, ErrChanged, rev)
	}
	return fmt.Errorf("clearing the flow state %s: %w", key, err)
}
