package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

func claimKey(tenant, id string) string { return tenant + ".claims." + id }

// Claim implements engine.ReviewClaims. Claims are taken and replaced with
// the bucket's compare-and-set, so of two gated processes claiming at once
// one wins and the other is told who holds the claim. Staleness is judged
// by this process's clock. Most proposals were never claimed, so the claim
// is created first and read only when one is there already.
func (s *Verdicts) Claim(ctx context.Context, tenant, id string, c engine.Claim) (engine.Claim, error) {
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
			return held, fmt.Errorf("%w: %s.%s by %s until %s", gated.ErrClaimed, tenant, id, held.Holder, held.Until.Format(time.RFC3339))
		}
		rev, err = s.kv.Update(ctx, key, data, e.Revision())
		if err == nil {
			c.Revision, c.Replaced = rev, true
			return c, nil
		}
		if !casConflict(err) {
			return engine.Claim{}, fmt.Errorf("writing review claim %s: %w", key, err)
		}
		// Another process claimed in between: look again.
	}
	return engine.Claim{}, fmt.Errorf("review claim %s kept changing under concurrent claims", key)
}

// Release implements engine.ReviewClaims. It purges the claim only at the
// revision it was taken at, so a claim taken over meanwhile is left alone;
// a claim of unknown revision is read first, and purged at the revision
// read if c's holder holds it.
func (s *Verdicts) Release(ctx context.Context, tenant, id string, c engine.Claim) error {
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

// Await implements engine.ReviewClaims with a watch on the verdict's key,
// which first delivers a verdict already stored.
func (s *Verdicts) Await(ctx context.Context, tenant, id string) (*gated.Verdict, error) {
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
