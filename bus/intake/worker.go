// Package intake takes proposals off the bus and answers them: the worker
// on the durable consumer, with its tenants' turns and in-progress acks,
// the review service, the hold timers of actions held for an operator, and
// the follow-ups of run verdicts. The streams and the consumers it reads
// are package bus's; grants are package grants'.
package intake

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/gated/gated/internal/telemetry"
	"github.com/gated/gated/internal/tracectx"
)

// Decider is the part of the engine the worker needs.
type Decider interface {
	Decide(ctx context.Context, d engine.Delivery) (*gated.Verdict, error)
	GiveUp(ctx context.Context, d engine.Delivery, cause error) *gated.Verdict
}

// Worker consumes proposals from the durable consumer, decides each, and
// publishes the verdict. A proposal is acknowledged only after its verdict
// is stored, its audit trail is stored, the follow-up of a run verdict
// (continuation or escalation) is stored in the run stream, and the
// verdict is published.
//
// The consumer redelivers without limit (MaxDeliver -1); the worker keeps
// gated's own delivery budget, cfg.MaxDeliver. A delivery past it is not
// decided: it is answered with the verdict stored earlier or an error
// verdict (Decider.GiveUp), so no proposal stays unanswered in the stream
// however often gated crashed or stalled on it.
type Worker struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	res     *bus.Resources
	decider Decider
	trails  bus.Trails
	cfg     bus.Config
	log     *zap.Logger

	// ctx is cancelled when the shutdown grace period is over; deciding
	// stops and unfinished proposals go back to the stream.
	ctx      context.Context
	cancel   context.CancelFunc
	stopping chan struct{} // closed when Stop begins
	stopOnce sync.Once
	wg       sync.WaitGroup
	cc       jetstream.ConsumeContext

	// tmu guards the turns, the runnable list and the handlers' counts.
	tmu sync.Mutex
	// tenants are the turns of each tenant with proposals in this gated:
	// while there are several, each decides at most TenantMaxInFlight
	// proposals at once, and its further ones wait in its own queue, not
	// in front of the other tenants'; a tenant alone may use every
	// handler (turnsLocked). A proposal whose reviews wait on a reviewer
	// gives its turn up meanwhile (engine.Turn).
	tenants map[string]*tenantTurns
	// runnable are the tenants with a turn free and a proposal waiting
	// for it, in the order handlers take them.
	runnable []string
	// Handlers are started as needed, up to cfg.MaxInFlight, and live
	// until Stop: a long-lived goroutine keeps the stack that deciding
	// grew (decoding, encoding, and policy evaluation unless it runs on a
	// policies.Pool), where one per message would grow it again every
	// time. handlers counts them, idle those waiting for work; wake wakes
	// an idle one, picked tells dispatch that one took work, and quit,
	// closed by Stop, ends them.
	handlers, idle int
	wake, picked   chan struct{}
	quit           chan struct{}

	// alive holds the messages being worked on, kept alive by one
	// goroutine (keepAlive) with in-progress acks.
	alive *inProgress

	// ackWait is the consumer's AckWait as JetStream has it, which the
	// last gated to start set; in-progress acks go every third of it.
	ackWait time.Duration

	// publish sends a verdict; tests replace it to make publishing fail.
	publish func(subject string, data []byte) error
	// followUp stores the follow-up of a run verdict (FollowUps.Send);
	// tests replace it to watch or fail it.
	followUp func(ctx context.Context, v *gated.Verdict) error
}

