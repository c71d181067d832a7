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
// delays or changes a decision.
package status

import (
	"context"
	"sync/atomic"

	"github.com/gated/gated"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// Publisher publishes the status events of the proposals decided on the
// trails it wraps. It is safe for concurrent use.
type Publisher struct {
	nc  *nats.Conn
	log *zap.Logger
	// published and failed count status events sent and not sent (a
	// publish error, or an audit event whose data did not read).
	published, failed atomic.Uint64
}

// NewPublisher publishes on nc. A nil log logs nothing.
func NewPublisher(nc *nats.Conn, log *zap.Logger) *Publisher {
	if log == nil {
		log = zap.NewNop()
	}
	return &Publisher{nc: nc, log: log}
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

// publish sends the status of ev, if it marks a stage.
func (p *Publisher) publish(ev gated.AuditEvent, seq uint64) {
	if _, ok := engine.StatusStageOf(ev.Event); !ok {
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
	if err := p.nc.Publish(wire.StatusSubject(ev.Tenant, ev.ProposalID), data); err != nil {
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
}

var _ engine.AuditTrail = (*trail)(nil)

// Record implements engine.AuditTrail.
func (t *trail) Record(ctx context.Context, ev gated.AuditEvent) error {
	if err := t.inner.Record(ctx, ev); err != nil {
		return err
	}
	t.p.publish(ev, 0)
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
	t.p.publish(ev, seq)
	return seq, nil
}
