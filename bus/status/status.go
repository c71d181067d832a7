// Package status publishes each proposal's progress for its fleet: the
// received, policy_decided, review_started, awaiting_operator and decided
// stages on gated.status.<tenant>.<id> (gated.Status, wire.StatusSubject).
//
// The stages come from the audit events gated appends for a proposal:
// Publisher.Trails wraps the audit trails every decision records on, and
// publishes a status for each event that marks a stage
// (engine.StatusStageOf). A stage is published once its event is queued on
// the trail; decided only once the trail is sealed, so the verdict it
// carries is in the audit stream.
//
// Status events are core NATS and best effort: nobody has to listen, a
// publish that fails is counted and logged, never retried, and never
// delays or changes a decision. A status nobody listens to is not sent:
// a proposal's statuses are published only when its trail follows them
// (its Follow method: the proposal carried wire.StatusHeader), when a fleet asked
// for them on gated.watch.<tenant>.<id> (Serve), or when the server has a
// subscriber for them (SetInterest: the embedded server's account).
package status

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// WatchTTL is how long gated publishes the statuses of a proposal a
// fleet asked for on gated.watch.<tenant>.<id>.
const WatchTTL = time.Hour

// MaxWatchedPerTenant bounds the proposals of one tenant asked for at
// once; past it the tenant's oldest ask is forgotten first, so one
// tenant's asks never forget another's.
const MaxWatchedPerTenant = 1 << 14

// Publisher publishes the status events of the proposals decided on the
// trails it wraps. It is safe for concurrent use.
type Publisher struct {
	nc  *nats.Conn
	log *zap.Logger
	// published and failed count status events sent and not sent (a
	// publish error, or an audit event whose data did not read).
	published, failed atomic.Uint64
	// interest, when set, says whether the server has a subscriber on a
	// subject.
	interest func(subject string) bool
	// watched holds the status subjects fleets asked for, with when
	// each ask lapses; asks holds each tenant's subjects of watched,
	// oldest ask first; nwatched is watched's size, read without the
	// lock. perTenant bounds a tenant's asks (MaxWatchedPerTenant).
	wmu       sync.RWMutex
	watched   map[string]time.Time
	asks      map[string][]string
	nwatched  atomic.Int64
	perTenant int
	sub       *nats.Subscription
}

// NewPublisher publishes on nc. A nil log logs nothing.
func NewPublisher(nc *nats.Conn, log *zap.Logger) *Publisher {
	if log == nil {
		log = zap.NewNop()
	}
	return &Publisher{nc: nc, log: log, perTenant: MaxWatchedPerTenant}
}

// SetInterest has p ask interest(subject) before publishing a status that
// nobody asked for: the embedded server's account knows its subscribers.
// Call it before the first decision.
func (p *Publisher) SetInterest(interest func(subject string) bool) { p.interest = interest }

// Serve answers gated.watch.<tenant>.<id>: every gated takes each ask
// (not a queue group), publishes the proposal's statuses for WatchTTL,
// and answers {"ok":true}, so that a watch which has its answer was heard
// before the proposal it watches is decided. Stop ends it.
func (p *Publisher) Serve() error {
	sub, err := p.nc.Subscribe(wire.StatusWatchSubjects, func(m *nats.Msg) {
		tenant, id, ok := watchSubject(m.Subject)
		if !ok {
			_ = m.Respond([]byte(`{"ok":false,"error":"the subject is not gated.watch.<tenant>.<id>"}`))
			return
		}
		p.watch(tenant, wire.StatusSubject(tenant, id), time.Now())
		_ = m.Respond([]byte(`{"ok":true}`))
	})
	if err != nil {
		return err
	}
	p.sub = sub
	return nil
}

// Stop stops answering watches.
func (p *Publisher) Stop() {
	if p.sub != nil {
		_ = p.sub.Unsubscribe()
	}
}

// watchSubject reads the tenant and id of gated.watch.<tenant>.<id>.
func watchSubject(subject string) (tenant, id string, ok bool) {
	rest := subject[len(wire.StatusWatchSubjectPrefix):]
	for i := range len(rest) {
		if rest[i] == '.' {
			tenant, id = rest[:i], rest[i+1:]
			return tenant, id, gated.ValidTenant(tenant) && gated.ValidID(id)
		}
	}
	return "", "", false
}