// NewWorker builds a worker. Start begins consuming.
func NewWorker(nc *nats.Conn, js jetstream.JetStream, res *bus.Resources, d Decider, trails bus.Trails, cfg bus.Config, log *zap.Logger) (*Worker, error) {
	if trails == nil {
		return nil, fmt.Errorf("%w: the worker needs audit trails", bus.ErrInvalidConfig)
	}
	if res == nil || res.Consumer == nil || res.Verdicts == nil {
		return nil, fmt.Errorf("%w: the worker needs the consumer and the verdict bucket that Setup returns", bus.ErrInvalidConfig)
	}
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	// Every gated shares the consumer, and the last to start set its
	// AckWait: keep that one alive, whatever this process was told.
	ackWait := cfg.AckWait
	if ci := res.Consumer.CachedInfo(); ci != nil && ci.Config.AckWait > 0 {
		ackWait = ci.Config.AckWait
	}
	if ackWait != cfg.AckWait {
		log.Warn("the proposal consumer's ack wait differs from this gated's; in-progress acks follow the consumer's",
			zap.Duration("consumer_ack_wait", ackWait), zap.Duration("ack_wait", cfg.AckWait))
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Worker{
		nc: nc, js: js, res: res, decider: d, trails: trails, cfg: cfg, log: log,
		ctx: ctx, cancel: cancel, stopping: make(chan struct{}),
		alive: newInProgress(), ackWait: ackWait, publish: nc.Publish, tenants: map[string]*tenantTurns{},
		wake: make(chan struct{}, 1), picked: make(chan struct{}, 1), quit: make(chan struct{}),
		followUp: NewFollowUps(js, store.New(res.Verdicts)).Send,
	}, nil
}

// Start begins consuming proposals. Call it once.
func (w *Worker) Start() error {
	cc, err := w.res.Consumer.Consume(w.dispatch,
		jetstream.PullMaxMessages(min(w.cfg.MaxInFlight, 512)),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			w.log.Warn("consuming proposals", zap.Error(err))
		}))
	if err != nil {
		return fmt.Errorf("consuming %s: %w", bus.ProposalsStream, err)
	}
	w.cc = cc
	w.wg.Go(w.keepAlive)
	return nil
}

// dispatch runs on the consumer's goroutine. It queues each message
// behind its tenant's, wakes or starts a handler for it, and blocks
// while every one of MaxInFlight handlers is busy and proposals wait for
// one, so that a gated with no handler free stops taking messages that
// another gated could decide. The message is kept alive (in-progress
// acks) from the moment it arrives, so one waiting for a turn or a
// handler is not redelivered meanwhile and then decided twice.
func (w *Worker) dispatch(msg jetstream.Msg) {
	select {
	case <-w.stopping:
		_ = msg.Nak() // back to the stream at once, for another gated
		return
	default:
	}
	w.alive.add(msg)
	tenant := proposalTenant(msg.Subject())
	w.tmu.Lock()
	t := w.tenantLocked(tenant)
	t.waiting = append(t.waiting, msg)
	w.scheduleLocked(tenant, t)
	for len(w.runnable) > 0 && w.idle == 0 && w.handlers >= w.cfg.MaxInFlight {
		w.tmu.Unlock()
		select {
		case <-w.picked:
		case <-w.stopping:
			return // Stop returns what waits to the stream
		}
		w.tmu.Lock()
	}
	w.tmu.Unlock()
}

// handleAll decides the proposals nextWork hands it, one at a time,
// until Stop ends the handlers.
func (w *Worker) handleAll() {
	for {
		msg, t := w.nextWork()
		if msg == nil {
			return
		}
		w.handle(msg, t)
		w.alive.remove(msg)
		w.endTurn(t)
	}
}

func (w *Worker) isStopping() bool {
	select {
	case <-w.stopping:
		return true
	default:
		return false
	}
}

// returnWaiting returns to the stream every proposal waiting for its
// first turn: none begins once Stop has.
func (w *Worker) returnWaiting() {
	w.tmu.Lock()
	defer w.tmu.Unlock()
	for name, t := range w.tenants {
		for _, m := range t.waiting {
			w.alive.remove(m)
			_ = m.Nak()
		}
		t.waiting = nil
		t.listed = false
		w.scheduleLocked(name, t)
	}
	clear(w.runnable)
	w.runnable = nil
}

// Stop stops taking proposals, waits up to grace for those in flight,
// then cancels the rest; they are negatively acknowledged so that another
// gated (or this one, after a restart) decides them. Stop may be called
// more than once: a later call waits for the first to finish and does
// nothing more.
func (w *Worker) Stop(grace time.Duration) {
	w.stopOnce.Do(func() { w.stop(grace) })
}

func (w *Worker) stop(grace time.Duration) {
	// The drain of the consumer and the handlers share the one grace.
	deadline := time.Now().Add(grace)
	close(w.stopping)
	if w.cc != nil {
		// Drain hands buffered messages to dispatch, which returns them to
		// the stream; once Closed fires no dispatch runs, so the WaitGroup
		// below cannot grow while it is waited on.
		w.cc.Drain()
		select {
		case <-w.cc.Closed():
		case <-time.After(max(grace, time.Second)):
			w.cc.Stop()
			<-w.cc.Closed()
		}
	}
	// No dispatch runs any more: what waits for a turn goes back to the
	// stream, and the handlers and keepAlive may end.
	w.returnWaiting()
	close(w.quit)
	w.alive.close()
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(max(0, time.Until(deadline))):
		w.log.Warn("shutdown grace period over; returning unfinished proposals to the stream", zap.Duration("grace", grace))
		w.cancel()
		<-done
	}
	w.cancel()
	// Nothing waits for a turn any more (returnWaiting); none is left
	// behind unanswered whatever happened.
	w.returnWaiting()
}

