package intake_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
)

// The turn tests decide through the real engine, store, policy and SOP
// reviewer plugin on an in-process server. Each review is held in front
// of the plugin until the test opens it: a reviewer (a model) that takes
// its time.

// slowReviews routes every persona as next does, reports each review as
// it begins, and holds it until the test opens its proposal's review.
type slowReviews struct {
	next  engine.Router
	begun chan string

	mu   sync.Mutex
	gate map[string]chan struct{}
	// all lets every review answer at once.
	all bool
}

func newSlowReviews(next engine.Router) *slowReviews {
	return &slowReviews{next: next, begun: make(chan string, 64), gate: map[string]chan struct{}{}}
}

func (s *slowReviews) gateOf(id string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.gate[id]
	if g == nil {
		g = make(chan struct{})
		if s.all {
			close(g)
		}
		s.gate[id] = g
	}
	return g
}

// openAll lets every review answer, those held and those to come.
func (s *slowReviews) openAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = true
	for _, g := range s.gate {
		select {
		case <-g:
		default:
			close(g)
		}
	}
}

// open lets the review of proposal id answer.
func (s *slowReviews) open(id string) { close(s.gateOf(id)) }

func (s *slowReviews) Route(p *engine.Persona) (engine.Reviewer, error) {
	r, err := s.next.Route(p)
	if err != nil {
		return nil, err
	}
	return slowReviewer{s: s, next: r}, nil
}

type slowReviewer struct {
	s    *slowReviews
	next engine.Reviewer
}

func (r slowReviewer) Review(ctx context.Context, req engine.ReviewRequest) (engine.ReviewResult, error) {
	r.s.begun <- req.Proposal.ID
	select {
	case <-r.s.gateOf(req.Proposal.ID):
	case <-ctx.Done():
		return engine.ReviewResult{}, ctx.Err()
	}
	return r.next.Review(ctx, req)
}

// turnGate is gated's intake with the real engine reviewing through
// reviews, on a server of its own.
type turnGate struct {
	srv     *server.Server
	nc      *nats.Conn
	js      jetstream.JetStream
	res     *bus.Resources
	worker  *intake.Worker
	reviews *slowReviews
}

