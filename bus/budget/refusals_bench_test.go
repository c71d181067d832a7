package budget_test

import (
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/gated/gated/bus/budget"
	"github.com/gated/gated/engine"
)

// BenchmarkRefusal measures what counting one refusal costs its caller,
// one caller at a time (no batching of concurrent changes).
func BenchmarkRefusal(b *testing.B) {
	s := natstest.Server(b)
	_, js := natstest.Connect(b, s)
	kv, err := budget.Setup(b.Context(), js, 1)
	if err != nil {
		b.Fatal(err)
	}
	st := budget.New(kv, nil, nil)
	b.ReportAllocs()
	for b.Loop() {
		if err := st.Refused(b.Context(), "bench", "bench-agent", engine.RefusedRejected, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}
