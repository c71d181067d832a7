package budget_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/gated/gated/bus/budget"
	"github.com/gated/gated/engine"
)

// unlimited lifts every limit, as gated-bench does for its tenant: every
// count and lease is still kept.
const unlimited = `defaults:
  tenant: {proposals: unlimited, reads: unlimited, tokens: unlimited, reviews_in_flight: unlimited, holds_pending: unlimited}
  agent: {proposals: unlimited, reads: unlimited, tokens: unlimited, reviews_in_flight: unlimited, holds_pending: unlimited}
`

// BenchmarkBudgetsBesideReviews measures what every proposal pays the
// budget store (the counters read for the policy, State, and a read's
// admission) while a tenant's agent has 0 or 2,000 reviews in flight:
// each review counts in the agent's and the tenant's records and holds a
// lease key of its own. Reported besides time and
// allocations: record-B, the size of the tenant's record. A review's
// admission and release beside them is measured too: the cost of one
// change must not grow with the leases.
func BenchmarkBudgetsBesideReviews(b *testing.B) {
	for _, held := range []int{0, 2000} {
		b.Run("in-flight="+strconv.Itoa(held), func(b *testing.B) {
			cfg, err := budget.ParseConfig("budgets.yaml", []byte(unlimited))
			if err != nil {
				b.Fatal(err)
			}
			s := natstest.Server(b)
			_, js := natstest.Connect(b, s)
			kv, err := budget.Setup(b.Context(), js, 1)
			if err != nil {
				b.Fatal(err)
			}
			st := budget.New(kv, cfg, nil)
			now := time.Now()
			for i := range held {
				r, err := st.Admit(b.Context(), engine.BudgetRequest{Tenant: "bench", Agent: "bench-agent",
					ID: "b6770e5738835p-llm-" + strconv.Itoa(i), Use: engine.BudgetReview, Now: now, Until: now.Add(time.Hour)})
				if err != nil || r != nil {
					b.Fatalf("admitting review %d: %v %v", i, r, err)
				}
			}
			size := 0
			if e, err := kv.Get(b.Context(), "bench.tenant"); err == nil {
				size = len(e.Value())
			}
			b.Run("state", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := st.State(b.Context(), "bench", "bench-agent", now); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(size), "record-B")
			})
			b.Run("admit-read", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					r, err := st.Admit(b.Context(), engine.BudgetRequest{Tenant: "bench", Agent: "bench-agent", ID: "r", Use: engine.BudgetRead, Now: now})
					if err != nil || r != nil {
						b.Fatal(r, err)
					}
				}
				b.ReportMetric(float64(size), "record-B")
			})
			b.Run("review-admit-release", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					r, err := st.Admit(b.Context(), engine.BudgetRequest{Tenant: "bench", Agent: "bench-agent", ID: "one-more",
						Use: engine.BudgetReview, Now: now, Until: now.Add(time.Hour)})
					if err != nil || r != nil {
						b.Fatal(r, err)
					}
					if err := st.Release(b.Context(), engine.BudgetRelease{Tenant: "bench", Agent: "bench-agent", ID: "one-more",
						Use: engine.BudgetReview, Tokens: 1200, Now: now}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(size), "record-B")
			})
		})
	}
}
