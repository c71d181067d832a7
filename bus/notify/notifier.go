package notify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// DefaultConsumer is the name of the durable consumer the notifiers of
// every gated sharing a stream share.
const DefaultConsumer = "gated-notify"

// auditTimeout bounds the append of one notifier record.
const auditTimeout = 10 * time.Second

// maxChains bounds the tenants whose last record the verification
// remembers; a forgotten tenant's next link is not checked.
const maxChains = 16384

// Options configures a Notifier besides its sinks. Trails is required.
type Options struct {
	// Trails starts an audit trail; the notifier appends its records
	// (notify.delivered, notify.failed, audit.verification_failed) on it.
	Trails func() engine.AuditTrail
	// Key is the key gated MACs audit records with; with it, a record
	// without a valid MAC under it fails verification. Default none:
	// hashes and links are checked, MACs are not.
	Key []byte
	// Consumer names the durable consumer. Default DefaultConsumer.
	Consumer string
	// Replicas of the consumer. Default 1.
	Replicas int
	// Log receives what no caller can act on. Default: none.
	Log *zap.Logger
	// Observe, when set, is told what the notifier does, for metrics.
	Observe Observer
}

// Observer is told what a Notifier does; each func may be nil and must
// not block.
type Observer struct {
	// Notification: a record made a notification of kind.
	Notification func(kind Kind)
	// Result: a notification was delivered to a sink, or failed there
	// for good.
	Result func(r Result)
	// Retry: an attempt to sink failed and another follows.
	Retry func(sink string)
	// VerificationFailed: a message of the audit stream did not verify.
	VerificationFailed func(p audit.Problem)
}

// Notifier reads the audit stream and sends notifications to webhook
// sinks (see the package documentation). Start it once, Stop it once.
type Notifier struct {
	js    jetstream.JetStream
	opts  Options
	log   *zap.Logger
	sinks []*sinkWorker

	cons   jetstream.ConsumeContext
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// chains is the last record of each tenant that the consume callback
	// read; only that callback, which runs one message at a time, uses it.
	chains map[string]chainLink
}

type chainLink struct {
	n      uint64
	digest string
	seq    uint64
}

// New returns a notifier for cfg's sinks. Nothing runs until Start.
func New(js jetstream.JetStream, cfg *Config, opts Options) (*Notifier, error) {
	if opts.Trails == nil {
		return nil, errors.New("notify: Options.Trails is required: deliveries and failures are audited")
	}
	if cfg == nil || len(cfg.Sinks) == 0 {
		return nil, fmt.Errorf("%w: no sinks", ErrInvalidConfig)
	}
	if opts.Consumer == "" {
		opts.Consumer = DefaultConsumer
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	n := &Notifier{js: js, opts: opts, log: opts.Log, chains: map[string]chainLink{}}
	retried := func(string) {}
	if opts.Observe.Retry != nil {
		retried = opts.Observe.Retry
	}
	for _, s := range cfg.Sinks {
		if len(s.Secret) < MinSecretLen {
			return nil, fmt.Errorf("%w: sink %s has no secret of %d bytes or more (LoadConfig reads it)", ErrInvalidConfig, s.Name, MinSecretLen)
		}
		n.sinks = append(n.sinks, newSinkWorker(s, retried))
	}
	return n, nil
}

// ackWait is how long a record may go unacknowledged before JetStream
// hands it out again: longer than any sink may take over a notification.
func (n *Notifier) ackWait() time.Duration {
	var longest time.Duration
	for _, w := range n.sinks {
		longest = max(longest, w.sink.MaxAge+w.sink.Timeout)
	}
	return longest + time.Minute
}

// Start creates or updates the durable consumer on the audit stream and
// starts reading and delivering. A consumer created here starts with the
// records appended from now on; one that exists resumes where the
// notifiers before stopped. Errors: ErrNoStream, NATS errors.
func (n *Notifier) Start(ctx context.Context) error {
	stream, err := n.js.Stream(ctx, audit.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return ErrNoStream
	}
	if err != nil {
		return fmt.Errorf("opening stream %s: %w", audit.Stream, err)
	}
	pending := 64
	for _, w := range n.sinks {
		pending += w.sink.Queue + 1
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       n.opts.Consumer,
		Description:   "gated's webhook notifications: every gated with --notify shares it.",
		FilterSubject: wire.AuditSubjectPrefix + ">",
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       n.ackWait(),
		// Bounded by the sinks' queues: a full queue fails a notification
		// at once, so a dead sink never stalls the consumer.
		MaxAckPending: pending,
		Replicas:      n.opts.Replicas,
	})
	if err != nil {
		return fmt.Errorf("creating the notify consumer %s on %s: %w", n.opts.Consumer, audit.Stream, err)
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	for _, w := range n.sinks {
		n.wg.Go(func() { n.run(w) })
	}
	cc, err := cons.Consume(n.handle, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		n.log.Warn("reading the audit stream for notifications", zap.Error(err))
	}))
	if err != nil {
		n.cancel()
		n.wg.Wait()
		return fmt.Errorf("reading the notify consumer: %w", err)
	}
	n.cons = cc
	return nil
}

