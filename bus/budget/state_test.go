package budget_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/gated/gated"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus/budget"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine"
)

// newStore is a budget store on its own connection to s, as one gated
// process has.
func newStore(t *testing.T, s *server.Server, limits string) *budget.Store {
	t.Helper()
	cfg, kv := openCounters(t, s, limits)
	return budget.New(kv, cfg, nil)
}

// openCounters parses limits and opens the counter bucket on a
// connection of its own.
func openCounters(t *testing.T, s *server.Server, limits string) (*budget.Config, jetstream.KeyValue) {
	t.Helper()
	cfg, err := budget.ParseConfig("budgets.yaml", []byte(limits))
	if err != nil {
		t.Fatal(err)
	}
	_, js := bustest.Connect(t, s)
	kv, err := budget.Setup(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, kv
}

func admitReviews(t *testing.T, st *budget.Store, from, to int, now time.Time) {
	t.Helper()
	for i := from; i < to; i++ {
		r, err := st.Admit(t.Context(), engine.BudgetRequest{Tenant: "acme", Agent: "bot",
			ID: "p-" + strconv.Itoa(i), Use: engine.BudgetReview, Now: now, Until: now.Add(time.Hour)})
		if err != nil || r != nil {
			t.Fatalf("admitting review %d: %v %v", i, r, err)
		}
	}
}

// Every proposal reads its tenant's and agent's counters for the policy,
// and each review in flight holds a lease in both records. Reading them
// must not cost allocations in proportion to the reviews in flight when
// the records are the ones this process wrote last: a proposal beside
// 2,000 reviews decoded two 80 KB records, 8,000 allocations, and paid
// for it in latency and in the collector's work.
func TestStateBesideManyReviewsDecodesNothingNew(t *testing.T) {
	s := bustest.Server(t)
	st := newStore(t, s, unlimited)
	now := time.Now()
	state := func() gated.BudgetState {
		got, err := st.State(t.Context(), "acme", "bot", now)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	admitReviews(t, st, 0, 1, now)
	state()
	few := testing.AllocsPerRun(20, func() { state() })
	admitReviews(t, st, 1, 2000, now)
	if got := state(); got.Tenant.ReviewsInFlight != 2000 || got.Agent.ReviewsInFlight != 2000 {
		t.Fatalf("reviews in flight: tenant %d, agent %d, want 2000 each", got.Tenant.ReviewsInFlight, got.Agent.ReviewsInFlight)
	}
	many := testing.AllocsPerRun(20, func() { state() })
	if many > 2*few+50 {
		t.Fatalf("reading the counters beside 2000 reviews in flight took %.0f allocations, beside one %.0f", many, few)
	}
}

// A record another process wrote is read afresh, never answered from the
// copy this process kept of its own last write.
func TestStateSeesAnotherProcesssWrites(t *testing.T) {
	s := bustest.Server(t)
	a, b := newStore(t, s, unlimited), newStore(t, s, unlimited)
	now := time.Now()
	for _, step := range []struct {
		note  string
		by    *budget.Store
		from  int
		to    int
		total int64
	}{
		{note: "a admits", by: a, from: 0, to: 3, total: 3},
		{note: "b admits", by: b, from: 3, to: 5, total: 5},
		{note: "a admits again", by: a, from: 5, to: 6, total: 6},
	} {
		t.Run(step.note, func(t *testing.T) {
			admitReviews(t, step.by, step.from, step.to, now)
			for name, st := range map[string]*budget.Store{"a": a, "b": b} {
				got, err := st.State(t.Context(), "acme", "bot", now)
				if err != nil {
					t.Fatal(err)
				}
				if got.Tenant.ReviewsInFlight != step.total || got.Agent.ReviewsInFlight != step.total {
					t.Errorf("%s reads tenant %d, agent %d reviews in flight, want %d", name, got.Tenant.ReviewsInFlight, got.Agent.ReviewsInFlight, step.total)
				}
			}
		})
	}
	if err := a.Release(t.Context(), engine.BudgetRelease{Tenant: "acme", Agent: "bot", ID: "p-4", Use: engine.BudgetReview}); err != nil {
		t.Fatal(err)
	}
	got, err := b.State(t.Context(), "acme", "bot", now)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tenant.ReviewsInFlight != 5 {
		t.Fatalf("after a released b's lease, b reads %d reviews in flight, want 5", got.Tenant.ReviewsInFlight)
	}
}

// A scope's record must not grow with the reviews in flight nor with the
// refusals it remembers: every change of it is a compare-and-set of the
// whole record, so its size is the cost of every admission, release and
// refusal of the scope. Beside 2,000 reviews in flight the record was
// about 80 KB, and a flood of refusals added a thousand entries more.
func TestRecordSizeDoesNotGrowWithLeasesOrRefusals(t *testing.T) {
	const maxRecord = 4096
	s := bustest.Server(t)
	st := newStore(t, s, unlimited)
	_, js := bustest.Connect(t, s)
	kv, err := js.KeyValue(t.Context(), budget.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	admitReviews(t, st, 0, 2000, now)
	for i := range 1000 {
		if err := st.Refused(t.Context(), "acme", "bot", engine.RefusedBudget, now.Add(time.Duration(i)*500*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	later := now.Add(500 * time.Second)
	got, err := st.State(t.Context(), "acme", "bot", later)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tenant.ReviewsInFlight != 2000 || got.Agent.ReviewsInFlight != 2000 {
		t.Fatalf("reviews in flight: tenant %d, agent %d, want 2000 each", got.Tenant.ReviewsInFlight, got.Agent.ReviewsInFlight)
	}
	if got.Agent.Refusals != 1000 || got.Agent.BudgetRefusals != 1000 {
		t.Fatalf("refusals: %d (%d by budget), want 1000", got.Agent.Refusals, got.Agent.BudgetRefusals)
	}
	for _, key := range []string{"acme.tenant", "acme.agent.bot"} {
		e, err := kv.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(e.Value()); n > maxRecord {
			t.Errorf("record %s is %d bytes beside 2000 reviews in flight and 1000 refusals, want at most %d", key, n, maxRecord)
		}
	}
}
