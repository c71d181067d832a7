package grants

import (
	"container/heap"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gated/gated"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// maxDue bounds the grants a process keeps for its own sweep; past it a
// grant waits for the next full sweep.
const maxDue = 1 << 20

// sweepLoop republishes the keys and sweeps expired grants every Sweep:
// every record at the first sweep and every FullSweep after (grants
// recorded by a gated that stopped before their exp, this one's previous
// run included), and in between only the grants this process recorded
// whose exp has passed. A full sweep reads the whole bucket, which holds
// the grants of the records' TTL (a week by default): done every few
// seconds, it grew with the history and came to dominate the process.
func (g *Service) sweepLoop(ctx context.Context) {
	t := time.NewTicker(g.cfg.Sweep)
	defer t.Stop()
	var full time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := g.publishKeys(ctx, g.Ring()); err != nil && ctx.Err() == nil {
			g.log.Warn("republishing the grant keys", zap.Error(err))
		}
		now := time.Now()
		if full.IsZero() || now.Sub(full) >= g.cfg.FullSweep {
			if _, err := g.Sweep(ctx); err != nil {
				if ctx.Err() == nil {
					g.log.Warn("sweeping expired grants", zap.Error(err))
				}
				continue
			}
			full = now
			continue
		}
		if _, err := g.SweepDue(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("sweeping the expired grants of this gated", zap.Error(err))
		}
	}
}

// SweepDue marks as expired the grants this process recorded whose exp
// has passed and that are still issued, like Sweep, without reading the
// other records. It returns how many it marked.
func (g *Service) SweepDue(ctx context.Context) (int, error) {
	n := 0
	for {
		now := g.cfg.Now().Unix()
		key, ok := g.takeDue(now)
		if !ok {
			return n, ctx.Err()
		}
		// A record that could not be read is left to the next full
		// sweep.
		marked, err := g.expire(ctx, key)
		if err != nil {
			return n, err
		}
		if marked {
			n++
		}
	}
}

// Sweep marks every grant still issued past its exp as expired, by
// compare-and-set (of several gated sweeping, one marks each), audits
// grant.expired for each, and returns how many it marked. It reads every
// record once, as the bucket holds it, and stops reading when it has
// read them all: a key listing followed by a read of each key held the
// listing open while the reads went on, and its subscription filled with
// the grants recorded meanwhile.
func (g *Service) Sweep(ctx context.Context) (int, error) {
	w, err := g.records.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return 0, fmt.Errorf("reading the grants: %w", err)
	}
	defer func() { _ = w.Stop() }()
	n := 0
	for {
		select {
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return n, fmt.Errorf("reading the grants: the watch ended after %d marked", n)
			case e == nil:
				return n, nil // every record read
			}
			marked, err := g.expireAt(ctx, e.Key(), e.Value(), e.Revision())
			if err != nil {
				return n, err
			}
			if marked {
				n++
			}
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
}

// expire marks the grant under key expired when it is still issued and
// its exp has passed, and audits grant.expired. A record that cannot be
// read is left as it is.
func (g *Service) expire(ctx context.Context, key string) (bool, error) {
	e, err := g.records.Get(ctx, key)
	if err != nil {
		return false, nil
	}
	return g.expireAt(ctx, key, e.Value(), e.Revision())
}

// expireAt marks the grant record data, at revision rev of key, expired
// when it is issued and its exp has passed, and audits grant.expired. A
// record that does not decode, or that changed since rev, is left as it
// is; the error is the audit's.
func (g *Service) expireAt(ctx context.Context, key string, data []byte, rev uint64) (bool, error) {
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil || rec.State != StateIssued || g.cfg.Now().Unix() < rec.Exp {
		return false, nil
	}
	rec.State = StateExpired
	data, err := json.Marshal(rec)
	if err != nil {
		return false, nil
	}
	if _, err := g.records.Update(ctx, key, data, rev); err != nil {
		return false, nil // used or expired meanwhile
	}
	if err := g.audit(ctx, rec.Tenant, rec.ProposalID, gated.EventGrantExpired, map[string]any{
		"gid": rec.GID, "tenant": rec.Tenant, "proposal_id": rec.ProposalID, "exp": rec.Exp,
	}); err != nil {
		return true, fmt.Errorf("auditing an expired grant: %w", err)
	}
	return true, nil
}

// dueGrant is a grant this process recorded: its key and its exp.
type dueGrant struct {
	exp int64
	key string
}

// dueGrants is a min-heap of grants by exp (container/heap).
type dueGrants []dueGrant

func (h dueGrants) Len() int { return len(h) }

func (h dueGrants) Less(i, j int) bool { return h[i].exp < h[j].exp }

func (h dueGrants) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

func (h *dueGrants) Push(x any) { *h = append(*h, x.(dueGrant)) }

func (h *dueGrants) Pop() any {
	old := *h
	last := old[len(old)-1]
	old[len(old)-1] = dueGrant{}
	*h = old[:len(old)-1]
	return last
}

// addDue keeps the grant under key for SweepDue.
func (g *Service) addDue(exp int64, key string) {
	g.dmu.Lock()
	defer g.dmu.Unlock()
	if len(g.due) >= maxDue {
		return // the next full sweep finds it
	}
	heap.Push(&g.due, dueGrant{exp, key})
}

// takeDue removes and returns the key of the grant with the soonest exp
// when that exp is at or before now.
func (g *Service) takeDue(now int64) (string, bool) {
	g.dmu.Lock()
	defer g.dmu.Unlock()
	if len(g.due) == 0 || g.due[0].exp > now {
		return "", false
	}
	return heap.Pop(&g.due).(dueGrant).key, true
}
