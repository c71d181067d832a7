package intake_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/personas"
)

// The intake tests check the reliability semantics of DESIGN.md: a
// proposal is acknowledged only after its verdict is stored, audited and
// published; no proposal is reviewed twice; none is left unanswered.

// countingReviewer approves every review once hold lets it go, and counts
// the reviews it was asked for. It routes every persona to itself.
type countingReviewer struct {
	calls   atomic.Int32
	started chan string
	// hold, when set, runs before the answer; an error fails the review.
	hold func(ctx context.Context) error
}

func (r *countingReviewer) Route(*engine.Persona) (engine.Reviewer, error) { return r, nil }

func (r *countingReviewer) Review(ctx context.Context, req engine.ReviewRequest) (engine.ReviewResult, error) {
	r.calls.Add(1)
	select {
	case r.started <- req.Proposal.ID:
	default:
	}
	if r.hold != nil {
		if err := r.hold(ctx); err != nil {
			return engine.ReviewResult{}, err
		}
	}
	gates := make([]gated.GateResult, 0, len(req.Persona.RequiredGates))
	for _, g := range req.Persona.RequiredGates {
		gates = append(gates, gated.GateResult{Name: g, Passed: true})
	}
	return engine.ReviewResult{
		Plugin: "counting", Text: "Decision: approve\nEvery required gate passes.",
		Decision: gated.DecisionApprove, Gates: gates,
	}, nil
}

