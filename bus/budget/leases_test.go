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

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/budget"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine"
)

// openBucket opens the counter bucket on a connection of its own, to do
// what a crashed gated left done.
func openBucket(t *testing.T, s *server.Server) jetstream.KeyValue {
	t.Helper()
	_, js := bustest.Connect(t, s)
	kv, err := js.KeyValue(t.Context(), budget.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func review(id string, now, until time.Time) engine.BudgetRequest {
	return engine.BudgetRequest{Tenant: "acme", Agent: "bot", ID: id, Use: engine.BudgetReview, Now: now, Until: until}
}

// inFlight returns the reviews in flight of acme and of its agent bot at
// now, and fails unless they agree.
func inFlight(t *testing.T, st *budget.Store, now time.Time) int64 {
	t.Helper()
	got, err := st.State(t.Context(), "acme", "bot", now)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tenant.ReviewsInFlight != got.Agent.ReviewsInFlight {
		t.Fatalf("reviews in flight: tenant %d, agent %d", got.Tenant.ReviewsInFlight, got.Agent.ReviewsInFlight)
	}
	return got.Tenant.ReviewsInFlight
}

func mustAdmit(t *testing.T, st *budget.Store, req engine.BudgetRequest) {
	t.Helper()
	r, err := st.Admit(t.Context(), req)
	if err != nil || r != nil {
		t.Fatalf("admitting %s: %v %v", req.ID, r, err)
	}
}

// TestLeaseIsIdempotentByProposal: a redelivered proposal takes the
// lease it holds, not a second one, and moves it to its later end; it
// releases its own; a release of a lease not held changes nothing.
func TestLeaseIsIdempotentByProposal(t *testing.T) {
	s := bustest.Server(t)
	a, b := newStore(t, s, unlimited), newStore(t, s, unlimited)
	now := windowStart
	mustAdmit(t, a, review("p1", now, now.Add(90*time.Second)))
	mustAdmit(t, a, review("p2", now, now.Add(90*time.Second)))
	for _, step := range []struct {
		note string
		do   func() error
		at   time.Time
		want int64
	}{
		{note: "redelivered on the other gated", at: now.Add(time.Second), want: 2, do: func() error {
			_, err := b.Admit(t.Context(), review("p1", now.Add(time.Second), now.Add(3*time.Minute)))
			return err
		}},
		{note: "past the first end, the moved lease still counts", at: now.Add(2 * time.Minute), want: 1},
		{note: "released by the gated that holds it", at: now.Add(2 * time.Minute), want: 0, do: func() error {
			return b.Release(t.Context(), engine.BudgetRelease{Tenant: "acme", Agent: "bot", ID: "p1", Use: engine.BudgetReview})
		}},
		{note: "released again", at: now.Add(time.Second), want: 1, do: func() error {
			return a.Release(t.Context(), engine.BudgetRelease{Tenant: "acme", Agent: "bot", ID: "p1", Use: engine.BudgetReview})
		}},
		{note: "a lease never taken", at: now.Add(time.Second), want: 1, do: func() error {
			return a.Release(t.Context(), engine.BudgetRelease{Tenant: "acme", Agent: "bot", ID: "p9", Use: engine.BudgetReview})
		}},
		{note: "a hold of the same id is another lease", at: now.Add(time.Second), want: 1, do: func() error {
			return a.Release(t.Context(), engine.BudgetRelease{Tenant: "acme", Agent: "bot", ID: "p2", Use: engine.BudgetHold})
		}},
		{note: "p2 released", at: now.Add(time.Second), want: 0, do: func() error {
			return a.Release(t.Context(), engine.BudgetRelease{Tenant: "acme", Agent: "bot", ID: "p2", Use: engine.BudgetReview})
		}},
	} {
		t.Run(step.note, func(t *testing.T) {
			if step.do != nil {
				if err := step.do(); err != nil {
					t.Fatal(err)
				}
			}
			for name, st := range map[string]*budget.Store{"a": a, "b": b} {
				if got := inFlight(t, st, step.at); got != step.want {
					t.Errorf("%s reads %d reviews in flight, want %d", name, got, step.want)
				}
			}
		})
	}
}

// TestLeasesAtTheBoundaryOverTwoProcesses: distinct reviews admitted at
// once by two gated processes stop exactly at the limit; one proposal
// delivered to both at once is counted once.
func TestLeasesAtTheBoundaryOverTwoProcesses(t *testing.T) {
	s := bustest.Server(t)
	const limits = "tenants: {acme: {agent: {reviews_in_flight: 7, proposals: unlimited}}}"
	stores := []*budget.Store{newStore(t, s, limits), newStore(t, s, limits)}
	now := windowStart
	var wg sync.WaitGroup
	var admitted, refused atomic.Int64
	for i := range 40 {
		wg.Go(func() {
			r, err := stores[i%2].Admit(t.Context(), review(fmt.Sprintf("p%d", i), now, now.Add(time.Minute)))
			switch {
			case err != nil:
				t.Errorf("p%d: %v", i, err)
			case r == nil:
				admitted.Add(1)
			case r.Limit == gated.LimitReviewsInFlight && r.Used == 7:
				refused.Add(1)
			default:
				t.Errorf("p%d refused by %s (%d used)", i, r.Limit, r.Used)
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 7 || refused.Load() != 33 {
		t.Fatalf("%d admitted, %d refused, want 7 and 33", admitted.Load(), refused.Load())
	}
	if got := inFlight(t, stores[1], now); got != 7 {
		t.Fatalf("%d reviews in flight, want 7", got)
	}
	for i := range 40 {
		if err := stores[i%2].Release(t.Context(), engine.BudgetRelease{Tenant: "acme", Agent: "bot", ID: fmt.Sprintf("p%d", i), Use: engine.BudgetReview}); err != nil {
			t.Fatal(err)
		}
	}
	if got := inFlight(t, stores[0], now); got != 0 {
		t.Fatalf("%d reviews in flight after every release, want 0", got)
	}
	// One proposal delivered to both at once, several times: one lease.
	// Each delivery counts before it writes the lease, and the ones that
	// lose the lease take their counts back, so meanwhile they count: six
	// stay under the limit of seven. (The engine's review claim keeps two
	// deliveries of a proposal from being admitted at once.)
	for i := range 6 {
		wg.Go(func() { mustAdmit(t, stores[i%2], review("dup", now, now.Add(time.Minute))) })
	}
	wg.Wait()
	if got := inFlight(t, stores[0], now); got != 1 {
		t.Fatalf("one proposal delivered six times holds %d leases, want 1", got)
	}
	if err := stores[1].Release(t.Context(), engine.BudgetRelease{Tenant: "acme", Agent: "bot", ID: "dup", Use: engine.BudgetReview}); err != nil {
		t.Fatal(err)
	}
	if got := inFlight(t, stores[0], now); got != 0 {
		t.Fatalf("%d reviews in flight after its release, want 0", got)
	}
}

// TestCrashBetweenCountAndLeaseOverCounts: a gated that dies after
// counting a review and before writing its lease, or after removing a
// lease and before taking its count off, leaves a count with no lease.
// It counts against the limit (a redelivery counts once more) until the
// end of its slot, and then no more: never one too few.
func TestCrashBetweenCountAndLeaseOverCounts(t *testing.T) {
	s := bustest.Server(t)
	const limits = "tenants: {acme: {agent: {reviews_in_flight: 2}}}"
	st := newStore(t, s, limits)
	kv := openBucket(t, s)
	now := windowStart
	until := now.Add(95 * time.Second)
	mustAdmit(t, st, review("p1", now, until))
	// What the crash leaves: the counts, and no lease.
	if err := kv.Purge(t.Context(), "acme.lease.review.p1"); err != nil {
		t.Fatal(err)
	}
	// The redelivery finds no lease and counts again: the agent is at its
	// limit of two, with one review.
	mustAdmit(t, st, review("p1", now.Add(time.Second), until))
	if got := inFlight(t, st, now.Add(time.Second)); got != 2 {
		t.Fatalf("%d reviews in flight, want 2 (the lost lease's count and the redelivery's)", got)
	}
	r, err := st.Admit(t.Context(), review("p2", now.Add(time.Second), until))
	if err != nil || r == nil || r.Limit != gated.LimitReviewsInFlight {
		t.Fatalf("p2 beside the lost count: %v %v, want refused by reviews_in_flight", r, err)
	}
	if want := now.Add(100 * time.Second); !r.ResetsAt.Equal(want) {
		t.Fatalf("the limit resets at %s, want the end of the lease's slot %s", r.ResetsAt, want)
	}
	// The redelivery releases its own lease; the lost count stays until
	// its slot ends.
	if err := st.Release(t.Context(), engine.BudgetRelease{Tenant: "acme", Agent: "bot", ID: "p1", Use: engine.BudgetReview}); err != nil {
		t.Fatal(err)
	}
	if got := inFlight(t, st, now.Add(99*time.Second)); got != 1 {
		t.Fatalf("%d reviews in flight before the slot ends, want the lost one", got)
	}
	if got := inFlight(t, st, now.Add(100*time.Second)); got != 0 {
		t.Fatalf("%d reviews in flight once the slot ended, want 0", got)
	}
	mustAdmit(t, st, review("p2", now.Add(100*time.Second), now.Add(200*time.Second)))
}

// TestRecordOfTheFirstVersion: a record of version 1 (leases by proposal
// id, refusals one by one) is read and converted: its leases count until
// their end (they have no lease key, so a release takes nothing off) and
// its refusals in their window; the next change writes the current
// version. A record of an unknown version is refused by name until `gated
// budgets reset` removes it, leases included.
func TestRecordOfTheFirstVersion(t *testing.T) {
	now := windowStart
	end := now.Add(60 * time.Second).UnixMilli()
	legacy := func(scope string) string {
		return fmt.Sprintf(`{"v":1,"scope":%q,"windows":{"proposals":{"start":%d,"interval_s":60,"n":2}},"reviews":{"old1":%d,"old2":%d},"refusals":[{"at":%d},{"at":%d,"budget":true}]}`,
			scope, now.UnixMilli(), end, end, now.UnixMilli()-1000, now.UnixMilli())
	}
	for _, tc := range []struct {
		note    string
		agent   string
		tenant  string
		corrupt bool
	}{
		{note: "version 1 is read", agent: legacy("acme/bot"), tenant: legacy("acme")},
		{note: "version 3 is refused", agent: `{"v":3,"scope":"acme/bot"}`, tenant: legacy("acme"), corrupt: true},
	} {
		t.Run(tc.note, func(t *testing.T) {
			s := bustest.Server(t)
			st := newStore(t, s, "tenants: {acme: {agent: {reviews_in_flight: 3}}}")
			kv := openBucket(t, s)
			for key, v := range map[string]string{"acme.agent.bot": tc.agent, "acme.tenant": tc.tenant} {
				if _, err := kv.Put(t.Context(), key, []byte(v)); err != nil {
					t.Fatal(err)
				}
			}
			got, err := st.State(t.Context(), "acme", "bot", now)
			if tc.corrupt {
				if !errors.Is(err, budget.ErrCorruptCounters) || !strings.Contains(err.Error(), "version 3") {
					t.Fatalf("reading a version 3 record: %v, want ErrCorruptCounters naming the version", err)
				}
				if _, err := st.Admit(t.Context(), review("p1", now, now.Add(time.Minute))); !errors.Is(err, budget.ErrCorruptCounters) {
					t.Fatalf("admitting beside a version 3 record: %v, want ErrCorruptCounters", err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				want := gated.BudgetCounters{Proposals: 2, ReviewsInFlight: 2, Refusals: 2, BudgetRefusals: 1}
				if got.Agent != want || got.Tenant != want {
					t.Fatalf("counters of version 1 records: agent %+v, tenant %+v, want %+v", got.Agent, got.Tenant, want)
				}
				mustAdmit(t, st, review("p1", now, now.Add(2*time.Minute)))
				if r, err := st.Admit(t.Context(), review("p2", now, now.Add(time.Minute))); err != nil || r == nil {
					t.Fatalf("p2 beside 3 leases: %v %v, want refused", r, err)
				}
				if err := st.Release(t.Context(), engine.BudgetRelease{Tenant: "acme", Agent: "bot", ID: "old1", Use: engine.BudgetReview}); err != nil {
					t.Fatal(err)
				}
				if n := inFlight(t, st, now); n != 3 {
					t.Fatalf("%d reviews in flight after releasing a version 1 lease, want 3 (it counts until its end)", n)
				}
				if n := inFlight(t, st, now.Add(60*time.Second)); n != 1 {
					t.Fatalf("%d reviews in flight once the version 1 leases ended, want 1", n)
				}
				e, err := kv.Get(t.Context(), "acme.agent.bot")
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(string(e.Value()), `{"v":2,`) {
					t.Fatalf("the record after a change is %s, want version 2", e.Value())
				}
			}
			n, err := st.Reset(t.Context(), "acme")
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{false: 3, true: 2}[tc.corrupt]; n != want {
				t.Fatalf("reset removed %d keys, want %d (records and leases)", n, want)
			}
			if n := inFlight(t, st, now); n != 0 {
				t.Fatalf("%d reviews in flight after a reset", n)
			}
			mustAdmit(t, st, review("p1", now, now.Add(time.Minute)))
			if n := inFlight(t, st, now); n != 1 {
				t.Fatalf("%d reviews in flight after a reset and an admission, want 1", n)
			}
		})
	}
}

// leaseReads is a counter bucket that counts the reads of lease keys.
type leaseReads struct {
	jetstream.KeyValue
	n atomic.Int64
}

func (k *leaseReads) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if strings.Contains(key, ".lease.") {
		k.n.Add(1)
	}
	return k.KeyValue.Get(ctx, key)
}

// countedStore is a store over a bucket that counts lease reads, and
// the events it reports.
func countedStore(t *testing.T, s *server.Server, limits string) (*budget.Store, *leaseReads, func() []budget.Event) {
	t.Helper()
	cfg, kv := openCounters(t, s, limits)
	reads := &leaseReads{KeyValue: kv}
	var mu sync.Mutex
	var events []budget.Event
	st := budget.New(reads, cfg, func(e budget.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})
	return st, reads, func() []budget.Event {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(events)
	}
}

// TestReviewLeaseIsNotReadOnTheWay: a review's admission and release in
// one process write its lease and remove it without reading it, and the
// release counts the review's tokens in the same change. A lease that
// another process moved meanwhile is read, and released as it stands.
func TestReviewLeaseIsNotReadOnTheWay(t *testing.T) {
	s := bustest.Server(t)
	a, reads, _ := countedStore(t, s, unlimited)
	b := newStore(t, s, unlimited)
	now := windowStart
	mustAdmit(t, a, review("p1", now, now.Add(90*time.Second)))
	if got := inFlight(t, a, now); got != 1 {
		t.Fatalf("%d reviews in flight, want 1", got)
	}
	if err := a.Release(t.Context(), engine.BudgetRelease{Tenant: "acme", Agent: "bot", ID: "p1", Use: engine.BudgetReview, Tokens: 70, Now: now}); err != nil {
		t.Fatal(err)
	}
	if n := reads.n.Load(); n != 0 {
		t.Fatalf("an admission and a release read the lease %d times, want none", n)
	}
	st, err := a.State(t.Context(), "acme", "bot", now)
	if err != nil {
		t.Fatal(err)
	}
	if st.Agent.ReviewsInFlight != 0 || st.Tenant.ReviewsInFlight != 0 || st.Agent.Tokens != 70 || st.Tenant.Tokens != 70 {
		t.Fatalf("after the release: agent %+v, tenant %+v; want no review in flight and 70 tokens each", st.Agent, st.Tenant)
	}

	// Redelivered to b, which moves the lease to a later end: a's
	// release finds its revision gone, reads the lease and releases it
	// from the slot it was moved to.
	mustAdmit(t, a, review("p2", now, now.Add(90*time.Second)))
	mustAdmit(t, b, review("p2", now.Add(time.Second), now.Add(3*time.Minute)))
	if err := a.Release(t.Context(), engine.BudgetRelease{Tenant: "acme", Agent: "bot", ID: "p2", Use: engine.BudgetReview, Now: now}); err != nil {
		t.Fatal(err)
	}
	if n := reads.n.Load(); n != 1 {
		t.Fatalf("releasing a moved lease read it %d times, want once", n)
	}
	for _, at := range []time.Time{now, now.Add(2 * time.Minute)} {
		if got := inFlight(t, b, at); got != 0 {
			t.Fatalf("%d reviews in flight at %s after the release of the moved lease, want 0", got, at.Sub(now))
		}
	}
	// A release with no lease still counts its tokens.
	if err := a.Release(t.Context(), engine.BudgetRelease{Tenant: "acme", Agent: "bot", ID: "p9", Use: engine.BudgetReview, Tokens: 5, Now: now}); err != nil {
		t.Fatal(err)
	}
	if st, err = b.State(t.Context(), "acme", "bot", now); err != nil || st.Agent.Tokens != 75 || st.Tenant.Tokens != 75 {
		t.Fatalf("tokens after a release of no lease: agent %d, tenant %d (%v); want 75", st.Agent.Tokens, st.Tenant.Tokens, err)
	}
}

// TestRedeliveryAtItsLimitIsAdmitted: a proposal redelivered while its
// lease is live is admitted again, even though its own lease fills the
// limit, and is reported as admitted, not refused; another proposal is
// refused.
func TestRedeliveryAtItsLimitIsAdmitted(t *testing.T) {
	s := bustest.Server(t)
	st, _, events := countedStore(t, s, "tenants: {acme: {agent: {reviews_in_flight: 1}}}")
	now := windowStart
	mustAdmit(t, st, review("p1", now, now.Add(90*time.Second)))
	mustAdmit(t, st, review("p1", now.Add(time.Second), now.Add(2*time.Minute)))
	if got := inFlight(t, st, now.Add(time.Second)); got != 1 {
		t.Fatalf("%d reviews in flight, want 1", got)
	}
	for _, e := range events() {
		if e.Refused != "" {
			t.Fatalf("the redelivery was reported refused by %s", e.Refused)
		}
	}
	r, err := st.Admit(t.Context(), review("p2", now.Add(time.Second), now.Add(2*time.Minute)))
	if err != nil || r == nil || r.Limit != gated.LimitReviewsInFlight || r.Used != 1 {
		t.Fatalf("p2 beside p1's lease: %v %v, want refused by reviews_in_flight with 1 used", r, err)
	}
	if got := events(); len(got) != 3 || got[2].Refused != gated.LimitReviewsInFlight {
		t.Fatalf("events %+v, want two admissions and a refusal", got)
	}
}

// TestExpiredLeaseCountsAgain: a lease past its end admits nothing: a
// redelivery of its proposal counts like a new one, and is refused at
// the limit.
func TestExpiredLeaseCountsAgain(t *testing.T) {
	s := bustest.Server(t)
	st := newStore(t, s, "tenants: {acme: {agent: {reviews_in_flight: 1}}}")
	now := windowStart
	mustAdmit(t, st, review("p1", now, now.Add(25*time.Second)))
	later := now.Add(2 * time.Minute)
	mustAdmit(t, st, review("p2", later, later.Add(time.Minute)))
	r, err := st.Admit(t.Context(), review("p1", later, later.Add(time.Minute)))
	if err != nil || r == nil || r.Limit != gated.LimitReviewsInFlight {
		t.Fatalf("p1 redelivered after its lease ended, beside p2: %v %v, want refused by reviews_in_flight", r, err)
	}
}
