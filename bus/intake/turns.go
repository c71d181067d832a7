package intake

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// tenantTurns are one tenant's turns: how many of its proposals hold one,
// the proposals that gave theirs up to their reviews and wait to take one
// back, and the proposals that have not begun, each oldest first. A turn
// that ends goes to a returning proposal before any that has not begun,
// so that new arrivals cannot keep a reviewed proposal from its verdict.
type tenantTurns struct {
	running int
	// reviewing counts the proposals that gave their turn up to their
	// reviews and have not yet asked for one back: they keep the tenant
	// among those with proposals in gated.
	reviewing int
	returning []*turn
	waiting   []jetstream.Msg
	// listed is true while the tenant is in the worker's runnable list.
	listed bool
}

// turn is one delivery's hold on a turn of its tenant, the engine.Turn
// the worker hands the engine. held is guarded by the worker's tmu. A
// turn is only ever held by a proposal that has a handler, so a
// proposal waiting for a turn back can always get one from a proposal
// that is running.
type turn struct {
	w      *Worker
	tenant string
	held   bool
	// given is closed when a turn is handed to it while it waits in its
	// tenant's returning queue.
	given chan struct{}
}

var _ engine.Turn = (*turn)(nil)

// Release gives the turn up while the delivery waits on its reviews: to
// a proposal of the tenant waiting to take one back, or else to the next
// that has not begun, on the next free handler.
func (t *turn) Release() {
	w := t.w
	w.tmu.Lock()
	defer w.tmu.Unlock()
	if !t.held {
		return
	}
	t.held = false
	if tt := w.tenants[t.tenant]; tt != nil {
		tt.reviewing++
	}
	w.passTurnLocked(t.tenant)
}

// Retake takes a turn back: at once if the tenant has one free and no
// other proposal waits to take one back, else after those ahead of it,
// before any proposal that has not begun.
func (t *turn) Retake(ctx context.Context) error {
	w := t.w
	w.tmu.Lock()
	if t.held {
		w.tmu.Unlock()
		return nil
	}
	tt := w.tenantLocked(t.tenant)
	tt.reviewing = max(0, tt.reviewing-1)
	if tt.running < w.turnsLocked() && len(tt.returning) == 0 {
		tt.running++
		t.held = true
		w.tmu.Unlock()
		return nil
	}
	t.given = make(chan struct{})
	tt.returning = append(tt.returning, t)
	w.tmu.Unlock()
	select {
	case <-t.given:
		return nil
	case <-ctx.Done():
	}
	w.tmu.Lock()
	defer w.tmu.Unlock()
	if !t.held {
		// Not handed one: it leaves the queue, holding nothing.
		if tt := w.tenants[t.tenant]; tt != nil {
			if i := slices.Index(tt.returning, t); i >= 0 {
				tt.returning = slices.Delete(tt.returning, i, i+1)
			}
			w.scheduleLocked(t.tenant, tt)
		}
	}
	return fmt.Errorf("waiting for a turn of tenant %q: %w", t.tenant, ctx.Err())
}

// proposalTenant is the tenant token of a proposal subject,
// gated.proposals.<tenant>.<action>; a malformed subject has its own
// queue, "".
func proposalTenant(subject string) string {
	rest, ok := strings.CutPrefix(subject, wire.ProposalSubjectPrefix)
	if !ok {
		return ""
	}
	tenant, _, _ := strings.Cut(rest, ".")
	return tenant
}

// tenantLocked returns tenant's turns, made if it has none.
func (w *Worker) tenantLocked(tenant string) *tenantTurns {
	t := w.tenants[tenant]
	if t == nil {
		t = &tenantTurns{}
		w.tenants[tenant] = t
	}
	return t
}

// scheduleLocked lists tenant as runnable when it has a turn free, no
// proposal waiting to take one back, and a proposal waiting for its
// first, and wakes or starts a handler for it; it forgets a tenant with
// nothing held or waiting.
func (w *Worker) scheduleLocked(tenant string, t *tenantTurns) {
	switch {
	case t.running < w.turnsLocked() && len(t.returning) == 0 && len(t.waiting) > 0:
		if !t.listed {
			t.listed = true
			w.runnable = append(w.runnable, tenant)
			w.wakeLocked()
		}
	case t.running <= 0 && t.reviewing <= 0 && len(t.returning) == 0 && len(t.waiting) == 0 && !t.listed:
		delete(w.tenants, tenant)
		if len(w.tenants) == 1 {
			// The tenant left alone may now use every handler.
			for name, other := range w.tenants {
				w.handOnLocked(other)
				w.scheduleLocked(name, other)
			}
		}
	}
}

