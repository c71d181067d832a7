package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/engine"
)

// VerdictStore keeps verdicts in the GATED_VERDICTS bucket under
// "<tenant>.<id>". It implements engine.VerdictStore.
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
	return v, nil
}