// holdUntil keeps a review going until release is closed.
func holdUntil(release <-chan struct{}) func(context.Context) error {
	return func(ctx context.Context) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// rig is one NATS server with gated's streams, and the gated workers
// started on it. Each worker has its own connection, engine and auditor,
// as a gated process of its own would; all share one counting reviewer.
type rig struct {
	srv      *server.Server
	cfg      bus.Config
	nc       *nats.Conn
	js       jetstream.JetStream
	res      *bus.Resources
	client   *fleet.Client
	reviewer *countingReviewer
}

func newIntake(t *testing.T, cfg bus.Config) *rig {
	t.Helper()
	in := &rig{srv: bustest.Server(t), cfg: cfg, reviewer: &countingReviewer{started: make(chan string, 16)}}
	in.nc, in.js = bustest.Connect(t, in.srv)
	var err error
	if in.res, err = bus.Setup(t.Context(), in.js, cfg); err != nil {
		t.Fatal(err)
	}
	if in.client, err = fleet.NewClient(in.nc); err != nil {
		t.Fatal(err)
	}
	return in
}

// trails returns the audit trails of one gated process on js.
func trails(t *testing.T, js jetstream.JetStream) bus.Trails {
	t.Helper()
	a, err := audit.NewWriter(t.Context(), js, audit.Config{Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a.Trail
}

// engine builds an engine on the default policy and built-in personas
// whose reviews go to the intake's counting reviewer.
func (in *rig) engine(t *testing.T, store engine.VerdictStore) *engine.Engine {
	t.Helper()
	pol := bustest.Policy(t)
	reg, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Config{Policy: pol, Personas: reg, Router: in.reviewer, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

type workerOptions struct {
	// nc is the worker's connection; default a new one.
	nc *nats.Conn
	// wrap wraps the engine as the worker's decider.
	wrap func(intake.Decider) intake.Decider
	// store wraps the engine's verdict store.
	store func(engine.VerdictStore) engine.VerdictStore
	// publish replaces how the worker publishes verdicts.
	publish func(subject string, data []byte) error
	// followUp wraps how the worker stores run follow-ups.
	followUp func(send intake.FollowUpSender) intake.FollowUpSender
}

// startWorker starts one gated worker on the intake's server.
func (in *rig) startWorker(t *testing.T, o workerOptions) {
	t.Helper()
	nc := o.nc
	if nc == nil {
		nc, _ = bustest.Connect(t, in.srv)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	res, err := bus.Setup(t.Context(), js, in.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var store engine.VerdictStore = store.New(res.Verdicts)
	if o.store != nil {
		store = o.store(store)
	}
	var d intake.Decider = in.engine(t, store)
	if o.wrap != nil {
		d = o.wrap(d)
	}
	w, err := intake.NewWorker(nc, js, res, d, trails(t, js), in.cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if o.publish != nil {
		intake.SetPublish(w, o.publish)
	}
	if o.followUp != nil {
		intake.WrapFollowUp(w, o.followUp)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(5 * time.Second) })
}

// verdicts subscribes to the verdicts of proposal id of tenant acme.
func (in *rig) verdicts(t *testing.T, id string) <-chan *gated.Verdict {
	t.Helper()
	ch := make(chan *gated.Verdict, 16)
	sub, err := in.nc.Subscribe(wire.VerdictSubject("acme", id), func(m *nats.Msg) {
		var v gated.Verdict
		if err := json.Unmarshal(m.Data, &v); err != nil {
			t.Errorf("verdict on %s is not JSON: %v", m.Subject, err)
			return
		}
		ch <- &v
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := in.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

// publish puts data on the proposal stream as a fleet would, with
// Nats-Msg-Id msgID unless it is empty.
func (in *rig) publish(t *testing.T, data []byte, msgID string) *jetstream.PubAck {
	t.Helper()
	a, err := fleet.AddressOf(data)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(wire.ProposalSubject(a.Tenant, a.Action))
	msg.Data = data
	if msgID != "" {
		msg.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	ack, err := in.js.PublishMsg(t.Context(), msg)
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

// stored returns the verdict stored for proposal id of tenant acme.
func (in *rig) stored(t *testing.T, id string) *gated.Verdict {
	t.Helper()
	v, err := in.client.Verdict(t.Context(), "acme", id)
	if err != nil {
		t.Fatalf("verdict %s not stored: %v", id, err)
	}
	return v
}

// drained waits until every proposal is acknowledged or removed.
func (in *rig) drained(t *testing.T) {
	t.Helper()
	waitFor(t, func() bool {
		info, err := in.res.Proposals.Info(t.Context())
		return err == nil && info.State.Msgs == 0
	}, "the proposal stream to drain")
}

// fetch takes the next delivery off the consumer as a gated that never
// answers would.
func (in *rig) fetch(t *testing.T) jetstream.Msg {
	t.Helper()
	batch, err := in.res.Consumer.Fetch(1, jetstream.FetchMaxWait(15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		return m
	}
	t.Fatalf("no delivery within 15s: %v", batch.Error())
	return nil
}

func (in *rig) events(t *testing.T, id string) []string {
	t.Helper()
	return bustest.AuditEvents(t, in.res.Audit, "acme", id)
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func sameVerdict(t *testing.T, got, want *gated.Verdict) {
	t.Helper()
	if got.Outcome != want.Outcome || got.AuditSeq != want.AuditSeq || !got.DecidedAt.Equal(want.DecidedAt) || got.Reason != want.Reason {
		t.Fatalf("verdict %s (audit_seq %d, decided %s: %s)\nwant     %s (audit_seq %d, decided %s: %s)",
			got.Outcome, got.AuditSeq, got.DecidedAt, got.Reason, want.Outcome, want.AuditSeq, want.DecidedAt, want.Reason)
	}
}

func count(events []string, name string) int {
	n := 0
	for _, e := range events {
		if e == name {
			n++
		}
	}
	return n
}

// deliveries counts the deliveries its decider is handed.
type deliveries struct {
	intake.Decider
	mu       sync.Mutex
	attempts []int
}

func (d *deliveries) Decide(ctx context.Context, dl engine.Delivery) (*gated.Verdict, error) {
	d.mu.Lock()
	d.attempts = append(d.attempts, dl.Attempt)
	d.mu.Unlock()
	return d.Decider.Decide(ctx, dl)
}

func (d *deliveries) seen() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.attempts)
}

// signalAwait tells the test when a delivery starts waiting for another
// message's review.
type signalAwait struct {
	engine.VerdictStore
	awaiting chan<- string
}

func (s *signalAwait) Await(ctx context.Context, tenant, id string) (*gated.Verdict, error) {
	select {
	case s.awaiting <- tenant + "." + id:
	default:
	}
	return s.VerdictStore.Await(ctx, tenant, id)
}

// crashAfterDecide decides, then kills its gated's connection before the
// verdict is published or the proposal acknowledged.
type crashAfterDecide struct {
	intake.Decider
	crash func()
	once  sync.Once
}

func (c *crashAfterDecide) Decide(ctx context.Context, d engine.Delivery) (*gated.Verdict, error) {
	v, err := c.Decider.Decide(ctx, d)
	c.once.Do(c.crash)
	return v, err
}

func TestSameMsgIDTwiceIsReviewedOnce(t *testing.T) {
	in := newIntake(t, bus.Config{})
	release := make(chan struct{})
	in.reviewer.hold = holdUntil(release)
	in.startWorker(t, workerOptions{})
	data := bustest.Proposal("twice1", "write", "host_restart_service", "")

	type result struct {
		v   *gated.Verdict
		err error
	}
	first := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		v, err := in.client.ProposeRaw(ctx, data)
		first <- result{v, err}
	}()
	receive(t, in.reviewer.started, "the review to start")

	// A second publisher sends the same proposal under the same
	// Nats-Msg-Id while the first is under review.
	second := in.verdicts(t, "twice1")
	if ack := in.publish(t, data, "acme.twice1"); !ack.Duplicate {
		t.Fatalf("second publish: the stream took it as a new message (seq %d)", ack.Sequence)
	}
	close(release)
	r := receive(t, first, "the first publisher's verdict")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.v.Outcome != gated.OutcomeApproved || r.v.Stage != gated.StageReview {
		t.Fatalf("verdict %s at %s: %s", r.v.Outcome, r.v.Stage, r.v.Reason)
	}
	sameVerdict(t, receive(t, second, "the second publisher's verdict"), r.v)
	in.drained(t)
	if n := in.reviewer.calls.Load(); n != 1 {
		t.Fatalf("%d reviews, want 1", n)
	}
}

func TestSameProposalInTwoMessagesIsReviewedOnce(t *testing.T) {
	in := newIntake(t, bus.Config{})
	release := make(chan struct{})
	in.reviewer.hold = holdUntil(release)
	awaiting := make(chan string, 4)
	store := func(s engine.VerdictStore) engine.VerdictStore {
		return &signalAwait{VerdictStore: s, awaiting: awaiting}
	}
	// Two gated processes share the consumer.
	in.startWorker(t, workerOptions{store: store})
	in.startWorker(t, workerOptions{store: store})
	verdicts := in.verdicts(t, "twin1")

	// Published without Nats-Msg-Id: the stream keeps both messages.
	data := bustest.Proposal("twin1", "write", "host_restart_service", "")
	in.publish(t, data, "")
	in.publish(t, data, "")
	receive(t, in.reviewer.started, "one review to start")
	// The other delivery finds the review claimed and waits for its
	// verdict; only then may the review finish.
	if key := receive(t, awaiting, "the other delivery to wait for the claimed review"); key != "acme.twin1" {
		t.Fatalf("waited on %s", key)
	}
	close(release)

	a := receive(t, verdicts, "the first verdict")
	b := receive(t, verdicts, "the second verdict")
	sameVerdict(t, b, a)
	sameVerdict(t, in.stored(t, "twin1"), a)
	if a.Outcome != gated.OutcomeApproved {
		t.Fatalf("verdict %s: %s", a.Outcome, a.Reason)
	}
	in.drained(t)
	if n := in.reviewer.calls.Load(); n != 1 {
		t.Fatalf("%d reviews, want 1", n)
	}
	waitFor(t, func() bool {
		events := in.events(t, "twin1")
		return count(events, gated.EventVerdict) == 1 && count(events, gated.EventReviewAwaited) == 1 &&
			count(events, gated.EventReplayed) == 1
	}, "one verdict.decided, one review.awaited and one verdict.replayed event")
}

func TestRedeliveryAfterTheVerdictIsStoredReplaysIt(t *testing.T) {
	in := newIntake(t, bus.Config{AckWait: time.Second})
	crashNC, _ := bustest.Connect(t, in.srv)
	crashed := make(chan struct{})
	in.startWorker(t, workerOptions{nc: crashNC, wrap: func(d intake.Decider) intake.Decider {
		return &crashAfterDecide{Decider: d, crash: func() { crashNC.Close(); close(crashed) }}
	}})
	verdicts := in.verdicts(t, "crash1")
	in.publish(t, bustest.Proposal("crash1", "write", "host_restart_service", ""), "acme.crash1")

	// The first gated stored the verdict and sealed its audit trail, then
	// died before publishing and acknowledging.
	receive(t, crashed, "the first gated to decide and die")
	stored := in.stored(t, "crash1")
	select {
	case v := <-verdicts:
		t.Fatalf("a verdict (%s) was published by a gated that died before publishing", v.Outcome)
	default:
	}

	// Another gated gets the redelivery and replays the stored verdict.
	seen := &deliveries{}
	in.startWorker(t, workerOptions{wrap: func(d intake.Decider) intake.Decider { seen.Decider = d; return seen }})
	sameVerdict(t, receive(t, verdicts, "the replayed verdict"), stored)
	in.drained(t)
	if got := seen.seen(); !slices.Equal(got, []int{2}) {
		t.Fatalf("second gated saw deliveries %v, want [2]", got)
	}
	if n := in.reviewer.calls.Load(); n != 1 {
		t.Fatalf("%d reviews, want 1", n)
	}
	waitFor(t, func() bool {
		events := in.events(t, "crash1")
		return count(events, gated.EventVerdict) == 1 && len(events) > 0 && events[len(events)-1] == gated.EventReplayed
	}, "the redelivery audited as verdict.replayed")
}