// follower is a trail that publishes its proposal's statuses when told
// to follow them (bus/status's): the proposal carried wire.StatusHeader,
// its proposer listens.
type follower interface{ Follow() }

// handle decides one delivery, in turn t; dispatch keeps it alive
// meanwhile.
func (w *Worker) handle(msg jetstream.Msg, t *turn) {
	attempt, seq := 1, uint64(0)
	if md, err := msg.Metadata(); err == nil {
		attempt, seq = int(md.NumDelivered), md.Sequence.Stream
	}
	if attempt > w.cfg.MaxDeliver {
		w.giveUp(msg, seq, attempt)
		return
	}

	// With tracing on, the proposal's span is a child of the fleet's
	// (the message's traceparent) and the parent of every stage's span.
	ctx, span := w.ctx, telemetry.Span{}
	if telemetry.Enabled() {
		ctx, span = telemetry.Start(tracectx.Extract(ctx, msg.Headers()), telemetry.SpanProposal, telemetry.KindConsumer)
		span.Int(telemetry.AttrDelivery, int64(attempt))
	}
	var v *gated.Verdict
	var err error
	defer func() { endProposalSpan(span, v, err) }()

	d := engine.Delivery{
		Subject:   msg.Subject(),
		Data:      msg.Data(),
		MsgID:     msg.Headers().Get(jetstream.MsgIDHeader),
		Attempt:   attempt,
		StreamSeq: seq,
		Trail:     w.trails(),
		Retrail:   w.trails,
		Turn:      t,
	}
	if msg.Headers().Get(wire.StatusHeader) != "" {
		if f, ok := d.Trail.(follower); ok {
			f.Follow()
		}
	}
	v, err = w.decider.Decide(ctx, d)
	if err != nil {
		w.retry(msg, d, attempt, err)
		return
	}
	if v.ProposalID != "" {
		_, pub := telemetry.Start(ctx, telemetry.SpanPublish, telemetry.KindProducer)
		err := w.answer(v)
		pub.End(err)
		if err != nil {
			// The verdict is stored: a redelivery replays it, within the
			// budget or past it (giveUp), and sends its follow-up if this
			// attempt did not.
			w.log.Warn("answering proposal; will redeliver", zap.String("key", v.Tenant+"."+v.ProposalID), zap.Error(err))
			_ = msg.NakWithDelay(time.Second)
			return
		}
	}
	// The verdict was published before the ack; on one connection (the
	// consumer's, as serve sets it up) the server sees them in that order,
	// so a crash cannot leave an acknowledged proposal without its verdict.
	if err := msg.Ack(); err != nil {
		w.log.Warn("acknowledging proposal", zap.String("subject", d.Subject), zap.Error(err))
	}
	w.log.Debug("verdict", zap.String("tenant", v.Tenant), zap.String("id", v.ProposalID),
		zap.String("outcome", string(v.Outcome)), zap.String("stage", string(v.Stage)))
}

// endProposalSpan ends the proposal's span with the verdict's address and
// outcome, or the error that sends the proposal back to the stream.
func endProposalSpan(span telemetry.Span, v *gated.Verdict, err error) {
	if !span.Recording() {
		return
	}
	if v != nil {
		span.String(telemetry.AttrTenant, v.Tenant)
		span.String(telemetry.AttrProposalID, v.ProposalID)
		span.String(telemetry.AttrAction, v.Action)
		span.String(telemetry.AttrOutcome, string(v.Outcome))
		span.String(telemetry.AttrStage, string(v.Stage))
	}
	span.End(err)
}

