package grants

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated/engine/grant"
)

// Ring returns the key ring that signs now.
func (g *Service) Ring() *grant.Ring { return g.ring.Load() }

// SetRing publishes the public keys of r into the shared key set, then
// makes r the ring that signs: no grant of r's is issued before every
// verifier can find its key.
func (g *Service) SetRing(ctx context.Context, r *grant.Ring) error {
	if err := g.publishKeys(ctx, r); err != nil {
		return err
	}
	g.ring.Store(r)
	return nil
}

// publishKeys merges r's public keys into the shared key set by
// compare-and-set, dropping keys no live grant can need.
func (g *Service) publishKeys(ctx context.Context, r *grant.Ring) error {
	for range 10 {
		now := g.cfg.Now()
		cur, rev, err := g.loadKeys(ctx)
		if err != nil {
			return err
		}
		merged := grant.Merge(now, cur, r.Public(now))
		data, err := json.Marshal(merged)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = g.keys.Create(ctx, grantKeysKey, data)
		} else {
			_, err = g.keys.Update(ctx, grantKeysKey, data, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("publishing the grant keys: %w", err)
		}
	}
	return fmt.Errorf("publishing the grant keys: too many concurrent updates")
}

// loadKeys reads the shared key set and its revision (0: none yet).
func (g *Service) loadKeys(ctx context.Context) (grant.KeySet, uint64, error) {
	e, err := g.keys.Get(ctx, grantKeysKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return grant.KeySet{Keys: []grant.Key{}}, 0, nil
	}
	if err != nil {
		return grant.KeySet{}, 0, fmt.Errorf("reading the grant keys: %w", err)
	}
	ks, err := grant.ParseKeySet(e.Value())
	if err != nil {
		return grant.KeySet{}, 0, fmt.Errorf("reading the grant keys from %s: %w", KeysBucket, err)
	}
	return ks, e.Revision(), nil
}

// KeySet is the key set gated publishes: every gated's keys, less those
// no live grant can need.
func (g *Service) KeySet(ctx context.Context) (grant.KeySet, error) {
	ks, _, err := g.loadKeys(ctx)
	if err != nil {
		return grant.KeySet{}, err
	}
	return grant.Merge(g.cfg.Now(), ks, g.Ring().Public(g.cfg.Now())), nil
}

func (g *Service) serveKeys(msg *nats.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ks, err := g.KeySet(ctx)
	if err != nil {
		g.log.Warn("answering a grant key request", zap.Error(err))
		return // no answer: the requester times out rather than read a wrong set
	}
	data, _ := json.Marshal(ks)
	_ = msg.Respond(data)
}
