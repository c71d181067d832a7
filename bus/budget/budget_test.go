package budget_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/budget"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/policies"
)

// clock is the engines' clock, shared by both gated processes of a test,
// so that windows roll when the test says.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// reviewer answers every review with a rejection that reports tokens;
// when gate is not nil each review first waits for a value on it.
type reviewer struct {
	tokens  gated.Tokens
	gate    chan struct{}
	started chan string
	calls   atomic.Int64
}

func (r *reviewer) Route(*engine.Persona) (engine.Reviewer, error) { return r, nil }

func (r *reviewer) Review(ctx context.Context, req engine.ReviewRequest) (engine.ReviewResult, error) {
	r.calls.Add(1)
	if r.started != nil {
		r.started <- req.Proposal.ID
	}
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return engine.ReviewResult{}, ctx.Err()
		}
	}
	return engine.ReviewResult{
		Plugin: "budget-test", Text: "Decision: reject\nNot today.", Decision: gated.DecisionReject,
		Notes: "not today", Tokens: r.tokens,
	}, nil
}

// gated is one gated process of a test: its own connection, audit
// writer, verdict store, budget store and engine, over the shared server.
type process struct {
	eng    *engine.Engine
	trails func() engine.AuditTrail
	store  *budget.Store
}

// cluster is the server and the two gated processes sharing it.
type cluster struct {
	srv   *server.Server
	js    jetstream.JetStream
	audit jetstream.Stream
	clock *clock
	procs [2]*process
	rev   *reviewer
}

// windowStart is a whole hour, so that the test's windows start with it.
var windowStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func startCluster(t *testing.T, limits string, pol *policies.Evaluator, rev *reviewer, opts ...func(*engine.Config)) *cluster {
	t.Helper()
	cfg, err := budget.ParseConfig("budgets.yaml", []byte(limits))
	if err != nil {
		t.Fatal(err)
	}
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if pol == nil {
		pol = bustest.Policy(t)
	}
	reg, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{srv: s, js: js, audit: res.Audit, clock: &clock{t: windowStart}, rev: rev}
	for i := range c.procs {
		_, pjs := natstest.Connect(t, s)
		kv, err := budget.Setup(t.Context(), pjs, 1)
		if err != nil {
			t.Fatal(err)
		}
		verdicts, err := pjs.KeyValue(t.Context(), "GATED_VERDICTS")
		if err != nil {
			t.Fatal(err)
		}
		bs := budget.New(kv, cfg, nil)
		ecfg := engine.Config{
			Policy: pol, Personas: reg, Router: rev, Store: store.New(verdicts),
			Clock: c.clock, Budgets: bs, DedupeWindow: -1,
		}
		for _, o := range opts {
			o(&ecfg)
		}
		eng, err := engine.New(ecfg)
		if err != nil {
			t.Fatal(err)
		}
		w := natstest.AuditWriter(t, pjs, audit.Config{})
		c.procs[i] = &process{eng: eng, trails: w.Trail, store: bs}
	}
	return c
}

// decide has process i decide a proposal of tenant acme.
func (c *cluster) decide(t *testing.T, i int, data []byte) *gated.Verdict {
	t.Helper()
	v, err := c.decideErr(t.Context(), i, data)
	if err != nil {
		t.Fatalf("deciding on gated %d: %v", i, err)
	}
	return v
}

func (c *cluster) decideErr(ctx context.Context, i int, data []byte) (*gated.Verdict, error) {
	p := engine.Delivery{Data: data, Attempt: 1, Trail: c.procs[i%2].trails()}
	tenant, action, id := field(data, "tenant"), field(data, "action"), field(data, "id")
	p.Subject, p.MsgID = "gated.proposals."+tenant+"."+action, tenant+"."+id
	return c.procs[i%2].eng.Decide(ctx, p)
}