// turnsLocked is how many turns each tenant has: TenantMaxInFlight while
// several tenants have proposals in this gated (deciding, under review or
// waiting), so that none delays another's; nearly every handler for a
// tenant alone, so that one tenant is not throttled for the sake of none.
func (w *Worker) turnsLocked() int {
	if len(w.tenants) > 1 {
		return w.cfg.TenantMaxInFlight
	}
	// A tenant alone leaves TenantMaxInFlight handlers to the next
	// tenant to come, so that it finds one free even when every proposal
	// of the first is stuck.
	return max(w.cfg.TenantMaxInFlight, w.cfg.MaxInFlight-w.cfg.TenantMaxInFlight)
}

// handOnLocked hands t's free turns to its proposals waiting to take one
// back after their reviews, oldest first.
func (w *Worker) handOnLocked(t *tenantTurns) {
	for len(t.returning) > 0 && t.running < w.turnsLocked() {
		next := t.returning[0]
		t.returning[0] = nil
		t.returning = t.returning[1:]
		t.running++
		next.held = true
		close(next.given)
	}
}

// wakeLocked wakes an idle handler, or starts one while fewer than
// MaxInFlight run; with neither, the first handler to finish a proposal
// takes the next runnable one.
func (w *Worker) wakeLocked() {
	if w.idle > 0 {
		select {
		case w.wake <- struct{}{}:
		default:
		}
		return
	}
	if w.handlers < w.cfg.MaxInFlight {
		// Called by dispatch, which Stop waits out before it waits for the
		// handlers, or by a handler, counted in wg: the Add cannot race
		// Stop's Wait.
		w.handlers++
		w.wg.Go(w.handleAll)
	}
}

// passTurnLocked ends one turn of tenant and hands it on: to the oldest
// proposal waiting to take one back, which goes on in its own handler,
// or else to the next proposal that has not begun, on the next free
// handler.
func (w *Worker) passTurnLocked(tenant string) {
	t := w.tenants[tenant]
	if t == nil {
		return
	}
	t.running--
	w.handOnLocked(t)
	w.scheduleLocked(tenant, t)
}

// endTurn ends the turn of a decided proposal, if it holds one.
func (w *Worker) endTurn(t *turn) {
	w.tmu.Lock()
	defer w.tmu.Unlock()
	if !t.held {
		return // its wait for a turn back was cut short at shutdown
	}
	t.held = false
	w.passTurnLocked(t.tenant)
}

// nextWork waits for the next proposal a handler decides and takes its
// turn: the oldest waiting of the first runnable tenant, which then goes
// to the back of the list, so that tenants take turns at the handlers.
// It returns nil when Stop ends the handlers.
func (w *Worker) nextWork() (jetstream.Msg, *turn) {
	w.tmu.Lock()
	defer w.tmu.Unlock()
	for {
		for len(w.runnable) > 0 && !w.isStopping() {
			name := w.runnable[0]
			w.runnable[0] = ""
			w.runnable = w.runnable[1:]
			t := w.tenants[name]
			if t == nil {
				continue
			}
			t.listed = false
			if t.running >= w.turnsLocked() || len(t.returning) > 0 || len(t.waiting) == 0 {
				w.scheduleLocked(name, t)
				continue
			}
			msg := t.waiting[0]
			t.waiting[0] = nil
			t.waiting = t.waiting[1:]
			t.running++
			w.scheduleLocked(name, t)
			select {
			case w.picked <- struct{}{}:
			default:
			}
			if len(w.runnable) > 0 && w.idle > 0 {
				select {
				case w.wake <- struct{}{}:
				default:
				}
			}
			return msg, &turn{w: w, tenant: name, held: true}
		}
		w.idle++
		w.tmu.Unlock()
		var done bool
		select {
		case <-w.wake:
		case <-w.quit:
			done = true
		}
		w.tmu.Lock()
		w.idle--
		if done {
			return nil, nil
		}
	}
}