// watch publishes the statuses on subject, of tenant, until WatchTTL
// after now. It does a bounded amount of work: it drops at most two of the
// tenant's lapsed asks, and its oldest one when the tenant is at its bound.
func (p *Publisher) watch(tenant, subject string, now time.Time) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.watched == nil {
		p.watched, p.asks = map[string]time.Time{}, map[string][]string{}
	}
	q := p.asks[tenant]
	// Every ask lasts WatchTTL, so the first asked lapses first.
	for n := 0; n < 2 && len(q) > 0 && !p.watched[q[0]].After(now); n++ {
		delete(p.watched, q[0])
		q = q[1:]
	}
	if _, ok := p.watched[subject]; !ok {
		if len(q) >= p.perTenant {
			delete(p.watched, q[0])
			q = q[1:]
		}
		q = append(q, subject)
	}
	p.asks[tenant] = q
	p.watched[subject] = now.Add(WatchTTL)
	p.nwatched.Store(int64(len(p.watched)))
}

// wanted says whether somebody listens to the statuses on subject: a
// fleet asked for them, or the server has a subscriber.
func (p *Publisher) wanted(subject string) bool {
	if p.nwatched.Load() > 0 {
		p.wmu.RLock()
		until, ok := p.watched[subject]
		p.wmu.RUnlock()
		if ok && time.Now().Before(until) {
			return true
		}
	}
	return p.interest != nil && p.interest(subject)
}

// Trails wraps a source of audit trails: every trail it starts records on
// one of inner's and publishes the status of each event that marks a
// stage, after the event is recorded (queued) or, for the trail's seal,
// stored. A failed record or seal publishes nothing.
func (p *Publisher) Trails(inner func() engine.AuditTrail) func() engine.AuditTrail {
	return func() engine.AuditTrail { return &trail{inner: inner(), p: p} }
}

// Published is the number of status events sent; Failed the number that
// could not be.
func (p *Publisher) Published() uint64 { return p.published.Load() }

// Failed is the number of status events that could not be sent.
func (p *Publisher) Failed() uint64 { return p.failed.Load() }

// publish sends the status of ev, if it marks a stage and follow is set
// or somebody listens.
func (p *Publisher) publish(ev gated.AuditEvent, seq uint64, follow bool) {
	if _, ok := engine.StatusStageOf(ev.Event); !ok {
		return
	}
	subject := wire.StatusSubject(ev.Tenant, ev.ProposalID)
	if !follow && !p.wanted(subject) {
		return
	}
	data, ok, err := engine.StatusJSON(ev, seq)
	if err != nil {
		// The event's data is not what gated records for it: a defect,
		// not a passing network problem.
		p.failed.Add(1)
		p.log.Warn("status event not derived from its audit event", zap.String("event", ev.Event),
			zap.String("tenant", ev.Tenant), zap.String("proposal_id", ev.ProposalID), zap.Error(err))
		return
	}
	if !ok {
		return
	}
	if err := p.nc.Publish(subject, data); err != nil {
		p.failed.Add(1)
		p.log.Debug("status event not published", zap.String("event", ev.Event),
			zap.String("tenant", ev.Tenant), zap.String("proposal_id", ev.ProposalID), zap.Error(err))
		return
	}
	p.published.Add(1)
}

// trail is an audit trail that publishes the status of its events.
type trail struct {
	inner engine.AuditTrail
	p     *Publisher
	// follow publishes every status of the trail, listened to or not.
	follow bool
}

// Follow has the trail publish every status it records whether or not
// anybody is known to listen: its proposal carried wire.StatusHeader.
// The worker calls it before the delivery is decided.
func (t *trail) Follow() { t.follow = true }

var _ engine.AuditTrail = (*trail)(nil)

// Record implements engine.AuditTrail.
func (t *trail) Record(ctx context.Context, ev gated.AuditEvent) error {
	if err := t.inner.Record(ctx, ev); err != nil {
		return err
	}
	t.p.publish(ev, 0, t.follow)
	return nil
}

// Flush implements engine.AuditTrail.
func (t *trail) Flush(ctx context.Context) error { return t.inner.Flush(ctx) }

// Seal implements engine.AuditTrail.
func (t *trail) Seal(ctx context.Context, ev gated.AuditEvent) (uint64, error) {
	seq, err := t.inner.Seal(ctx, ev)
	if err != nil {
		return seq, err
	}
	t.p.publish(ev, seq, t.follow)
	return seq, nil
}