// startTurnGate starts a worker set up with cfg whose engine reviews
// through a slowReviews over the SOP plugin; wrap, when not nil, wraps
// the engine.
func startTurnGate(t *testing.T, cfg bus.Config, wrap func(intake.Decider) intake.Decider) *turnGate {
	t.Helper()
	s := natstest.Server(t)
	nc, js := natstest.Connect(t, s)
	res, err := bus.Setup(t.Context(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := &turnGate{srv: s, nc: nc, js: js, res: res}
	g.reviews = newSlowReviews(sopPlugins(t))
	g.worker = g.startWorker(t, cfg, g.reviews, wrap)
	return g
}

// startWorker starts another worker, as another gated would, on its own
// connection, reviewing through reviews.
func (g *turnGate) startWorker(t *testing.T, cfg bus.Config, reviews *slowReviews, wrap func(intake.Decider) intake.Decider) *intake.Worker {
	t.Helper()
	nc, js := natstest.Connect(t, g.srv)
	res, err := bus.Setup(t.Context(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var d intake.Decider = defaultEngine(t, store.New(res.Verdicts), reviews)
	if wrap != nil {
		d = wrap(d)
	}
	w, err := intake.NewWorker(nc, js, res, d, trails(t, js), cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever the test left held answers, so that Stop returns.
		reviews.openAll()
		if !intake.Stopping(w) {
			w.Stop(5 * time.Second)
		}
	})
	return w
}

// turnProposal is a proposal of tenant on its own service: a write goes
// to review, a read is approved by the policy alone.
func turnProposal(tenant, id, class string) (subject string, data []byte) {
	action, extra := "host_list_services", ""
	if class == "write" {
		action, extra = "host_restart_service", `,"blast_radius":"single_device","reason":"restart"`
	}
	return "gated.proposals." + tenant + "." + action,
		fmt.Appendf(nil, `{"v":1,"id":%q,"tenant":%q,"action":%q,"class":%q,"target":{"service":"svc-%s"}%s}`,
			id, tenant, action, class, id, extra)
}

func (g *turnGate) publish(t *testing.T, tenant, id, class string) {
	t.Helper()
	subject, data := turnProposal(tenant, id, class)
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set("Nats-Msg-Id", tenant+"."+id)
	if _, err := g.js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
}

// verdicts subscribes to every verdict of tenant.
func (g *turnGate) verdicts(t *testing.T, tenant string) *nats.Subscription {
	t.Helper()
	sub, err := g.nc.SubscribeSync("gated.verdicts." + tenant + ".*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return sub
}

// next is the next verdict on sub; the test fails when none comes.
func next(t *testing.T, sub *nats.Subscription, what string) *gated.Verdict {
	t.Helper()
	msg, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no verdict: %s: %v", what, err)
	}
	var v gated.Verdict
	if err := json.Unmarshal(msg.Data, &v); err != nil {
		t.Fatal(err)
	}
	return &v
}

// begun waits for n reviews to begin and returns their proposal ids.
func (g *turnGate) begun(t *testing.T, n int, what string) []string {
	t.Helper()
	var ids []string
	for len(ids) < n {
		select {
		case id := <-g.reviews.begun:
			ids = append(ids, id)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: %d of %d reviews began (%v)", what, len(ids), n, ids)
		}
	}
	return ids
}

// TestTurnsAreNotHeldThroughReviews: a tenant decides at most
// TenantMaxInFlight proposals at once, but a proposal whose review waits
// on a slow reviewer gives its turn up meanwhile. So a flooding tenant
// with every turn's proposal under review still has its next proposals
// begin (more reviews, and reads decided at once), and a quiet tenant's
// proposals are decided beside them; every review then ends in one
// verdict.
func TestTurnsAreNotHeldThroughReviews(t *testing.T) {
	const turns, reviews = 2, 5
	g := startTurnGate(t, bus.Config{MaxInFlight: 32, TenantMaxInFlight: turns}, nil)
	flood, quiet := g.verdicts(t, "flood"), g.verdicts(t, "quiet")
	// The quiet tenant has a review under way first: with two tenants in
	// gated, each has its TenantMaxInFlight turns.
	g.publish(t, "quiet", "qw0", "write")
	g.begun(t, 1, "the quiet tenant's first review")
	for i := range reviews {
		g.publish(t, "flood", fmt.Sprintf("w%d", i), "write")
	}
	// Every one of the flood's reviews begins while the first still wait
	// on the reviewer: none of them holds a turn.
	g.begun(t, reviews, fmt.Sprintf("the flood has %d turns and %d proposals to review", turns, reviews))

	g.publish(t, "flood", "r1", "read")
	g.publish(t, "quiet", "q1", "read")
	g.publish(t, "quiet", "qw1", "write")
	if v := next(t, flood, "the flood's read while its reviews wait"); v.ProposalID != "r1" || !v.Approved {
		t.Fatalf("the flood's first verdict is %s %s (%s), want r1 approved", v.ProposalID, v.Outcome, v.Reason)
	}
	if v := next(t, quiet, "the quiet tenant's read while the flood's reviews wait"); v.ProposalID != "q1" || !v.Approved {
		t.Fatalf("the quiet tenant's first verdict is %s %s (%s), want q1 approved", v.ProposalID, v.Outcome, v.Reason)
	}
	g.begun(t, 1, "the quiet tenant's review")

	// The reviews answer; each proposal gets one verdict from its review.
	for i := range reviews {
		g.reviews.open(fmt.Sprintf("w%d", i))
	}
	g.reviews.open("qw0")
	g.reviews.open("qw1")
	got := map[string]*gated.Verdict{}
	for range reviews {
		v := next(t, flood, "a reviewed proposal of the flood")
		if got[v.ProposalID] != nil {
			t.Fatalf("proposal %s got two verdicts", v.ProposalID)
		}
		got[v.ProposalID] = v
	}
	for i := range reviews {
		v := got[fmt.Sprintf("w%d", i)]
		if v == nil || v.Stage != gated.StageReview || len(v.Reviews) != 1 {
			t.Fatalf("w%d: verdict %+v, want one decided at review by one reviewer", i, v)
		}
	}
	reviewed := map[string]bool{}
	for range 2 {
		v := next(t, quiet, "the quiet tenant's reviews")
		if v.Stage != gated.StageReview || reviewed[v.ProposalID] {
			t.Fatalf("the quiet tenant's verdict is %s %s at %s, want qw0 and qw1 decided at review, once each", v.ProposalID, v.Outcome, v.Stage)
		}
		reviewed[v.ProposalID] = true
	}
}

// TestALoneTenantIsNotThrottled: a tenant alone in gated decides more
// than TenantMaxInFlight proposals at once (leaving TenantMaxInFlight
// handlers for the next tenant); once another tenant has a proposal in
// gated, even one under review, each has TenantMaxInFlight turns.
func TestALoneTenantIsNotThrottled(t *testing.T) {
	const handlers, turns = 6, 1
	var ids []string
	for i := range handlers {
		ids = append(ids, fmt.Sprintf("acme.r%d", i))
	}
	hold := holdDeliveries(ids...)
	g := startTurnGate(t, bus.Config{MaxInFlight: handlers, TenantMaxInFlight: turns}, hold.wrap)
	arrived := func(n int, what string) {
		t.Helper()
		for range n {
			select {
			case <-hold.arrived:
			case <-time.After(30 * time.Second):
				t.Fatal(what)
			}
		}
	}
	for i := range handlers - turns {
		g.publish(t, "acme", fmt.Sprintf("r%d", i), "read")
	}
	arrived(handlers-turns, fmt.Sprintf("a tenant alone was not given %d turns at once", handlers-turns))
	g.publish(t, "acme", fmt.Sprintf("r%d", handlers-turns), "read")
	waitFor(t, func() bool { _, _, waiting := intake.TurnsOf(g.worker, "acme"); return waiting == 1 }, "the tenant's next proposal to wait")
	if running, _, _ := intake.TurnsOf(g.worker, "acme"); running != handlers-turns {
		t.Fatalf("acme: %d running, want %d: %d of %d handlers left for another tenant", running, handlers-turns, turns, handlers)
	}
	select {
	case id := <-hold.arrived:
		t.Fatalf("%s was decided while the tenant alone held %d of %d handlers; want %d left for another tenant", id, handlers-turns, handlers, turns)
	default:
	}

	// Another tenant comes: it is decided at once on the handler left.
	quiet := g.verdicts(t, "quiet")
	g.publish(t, "quiet", "q1", "read")
	if v := next(t, quiet, "the other tenant's read beside a tenant that held its handlers"); v.ProposalID != "q1" || !v.Approved {
		t.Fatalf("quiet's verdict is %s %s (%s), want q1 approved", v.ProposalID, v.Outcome, v.Reason)
	}
}

// heldDeliveries holds the deliveries whose Nats-Msg-Id it was told
// about until the test opens them, holding their turns meanwhile; it
// hands the others on at once.
type heldDeliveries struct {
	next    intake.Decider
	arrived chan string
	held    map[string]chan struct{}
}

func holdDeliveries(ids ...string) *heldDeliveries {
	h := &heldDeliveries{arrived: make(chan string, 16), held: map[string]chan struct{}{}}
	for _, id := range ids {
		h.held[id] = make(chan struct{})
	}
	return h
}

func (h *heldDeliveries) wrap(d intake.Decider) intake.Decider { h.next = d; return h }

func (h *heldDeliveries) Decide(ctx context.Context, d engine.Delivery) (*gated.Verdict, error) {
	if gate, ok := h.held[d.MsgID]; ok {
		h.arrived <- d.MsgID
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return h.next.Decide(ctx, d)
}

func (h *heldDeliveries) GiveUp(ctx context.Context, d engine.Delivery, cause error) *gated.Verdict {
	return h.next.GiveUp(ctx, d, cause)
}

// contend brings tenant acme of a worker with one turn to the contended
// state: proposal a's review has answered and a waits to take a turn
// back, b holds the turn (held by hold), and reads c and d wait for
// their first turn.
func contend(t *testing.T, g *turnGate, hold *heldDeliveries) {
	t.Helper()
	// Another tenant's review is under way throughout, so acme has its
	// TenantMaxInFlight turns and not the handlers of a tenant alone.
	g.publish(t, "other", "o", "write")
	g.begun(t, 1, "the other tenant's review")
	g.publish(t, "acme", "a", "write")
	g.begun(t, 1, "a's review")
	g.publish(t, "acme", "b", "read")
	select {
	case <-hold.arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("b was not decided while a's review waited")
	}
	g.reviews.open("a")
	waitFor(t, func() bool { _, returning, _ := intake.TurnsOf(g.worker, "acme"); return returning == 1 }, "a to wait for a turn back")
	g.publish(t, "acme", "c", "read")
	g.publish(t, "acme", "d", "read")
	waitFor(t, func() bool { _, _, waiting := intake.TurnsOf(g.worker, "acme"); return waiting == 2 }, "c and d to wait for a turn")
	if running, returning, waiting := intake.TurnsOf(g.worker, "acme"); running != 1 || returning != 1 || waiting != 2 {
		t.Fatalf("acme: %d running, %d returning, %d waiting; want 1, 1, 2", running, returning, waiting)
	}
}

// TestReturningProposalsTakeTurnsFirst: a proposal back from its review
// takes the next free turn before its tenant's proposals that have not
// begun, whatever their arrival, so that a tenant sending new proposals
// cannot keep a reviewed one from its verdict.
func TestReturningProposalsTakeTurnsFirst(t *testing.T) {
	hold := holdDeliveries("acme.b")
	g := startTurnGate(t, bus.Config{MaxInFlight: 16, TenantMaxInFlight: 1}, hold.wrap)
	sub := g.verdicts(t, "acme")
	contend(t, g, hold)
	close(hold.held["acme.b"])
	var order []string
	for range 4 {
		order = append(order, next(t, sub, "acme's proposals").ProposalID)
	}
	if fmt.Sprint(order) != "[b a c d]" {
		t.Fatalf("verdicts in the order %v, want [b a c d]: a, back from review, before c and d that had not begun", order)
	}
	waitFor(t, func() bool { r, ret, w := intake.TurnsOf(g.worker, "acme"); return r+ret+w == 0 }, "acme's turns to end")
}

// TestStopWithProposalsWaitingForTurns: at shutdown a proposal waiting
// to take a turn back after its review is decided if the grace period
// allows, or returned to the stream, and those waiting for their first
// turn are returned to the stream; another gated then decides each
// returned one once, and nothing is decided twice.
func TestStopWithProposalsWaitingForTurns(t *testing.T) {
	for _, tc := range []struct {
		note  string
		grace time.Duration
		// open lets b finish within the grace period.
		open bool
		// first are the verdicts the stopping worker publishes.
		first string
	}{
		{note: "b ends within the grace period, a after it", grace: 30 * time.Second, open: true, first: "[b a]"},
		{note: "the grace period ends with b held and a waiting", grace: time.Second, first: "[]"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			hold := holdDeliveries("acme.b")
			g := startTurnGate(t, bus.Config{MaxInFlight: 16, TenantMaxInFlight: 1}, hold.wrap)
			sub := g.verdicts(t, "acme")
			contend(t, g, hold)
			stopped := make(chan struct{})
			go func() {
				defer close(stopped)
				g.worker.Stop(tc.grace)
			}()
			waitFor(t, func() bool { return intake.Stopping(g.worker) }, "Stop to begin")
			var first []string
			if tc.open {
				close(hold.held["acme.b"])
				// b and a are answered while the other tenant's review
				// still holds acme to its turn; then that review ends too.
				for range 2 {
					first = append(first, next(t, sub, "b and a within the grace period").ProposalID)
				}
				g.reviews.open("o")
			}
			<-stopped
			if !tc.open {
				close(hold.held["acme.b"])
			}
			for {
				msg, err := sub.NextMsg(time.Second)
				if err != nil {
					break
				}
				var v gated.Verdict
				if err := json.Unmarshal(msg.Data, &v); err != nil {
					t.Fatal(err)
				}
				first = append(first, v.ProposalID)
			}
			if fmt.Sprint(first) != tc.first {
				t.Fatalf("the stopping worker answered %v, want %s", first, tc.first)
			}

			// Another gated decides what was returned, each once.
			more := newSlowReviews(sopPlugins(t))
			more.openAll()
			g.startWorker(t, bus.Config{MaxInFlight: 16, TenantMaxInFlight: 1}, more, nil)
			seen := map[string]int{}
			for _, id := range first {
				seen[id]++
			}
			for len(seen) < 4 {
				v := next(t, sub, fmt.Sprintf("the proposals returned to the stream (have %v)", seen))
				seen[v.ProposalID]++
			}
			for id, n := range seen {
				if n != 1 {
					t.Errorf("proposal %s got %d verdicts", id, n)
				}
			}
			waitFor(t, func() bool {
				info, err := g.res.Consumer.Info(t.Context())
				return err == nil && info.NumAckPending == 0 && info.NumPending == 0
			}, "every proposal to be acknowledged")
		})
	}
}
