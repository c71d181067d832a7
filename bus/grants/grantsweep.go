package grants

import (
	"container/heap"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/gated/gated"
	"go.uber.org/zap"
)

// maxDue bounds the grants a process keeps for its own sweep; past it a
// grant is not kept: it is never marked nor audited as expired, and its
// use after exp is refused all the same (docs/GRANTS.md, Expiry).
const maxDue = 1 << 20

// sweepLoop republishes the keys and marks the grants this process
// signed that expired unused, every Sweep. A grant has no record until it
// is used, so the sweep reads nothing for a grant before its exp, and for
// each one the stored verdict carries and nobody used, one look-up and
// one write after it.
func (g *Service) sweepLoop(ctx context.Context) {
	t := time.NewTicker(g.cfg.Sweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := g.publishKeys(ctx, g.Ring()); err != nil && ctx.Err() == nil {
			g.log.Warn("republishing the grant keys", zap.Error(err))
		}
		if _, err := g.SweepDue(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("sweeping the expired grants of this gated", zap.Error(err))
		}
	}
}

// SweepDue marks as expired the grants this process signed whose exp has
// passed, that the stored verdict of their proposal carries (a grant of a
// verdict never stored was never handed out) and that nobody used: it
// creates the grant's record, expired, where none is, so that of a late
// use and the sweep exactly one writes it. It audits grant.expired for
// each and returns how many it marked. A grant of a gated that stopped
// before its exp is not marked; its use after exp is refused all the
// same.
func (g *Service) SweepDue(ctx context.Context) (int, error) {
	n := 0
	for {
		d, ok := g.takeDue(g.cfg.Now().Unix())
		if !ok {
			return n, ctx.Err()
		}
		marked, err := g.expire(ctx, d)
		if err != nil {
			return n, err
		}
		if marked {
			n++
		}
	}
}

// expire marks the grant d expired when the stored verdict carries it and
// it has no record, and audits grant.expired. A verdict that cannot be
// read leaves the grant unmarked; the error is the audit's.
func (g *Service) expire(ctx context.Context, d dueGrant) (bool, error) {
	v, err := g.storedVerdict(ctx, d.key)
	if err != nil || sha256.Sum256([]byte(v.Grant)) != d.token {
		return false, nil
	}
	tenant, id, _ := strings.Cut(d.key, ".")
	rec := Record{GID: d.gid, Tenant: tenant, ProposalID: id, Exp: d.exp, Agent: v.Agent, State: StateExpired}
	data, err := json.Marshal(rec)
	if err != nil {
		return false, nil
	}
	if _, err := g.records.Create(ctx, d.key, data); err != nil {
		return false, nil // used meanwhile, or the bucket unreachable
	}
	if err := g.audit(ctx, rec.Tenant, rec.ProposalID, gated.EventGrantExpired, gated.GrantExpiredData{
		GID: rec.GID, Tenant: rec.Tenant, ProposalID: rec.ProposalID, Exp: rec.Exp,
	}); err != nil {
		return true, fmt.Errorf("auditing an expired grant: %w", err)
	}
	return true, nil
}

// dueGrant is a grant this process signed: its exp, its key, its gid
// and the SHA-256 of its token.
type dueGrant struct {
	exp   int64
	key   string
	gid   string
	token [sha256.Size]byte
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

// addDue keeps the grant d for SweepDue.
func (g *Service) addDue(d dueGrant) {
	g.dmu.Lock()
	defer g.dmu.Unlock()
	if len(g.due) >= maxDue {
		return // never marked expired; its use past exp is refused
	}
	heap.Push(&g.due, d)
}

// takeDue removes and returns the grant with the soonest exp when that
// exp is at or before now.
func (g *Service) takeDue(now int64) (dueGrant, bool) {
	g.dmu.Lock()
	defer g.dmu.Unlock()
	if len(g.due) == 0 || g.due[0].exp > now {
		return dueGrant{}, false
	}
	return heap.Pop(&g.due).(dueGrant), true
}
