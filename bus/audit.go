package bus

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/engine"
)

// Trail is the audit trail of one proposal delivery. Events are published
// asynchronously as they happen; Seal waits for every acknowledgement, so a
// proposal is never acknowledged before its history is stored. It
// implements engine.AuditTrail and is used by one goroutine.
type Trail struct {
	js      jetstream.JetStream
	futures []jetstream.PubAckFuture
	err     error
}

var _ engine.AuditTrail = (*Trail)(nil)

// NewTrail starts an empty trail.
func NewTrail(js jetstream.JetStream) *Trail { return &Trail{js: js} }

func (t *Trail) publish(ev engine.AuditEvent) (jetstream.PubAckFuture, error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("encoding audit event %s: %w", ev.Event, err)
	}
	msg := nats.NewMsg(AuditSubject(ev.Tenant, ev.Event))
	msg.Data = data
	return t.js.PublishMsgAsync(msg)
}

// Record implements engine.AuditTrail.
func (t *Trail) Record(_ context.Context, ev engine.AuditEvent) error {
	if t.err != nil {
		return t.err
	}
	f, err := t.publish(ev)
	if err != nil {
		t.err = fmt.Errorf("publishing audit event %s: %w", ev.Event, err)
		return t.err
	}
	t.futures = append(t.futures, f)
	return nil
}

// Seal implements engine.AuditTrail.
func (t *Trail) Seal(ctx context.Context, ev engine.AuditEvent) (uint64, error) {
	if err := t.Record(ctx, ev); err != nil {
		return 0, err
	}
	var last uint64
	for _, f := range t.futures {
		select {
		case ack := <-f.Ok():
			last = ack.Sequence
		case err := <-f.Err():
			return 0, fmt.Errorf("storing audit event on %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for audit acknowledgements: %w", ctx.Err())
		}
	}
	return last, nil
}
