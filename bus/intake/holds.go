package intake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// maxHoldDelay bounds one wait of the hold timer: a hold is looked at
// at least this often, so a deadline never hides behind a long delay
// (and a clock that jumps is caught up with).
const maxHoldDelay = time.Hour

// holdMessage is the body of a hold's message: its deadline, for the
// first wait. The stored verdict's deadline is the one that counts.
type holdMessage struct {
	Tenant     string    `json:"tenant"`
	ProposalID string    `json:"proposal_id"`
	Deadline   time.Time `json:"deadline"`
}

// scheduleHold stores the deadline of v, a verdict held for an operator,
// in the holds stream. It is stored before the proposal is acknowledged,
// so a held verdict never lacks its deadline; a replay stores it again,
// and the stream drops the copy within its duplicate window (a later copy
// is harmless: a settled hold is acknowledged and dropped).
func scheduleHold(ctx context.Context, js jetstream.JetStream, v *gated.Verdict) error {
	if v.AwaitingOperator == nil || v.Outcome != gated.OutcomeBlocked {
		return nil
	}
	body, err := json.Marshal(holdMessage{Tenant: v.Tenant, ProposalID: v.ProposalID, Deadline: v.AwaitingOperator.Deadline})
	if err != nil {
		return err
	}
	_, err = js.Publish(ctx, bus.HoldSubject(v.Tenant, v.ProposalID), body, jetstream.WithMsgID(v.Tenant+"."+v.ProposalID))
	if err != nil {
		return fmt.Errorf("storing the deadline of held action %s.%s: %w", v.Tenant, v.ProposalID, err)
	}
	return nil
}

// Expirer times out held actions past their deadline: *engine.Engine is
// one.
type Expirer interface {
	Expire(ctx context.Context, tenant, id string, trail engine.AuditTrail) (*gated.Verdict, error)
}

// HoldTimer times out actions held for an operator when their deadline
// passes. Every gated runs one on the shared consumer of HoldsStream: a
// hold's message goes to one of them at a time, waits (NakWithDelay)
// until the stored verdict's deadline, and is acknowledged once the hold
// is settled, by the timeout it publishes or by an operator's decision.
// A crash or restart leaves the message unacknowledged, and JetStream
// hands it to a gated again. Of a decision and the deadline, the engine
// lets exactly one settle the verdict (engine.Engine.Expire).
type HoldTimer struct {
	nc       *nats.Conn
	consumer jetstream.Consumer
	verdicts *store.Verdicts
	expirer  Expirer
	trails   bus.Trails
	log      *zap.Logger

	ctx    context.Context
	cancel context.CancelFunc
	// mu orders a handler's wg.Add before Stop's wg.Wait: once stopping
	// is set, no handler begins.
	mu       sync.Mutex
	stopping bool
	wg       sync.WaitGroup
	cc       jetstream.ConsumeContext
	// publish sends a verdict; tests replace it.
	publish func(subject string, data []byte) error
}

// NewHoldTimer builds the hold timer over Setup's resources. Start
// begins consuming.
func NewHoldTimer(nc *nats.Conn, res *bus.Resources, e Expirer, trails bus.Trails, log *zap.Logger) (*HoldTimer, error) {
	switch {
	case res == nil || res.HoldsConsumer == nil || res.Verdicts == nil:
		return nil, fmt.Errorf("%w: the hold timer needs the holds consumer and the verdict bucket that Setup returns", bus.ErrInvalidConfig)
	case e == nil || trails == nil:
		return nil, fmt.Errorf("%w: the hold timer needs the engine and audit trails", bus.ErrInvalidConfig)
	}
	if log == nil {
		log = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &HoldTimer{nc: nc, consumer: res.HoldsConsumer, verdicts: store.New(res.Verdicts), expirer: e, trails: trails, log: log,
		ctx: ctx, cancel: cancel, publish: nc.Publish}, nil
}

// Start begins timing holds out. Call it once.
func (h *HoldTimer) Start() error {
	cc, err := h.consumer.Consume(func(msg jetstream.Msg) {
		h.mu.Lock()
		if h.stopping {
			h.mu.Unlock()
			_ = msg.Nak() // for the next gated
			return
		}
		h.wg.Add(1)
		h.mu.Unlock()
		defer h.wg.Done()
		h.handle(msg)
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		h.log.Warn("consuming hold deadlines", zap.Error(err))
	}))
	if err != nil {
		return fmt.Errorf("consuming %s: %w", bus.HoldsStream, err)
	}
	h.cc = cc
	return nil
}

// Stop stops consuming and waits for the hold being handled, if any. A
// hold not settled stays in the stream for the next gated.
func (h *HoldTimer) Stop() {
	h.mu.Lock()
	h.stopping = true
	h.mu.Unlock()
	if h.cc != nil {
		h.cc.Stop()
	}
	h.cancel()
	h.wg.Wait()
}

// handle looks at one hold: it times the action out when its deadline has
// passed, waits again when it has not, and drops a hold that is settled.
func (h *HoldTimer) handle(msg jetstream.Msg) {
	tenant, id, ok := holdTokens(msg.Subject())
	if !ok {
		h.log.Warn("dropping a hold message on a malformed subject", zap.String("subject", msg.Subject()))
		_ = msg.Term()
		return
	}
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	v, err := h.expirer.Expire(ctx, tenant, id, h.trails())
	key := tenant + "." + id
	switch {
	case err == nil:
		data, jerr := v.JSON()
		if jerr == nil {
			jerr = h.publish(wire.VerdictSubject(v.Tenant, v.ProposalID), data)
		}
		if jerr != nil {
			// The timeout is stored: a fleet finds it in the bucket.
			h.log.Warn("publishing the timeout of a held action", zap.String("key", key), zap.Error(jerr))
		}
		h.log.Info("held action timed out", zap.String("key", key), zap.Uint64("audit_seq", v.AuditSeq))
		_ = msg.Ack()
	case errors.Is(err, gated.ErrNotDue):
		_ = msg.NakWithDelay(h.wait(ctx, tenant, id))
	case errors.Is(err, gated.ErrNotAwaiting), errors.Is(err, gated.ErrNotFound):
		_ = msg.Ack() // settled, or gone with the bucket's TTL
	case errors.Is(err, gated.ErrClaimed):
		_ = msg.NakWithDelay(time.Second) // a decision is being applied
	case h.ctx.Err() != nil:
		_ = msg.Nak()
	default:
		h.log.Warn("timing out a held action; will look again", zap.String("key", key), zap.Error(err))
		_ = msg.NakWithDelay(5 * time.Second)
	}
}

// wait is how long to wait before looking at the hold of tenant and id
// again: until the stored verdict's deadline, within bounds.
func (h *HoldTimer) wait(ctx context.Context, tenant, id string) time.Duration {
	v, err := h.verdicts.Get(ctx, tenant, id)
	if err != nil || v.AwaitingOperator == nil {
		return time.Second
	}
	// A little past the deadline, so that the engine's clock has passed it.
	return min(max(time.Until(v.AwaitingOperator.Deadline)+10*time.Millisecond, 10*time.Millisecond), maxHoldDelay)
}

// holdTokens reads gated.holds.<tenant>.<id>.
func holdTokens(subject string) (tenant, id string, ok bool) {
	rest, found := strings.CutPrefix(subject, bus.HoldSubjectPrefix)
	if !found {
		return "", "", false
	}
	tenant, id, found = strings.Cut(rest, ".")
	return tenant, id, found && gated.ValidTenant(tenant) && gated.ValidID(id)
}