// Stop stops reading, cuts short the deliveries under way and hands the
// records whose notifications were not settled back to JetStream, which
// gives them to another notifier, or to this one's successor. It returns
// once every goroutine of the notifier has.
func (n *Notifier) Stop() {
	if n.cons != nil {
		n.cons.Stop()
		<-n.cons.Closed()
	}
	if n.cancel != nil {
		n.cancel()
	}
	n.wg.Wait()
}

// source is one message of the audit stream whose notification went to
// one or more sinks: it is acknowledged once every one has settled it.
type source struct {
	msg     jetstream.Msg
	pending atomic.Int32
	nakOnce sync.Once
}

// settle acknowledges the message once its last sink settled it.
func (s *source) settle() {
	if s.pending.Add(-1) == 0 {
		_ = s.msg.Ack()
	}
}

// release hands the message back for another try (at most once).
func (s *source) release() {
	s.nakOnce.Do(func() { _ = s.msg.Nak() })
}

// handle is the consume callback: verify, classify, queue, acknowledge.
func (n *Notifier) handle(m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		_ = m.Nak()
		return
	}
	e := audit.Entry{Seq: md.Sequence.Stream, Stored: md.Timestamp, Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
	e.Record, e.Err = audit.DecodeRecord(e.Subject, e.Header, e.Data)
	if e.Record != nil {
		e.Record.Seq, e.Record.Stored = e.Seq, e.Stored
	}
	if md.NumDelivered == 1 {
		// A redelivery was checked the first time.
		if p := n.check(e); p != nil {
			n.verificationFailed(e, *p)
		}
	}
	if e.Record == nil {
		_ = m.Ack()
		return
	}
	note, ok := Classify(e.Record)
	if !ok {
		_ = m.Ack()
		return
	}
	if f := n.opts.Observe.Notification; f != nil {
		f(note.Kind)
	}
	var targets []*sinkWorker
	for _, w := range n.sinks {
		if w.sink.Takes(note.Kind, note.Tenant) {
			targets = append(targets, w)
		}
	}
	if len(targets) == 0 {
		_ = m.Ack()
		return
	}
	src := &source{msg: m}
	src.pending.Store(int32(len(targets)))
	read := time.Now()
	for _, w := range targets {
		body, err := note.Body(w.sink.Format)
		if err != nil {
			n.finish(w, src, Result{Sink: w.sink.Name, Endpoint: w.sink.Endpoint(), Kind: note.Kind, Notification: note.ID,
				SourceSeq: note.AuditSeq, Error: "encoding the body: " + err.Error(), tenant: note.Tenant, proposalID: note.ProposalID})
			continue
		}
		d := &delivery{n: &note, body: body, read: read, src: src}
		select {
		case w.queue <- d:
		default:
			n.finish(w, src, Result{Sink: w.sink.Name, Endpoint: w.sink.Endpoint(), Kind: note.Kind, Notification: note.ID,
				SourceSeq: note.AuditSeq, Error: fmt.Sprintf("the sink's queue is full (%d notifications wait); not sent", w.sink.Queue),
				tenant: note.Tenant, proposalID: note.ProposalID})
		}
	}
}