// refusalsWritten waits until both processes wrote the refusals they
// counted and each sees want refusals of agent: a refusal is counted in
// memory by the engine and written in the background.
func (c *cluster) refusalsWritten(t *testing.T, agent string, want int64) {
	t.Helper()
	for range 10000 {
		for _, p := range c.procs {
			if err := p.store.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		seen := 0
		for _, p := range c.procs {
			st, err := p.store.State(t.Context(), "acme", agent, c.clock.Now())
			if err != nil {
				t.Fatal(err)
			}
			if st.Agent.Refusals >= want {
				seen++
			}
		}
		if seen == len(c.procs) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the records never count %d refusals of %s", want, agent)
}

// field reads a string member of a test proposal.
func field(data []byte, name string) string {
	_, rest, _ := strings.Cut(string(data), `"`+name+`":"`)
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// proposal is a proposal of acme by agent; n makes it distinct.
func proposal(n int, class, action, agent string) []byte {
	radius := ""
	if class != "read" {
		radius = `,"blast_radius":"single_device"`
	}
	return fmt.Appendf(nil, `{"v":1,"id":"p%d","tenant":"acme","action":%q,"class":%q,"target":{"service":"svc%d"}%s,"reason":"change %d","requested_by":{"agent":%q,"session":"s"}}`,
		n, action, class, n, radius, n, agent)
}

// admitted fails unless v went past its budgets.
func admitted(t *testing.T, v *gated.Verdict) {
	t.Helper()
	if v.Budget != nil {
		t.Fatalf("%s refused by budget: %s", v.ProposalID, v.Reason)
	}
}

// refused fails unless v is a budget refusal of limit in scope; it
// returns when the limit resets.
func refused(t *testing.T, v *gated.Verdict, limit, scope string) time.Time {
	t.Helper()
	if v.Budget == nil {
		t.Fatalf("%s not refused by budget: %s %s: %s", v.ProposalID, v.Outcome, v.Stage, v.Reason)
	}
	if v.Outcome != gated.OutcomeBlocked || v.Approved {
		t.Fatalf("a budget refusal is %s (approved %v), want blocked", v.Outcome, v.Approved)
	}
	if v.Budget.Limit != limit || v.Budget.Scope != scope {
		t.Fatalf("refused by %s of the %s, want %s of the %s: %s", v.Budget.Limit, v.Budget.Scope, limit, scope, v.Reason)
	}
	if !strings.Contains(v.Reason, "resets at "+v.Budget.ResetsAt.Format(time.RFC3339)) {
		t.Fatalf("the reason does not say when the limit resets: %s", v.Reason)
	}
	return v.Budget.ResetsAt
}

// TestWindowedLimitsRefuseAtTheBoundaryAndReset: each windowed limit
// admits exactly its count over two gated processes sharing the
// counters, refuses the next proposal before any review starts, and
// admits again once its window rolls over.
func TestWindowedLimitsRefuseAtTheBoundaryAndReset(t *testing.T) {
	for _, tc := range []struct {
		note   string
		limits string
		// next is the n-th proposal.
		next   func(n int) []byte
		tokens gated.Tokens
		// max is how many are admitted before the refusal.
		max          int
		limit, scope string
		// reviews says whether admitted proposals are reviewed.
		reviews bool
	}{
		{
			note:   "agent proposals",
			limits: "tenants: {acme: {agents: {bot: {proposals: 3/1m}}}}",
			next:   func(n int) []byte { return proposal(n, "write", "host_restart_service", "bot") },
			max:    3, limit: gated.LimitProposals, scope: gated.ScopeAgent, reviews: true,
		},
		{
			note:   "tenant proposals over two agents",
			limits: "tenants: {acme: {tenant: {proposals: 4/1m}, agent: {proposals: unlimited}}}",
			next: func(n int) []byte {
				return proposal(n, "write", "host_restart_service", []string{"bot", "other"}[n%2])
			},
			max: 4, limit: gated.LimitProposals, scope: gated.ScopeTenant, reviews: true,
		},
		{
			note:   "reads",
			limits: "defaults: {agent: {reads: 5/10s}}",
			next:   func(n int) []byte { return proposal(n, "read", "host_list_services", "bot") },
			max:    5, limit: gated.LimitReads, scope: gated.ScopeAgent,
		},
		{
			note:   "tokens the reviewer reported",
			limits: "tenants: {acme: {agent: {tokens: 100/1h}}}",
			next:   func(n int) []byte { return proposal(n, "write", "host_restart_service", "bot") },
			// 0 and 60 tokens used are under 100; 120 is not.
			tokens: gated.Tokens{Prompt: 40, Completion: 20},
			max:    2, limit: gated.LimitTokens, scope: gated.ScopeAgent, reviews: true,
		},
	} {
		t.Run(tc.note, func(t *testing.T) {
			rev := &reviewer{tokens: tc.tokens}
			c := startCluster(t, tc.limits, nil, rev)
			n := 0
			for ; n < tc.max; n++ {
				admitted(t, c.decide(t, n, tc.next(n)))
			}
			calls := rev.calls.Load()
			if tc.reviews && calls != int64(tc.max) {
				t.Fatalf("%d reviews ran, want %d", calls, tc.max)
			}
			resets := refused(t, c.decide(t, n, tc.next(n)), tc.limit, tc.scope)
			// Audited, and stored: the same proposal again gets the same
			// refusal, from either process, and costs nothing more.
			id := fmt.Sprintf("p%d", n)
			if events := bustest.AuditEvents(t, c.audit, "acme", id); !slices.Contains(events, gated.EventBudgetRefused) {
				t.Fatalf("the refusal's audit trail is %v, want %s in it", events, gated.EventBudgetRefused)
			}
			again := c.decide(t, n+1, tc.next(n))
			if again.Budget == nil || again.AuditSeq == 0 {
				t.Fatalf("the refused proposal again: %s %s", again.Outcome, again.Reason)
			}
			n++
			if got := rev.calls.Load(); got != calls {
				t.Fatalf("a refused proposal was reviewed (%d reviews, want %d)", got, calls)
			}
			// Still refused on the other process, just before the reset.
			c.clock.set(resets.Add(-time.Millisecond))
			refused(t, c.decide(t, n, tc.next(n)), tc.limit, tc.scope)
			n++
			c.clock.set(resets)
			admitted(t, c.decide(t, n, tc.next(n)))
		})
	}
}

// TestReviewsInFlightLimitWithASlowReviewer: the reviews-in-flight lease
// refuses a review while the limit's reviews are running on either
// process, admits one when a review ends, and a lease its process never
// released (a crash) ends at its expiry.
func TestReviewsInFlightLimitWithASlowReviewer(t *testing.T) {
	rev := &reviewer{gate: make(chan struct{}), started: make(chan string, 8)}
	c := startCluster(t, "tenants: {acme: {agent: {reviews_in_flight: 2}}}", nil, rev)
	ctx := t.Context()
	verdicts := make(chan *gated.Verdict, 8)
	start := func(n int) {
		go func() {
			v, err := c.decideErr(ctx, n, proposal(n, "write", "host_restart_service", "bot"))
			if err != nil {
				t.Errorf("deciding p%d: %v", n, err)
			}
			verdicts <- v
		}()
		select {
		case <-rev.started:
		case v := <-verdicts:
			t.Fatalf("p%d did not start its review: %s at %s: %s", n, v.Outcome, v.Stage, v.Reason)
		}
	}
	start(0)
	start(1)
	resets := refused(t, c.decide(t, 2, proposal(2, "write", "host_restart_service", "bot")),
		gated.LimitReviewsInFlight, gated.ScopeAgent)
	if want := windowStart.Add(engine.DefaultReviewTimeout + 30*time.Second); !resets.Equal(want) {
		t.Fatalf("the limit resets at %s, want the first lease's end %s", resets, want)
	}
	// One review ends: its lease is released and a review is admitted.
	rev.gate <- struct{}{}
	admitted(t, <-verdicts)
	start(3)
	// Both leases are held by reviews that never end (their processes
	// died): once past their end they count no more.
	c.clock.set(resets)
	start(4)
	close(rev.gate)
	for range 3 {
		<-verdicts
	}
}

// holdingPolicy is the default bundle holding acme's dns_* actions for an
// operator for one minute.
func holdingPolicy(t *testing.T, extra string) *policies.Evaluator {
	t.Helper()
	b, err := policies.Default()
	if err != nil {
		t.Fatal(err)
	}
	b.Data["gated"].(map[string]any)["config"].(map[string]any)["operator_holds"] = map[string]any{
		"actions": map[string]any{"acme": []any{"dns_*"}}, "deadline": "1m",
	}
	if extra != "" {
		b.Modules["extra.rego"] = extra
	}
	pol, err := policies.Compile(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// TestHoldsPendingLimit: actions held for an operator count against the
// agent's pending holds until they are settled; the limit refuses the next
// one without holding it, and a settled hold makes room.
func TestHoldsPendingLimit(t *testing.T) {
	c := startCluster(t, "tenants: {acme: {agent: {holds_pending: 2}}}", holdingPolicy(t, ""), &reviewer{})
	for n := range 2 {
		v := c.decide(t, n, proposal(n, "write", "dns_update", "bot"))
		if v.AwaitingOperator == nil {
			t.Fatalf("p%d not held: %s %s", n, v.Outcome, v.Reason)
		}
	}
	v := c.decide(t, 2, proposal(2, "write", "dns_update", "bot"))
	refused(t, v, gated.LimitHoldsPending, gated.ScopeAgent)
	if v.AwaitingOperator != nil {
		t.Fatal("a refused hold awaits an operator")
	}
	// p0's deadline passes: settled as a timeout, its hold is released.
	c.clock.set(windowStart.Add(time.Minute))
	if _, err := c.procs[1].eng.Expire(t.Context(), "acme", "p0", c.procs[1].trails()); err != nil {
		t.Fatal(err)
	}
	// The minute rolled the proposals window too; the holds are what is
	// checked here.
	v = c.decide(t, 3, proposal(3, "write", "dns_update", "bot"))
	if v.AwaitingOperator == nil {
		t.Fatalf("p3 not held after a hold was settled: %s", v.Reason)
	}
}

// TestPolicySeesTheBudget: a policy rule reads input.budget: an agent
// refused three times in ten minutes has its destructive changes held
// for a person.
func TestPolicySeesTheBudget(t *testing.T) {
	pol := holdingPolicy(t, budgetHoldRule)
	if !pol.ReadsBudget() {
		t.Fatal("a bundle that reads input.budget is said not to")
	}
	for _, tc := range []struct {
		note  string
		reads func() bool
	}{
		{"counters read for every proposal", nil},
		{"counters read because the policy can read them", pol.ReadsBudget},
		// A policy swapped in after the engine asked: it refuses the input
		// without the counters, and the engine reads them.
		{"the engine told the policy cannot read them", func() bool { return false }},
	} {
		t.Run(tc.note, func(t *testing.T) {
			testPolicySeesTheBudget(t, pol, func(c *engine.Config) { c.PolicyReadsBudget = tc.reads })
		})
	}
}

const budgetHoldRule = `package gated

hold contains {"rule": "hold_often_refused", "why": sprintf("agent %s was refused %d times in ten minutes", [input.proposal.requested_by.agent, input.budget.agent.refusals_10m])} if {
	input.proposal.class == "destructive"
	input.budget.agent.refusals_10m >= 3
}
`

func testPolicySeesTheBudget(t *testing.T, pol *policies.Evaluator, opt func(*engine.Config)) {
	c := startCluster(t, "", pol, &reviewer{}, opt)
	destructive := func(n int) []byte { return proposal(n, "destructive", "db_vacuum", "bot") }
	// Rejected by the reviewer twice: a destructive change still goes to
	// review, and is rejected a third time.
	for n := range 3 {
		v := c.decide(t, n, destructive(n))
		if v.Outcome != gated.OutcomeRejected || v.Stage != gated.StageReview {
			t.Fatalf("p%d: %s at %s, want rejected at review: %s", n, v.Outcome, v.Stage, v.Reason)
		}
	}
	// Each process writes the refusals it counted within an interval;
	// the policy of the other sees them once written.
	c.refusalsWritten(t, "bot", 3)
	v := c.decide(t, 3, destructive(3))
	if v.AwaitingOperator == nil || v.AwaitingOperator.Rule != "hold_often_refused" {
		t.Fatalf("the fourth destructive change is %s at %s, want held by hold_often_refused: %s", v.Outcome, v.Stage, v.Reason)
	}
	// Ten minutes on, the refusals are out of the window.
	c.clock.set(windowStart.Add(engine.RefusalWindow))
	v = c.decide(t, 4, destructive(4))
	if v.AwaitingOperator != nil || v.Stage != gated.StageReview {
		t.Fatalf("ten minutes later: %s at %s, want a review: %s", v.Outcome, v.Stage, v.Reason)
	}
}

// TestCounterStoreUnreachableFailsClosed: with the counter bucket gone,
// no review starts, nothing is decided (the delivery is retried), and
// the store's check says so for readiness.
func TestCounterStoreUnreachableFailsClosed(t *testing.T) {
	rev := &reviewer{}
	c := startCluster(t, "", nil, rev)
	admitted(t, c.decide(t, 0, proposal(0, "write", "host_restart_service", "bot")))
	if err := c.js.DeleteKeyValue(t.Context(), budget.Bucket); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		v, err := c.decideErr(t.Context(), i, proposal(10+i, "write", "host_restart_service", "bot"))
		if err == nil {
			t.Fatalf("gated %d decided with no counters: %s %s", i, v.Outcome, v.Reason)
		}
		if !strings.Contains(err.Error(), "budget counters") {
			t.Fatalf("the error does not name the budget counters: %v", err)
		}
	}
	if got := rev.calls.Load(); got != 1 {
		t.Fatalf("%d reviews ran, want only the one before the bucket went", got)
	}
	err := c.procs[0].store.Check(t.Context())
	if err == nil || !strings.Contains(err.Error(), budget.Bucket) {
		t.Fatalf("the readiness check says %v, want the bucket unreachable", err)
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) && !strings.Contains(err.Error(), "not found") {
		t.Logf("check error: %v", err)
	}
}