// retry returns a proposal whose decision could not be stored. On the last
// delivery it publishes an error verdict instead, so the fleet is not left
// waiting for an answer that will never come.
func (w *Worker) retry(msg jetstream.Msg, d engine.Delivery, attempt int, cause error) {
	if w.ctx.Err() != nil {
		w.log.Info("returning proposal to the stream at shutdown", zap.String("subject", d.Subject))
		_ = msg.Nak()
		return
	}
	if attempt < w.cfg.MaxDeliver && errors.Is(cause, gated.ErrIDTaken) {
		// Nothing failed: another proposal took the id first, and the
		// next delivery is answered invalid from the stored verdict.
		w.log.Info("proposal id taken by a different proposal; redelivering to answer it invalid",
			zap.String("subject", d.Subject), zap.Int("attempt", attempt), zap.Error(cause))
		_ = msg.Nak()
		return
	}
	if attempt < w.cfg.MaxDeliver {
		delay := time.Duration(attempt) * time.Second
		w.log.Warn("deciding proposal failed; will redeliver", zap.String("subject", d.Subject),
			zap.Int("attempt", attempt), zap.Duration("delay", delay), zap.Error(cause))
		_ = msg.NakWithDelay(delay)
		return
	}
	w.log.Error("deciding proposal failed on its last delivery", zap.String("subject", d.Subject),
		zap.Int("attempt", attempt), zap.Error(cause))
	d.Trail = w.trails() // the failed attempt's trail may be broken
	if v := w.decider.GiveUp(w.ctx, d, cause); v.ProposalID != "" {
		if err := w.answer(v); err != nil {
			// Nak, not Term: the next delivery, past the budget, is
			// answered by giveUp with the verdict stored now.
			w.log.Error("publishing error verdict; will redeliver", zap.Error(err))
			_ = msg.NakWithDelay(time.Second)
			return
		}
	}
	_ = msg.Term()
}

// giveUp answers a delivery past gated's delivery budget without deciding
// it: every earlier delivery crashed, stalled or was returned. The
// proposal gets the verdict stored earlier, if any, or an error verdict;
// it is published before the message is terminated, and a failed publish
// has the message delivered again (and answered again, from the store).
func (w *Worker) giveUp(msg jetstream.Msg, seq uint64, attempt int) {
	if w.ctx.Err() != nil {
		_ = msg.Nak()
		return
	}
	d := engine.Delivery{
		Subject: msg.Subject(), Data: msg.Data(), MsgID: msg.Headers().Get(jetstream.MsgIDHeader),
		// The deliveries that went unanswered; this one is not tried.
		Attempt: attempt - 1, StreamSeq: seq, Trail: w.trails(),
	}
	w.log.Warn("proposal past its delivery budget; answering it without deciding",
		zap.String("subject", d.Subject), zap.Uint64("stream_seq", seq), zap.Int("delivery", attempt),
		zap.Int("max_deliver", w.cfg.MaxDeliver))
	v := w.decider.GiveUp(w.ctx, d, errors.New("no delivery was acknowledged (gated crashed or stalled on each)"))
	if w.ctx.Err() != nil {
		// Cut short by shutdown: what GiveUp returned may not be stored.
		_ = msg.Nak()
		return
	}
	if v.ProposalID != "" {
		if err := w.answer(v); err != nil {
			w.log.Error("publishing the verdict of a proposal past its delivery budget; will redeliver",
				zap.String("key", v.Tenant+"."+v.ProposalID), zap.Error(err))
			_ = msg.NakWithDelay(time.Second)
			return
		}
	}
	if err := msg.Term(); err != nil {
		w.log.Warn("terminating answered proposal", zap.String("subject", d.Subject), zap.Error(err))
	}
}

// answer sends what a stored verdict owes: the follow-up of a run
// verdict, stored in the run stream first, the deadline of an action held
// for an operator, stored in the holds stream, then the verdict itself.
// An approved verdict's grant needs nothing more: it is recorded when it
// is used. The
// follow-up goes first so that a fleet that sees the verdict finds the
// continuation or escalation already there, and so that a failure to
// store it leaves the proposal unacknowledged, to be replayed.
func (w *Worker) answer(v *gated.Verdict) error {
	if err := w.followUp(w.ctx, v); err != nil {
		return fmt.Errorf("sending the run's follow-up: %w", err)
	}
	if err := scheduleHold(w.ctx, w.js, v); err != nil {
		return err
	}
	if err := w.publishVerdict(v); err != nil {
		return fmt.Errorf("publishing the verdict: %w", err)
	}
	return nil
}

func (w *Worker) publishVerdict(v *gated.Verdict) error {
	data, err := v.JSON()
	if err != nil {
		return err
	}
	return w.publish(wire.VerdictSubject(v.Tenant, v.ProposalID), data)
}