// run delivers one sink's queue until the notifier stops; what is still
// queued then is handed back.
func (n *Notifier) run(w *sinkWorker) {
	for {
		select {
		case <-n.ctx.Done():
			for {
				select {
				case d := <-w.queue:
					d.src.release()
				default:
					return
				}
			}
		case d := <-w.queue:
			res, err := w.deliver(n.ctx, d)
			if errors.Is(err, errStopped) {
				d.src.release()
				continue
			}
			n.finish(w, d.src, res)
		}
	}
}

// finish audits a settled notification, tells the observer, and settles
// its share of the source message. A result that could not be audited
// leaves the message unsettled, so the notification is tried again later
// rather than left out of the trail.
func (n *Notifier) finish(w *sinkWorker, src *source, res Result) {
	event := gated.EventNotifyDelivered
	if !res.Delivered {
		event = gated.EventNotifyFailed
		n.log.Warn("a notification was not delivered", zap.String("sink", res.Sink), zap.String("endpoint", res.Endpoint),
			zap.String("kind", string(res.Kind)), zap.String("notification", res.Notification), zap.Int("attempts", res.Attempts),
			zap.String("error", res.Error))
	}
	if f := n.opts.Observe.Result; f != nil {
		f(res)
	}
	data, _ := json.Marshal(res)
	if err := n.audit(res.tenant, res.proposalID, event, data); err != nil {
		n.log.Error("auditing a notification result; the notification will be tried again", zap.String("sink", w.sink.Name), zap.Error(err))
		src.release()
		return
	}
	src.settle()
}

// audit appends one of the notifier's own records.
func (n *Notifier) audit(tenant, proposalID, event string, data []byte) error {
	if tenant == "" {
		tenant = gated.UnknownTenant
	}
	ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
	defer cancel()
	_, err := n.opts.Trails().Seal(ctx, gated.AuditEvent{
		V: gated.SchemaVersion, Event: event, Tenant: tenant, ProposalID: proposalID, At: time.Now().UTC(), Data: data,
	})
	return err
}

// check verifies one message on its own (audit.CheckEntry) and against
// the last record of its tenant that this notifier read, when that is
// the record just before it in the chain.
func (n *Notifier) check(e audit.Entry) *audit.Problem {
	tenant := e.Tenant()
	p := audit.CheckEntry(e, n.opts.Key)
	if e.Record == nil {
		delete(n.chains, tenant) // the chain restarts after it
		return p
	}
	sum := sha256.Sum256(e.Data)
	digest := hex.EncodeToString(sum[:])
	r := e.Record
	last, known := n.chains[tenant]
	if p == nil && known && r.Chain.N == last.n+1 && r.Chain.Prev != last.digest {
		p = &audit.Problem{Seq: e.Seq, Tenant: tenant, Kind: audit.ProblemModified,
			Detail: fmt.Sprintf("record %d of tenant %s does not link to record %d (seq %d)", r.Chain.N, tenant, last.n, last.seq)}
	}
	if _, ok := n.chains[tenant]; !ok && len(n.chains) >= maxChains {
		for t := range n.chains {
			delete(n.chains, t)
			break
		}
	}
	n.chains[tenant] = chainLink{n: r.Chain.N, digest: digest, seq: e.Seq}
	return p
}

// verificationFailed appends the audit.verification_failed record of a
// message that did not verify; that record makes the notification.
func (n *Notifier) verificationFailed(e audit.Entry, p audit.Problem) {
	n.log.Error("an audit stream message did not verify", zap.Uint64("seq", e.Seq), zap.String("tenant", p.Tenant),
		zap.String("kind", string(p.Kind)), zap.String("problem", p.Detail))
	if f := n.opts.Observe.VerificationFailed; f != nil {
		f(p)
	}
	tenant := p.Tenant
	if !gated.ValidTenant(tenant) {
		tenant = gated.UnknownTenant
	}
	subject := e.Subject
	if len(subject) > 256 {
		subject = subject[:256]
	}
	data, _ := json.Marshal(gated.AuditVerificationFailedData{Kind: string(p.Kind), Problem: p.Detail, Seq: e.Seq, Subject: subject})
	if err := n.audit(tenant, "", gated.EventAuditVerificationFailed, data); err != nil {
		n.log.Error("auditing a verification failure", zap.Error(err))
	}
}
