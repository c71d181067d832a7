package telemetry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/telemetry"
)

// TestStoreAnswersAsTheStoreDoes checks that tracing the verdict store
// changes none of its answers, tracing on or off: a verdict not stored is
// ErrNotFound, a second Create is ErrExists with the first verdict, and
// with tracing on each call has its span, a not-found look-up and the
// refused second Create not marked failed.
func TestStoreAnswersAsTheStoreDoes(t *testing.T) {
	for _, tc := range []struct {
		note   string
		traced bool
	}{{"tracing off", false}, {"tracing on", true}} {
		t.Run(tc.note, func(t *testing.T) {
			var exp *tracetest.InMemoryExporter
			if tc.traced {
				exp = tracetest.NewInMemoryExporter()
				tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
				t.Cleanup(telemetry.Install(tp))
			}
			s := natstest.Server(t)
			_, js := natstest.Connect(t, s)
			res, err := bus.Setup(t.Context(), js, bus.Config{})
			if err != nil {
				t.Fatal(err)
			}
			st := telemetry.Store(store.New(res.Verdicts), nil)
			ctx := t.Context()
			if v, err := st.Get(ctx, "acme", "p-1"); v != nil || !errors.Is(err, gated.ErrNotFound) {
				t.Fatalf("Get of a verdict not stored: %v, %v; want ErrNotFound", v, err)
			}
			v := &gated.Verdict{V: gated.SchemaVersion, ProposalID: "p-1", Tenant: "acme", Action: "host_restart_service", Kind: gated.KindAction,
				Outcome: gated.OutcomeRejected, Stage: gated.StagePolicy, Reason: "no", DecidedAt: time.Now().UTC(), AuditSeq: 7,
				ProposalSHA256: "0000000000000000000000000000000000000000000000000000000000000000"}
			if _, err := st.Create(ctx, v); err != nil {
				t.Fatal(err)
			}
			second := *v
			second.AuditSeq = 8
			if got, err := st.Create(ctx, &second); !errors.Is(err, gated.ErrExists) || got == nil || got.AuditSeq != 7 {
				t.Fatalf("second Create: %+v, %v; want ErrExists and the first verdict", got, err)
			}
			if got, err := st.Get(ctx, "acme", "p-1"); err != nil || got.AuditSeq != 7 {
				t.Fatalf("Get: %+v, %v", got, err)
			}
			if !tc.traced {
				return
			}
			spans := exp.GetSpans()
			count := map[string]int{}
			for _, sp := range spans {
				count[sp.Name]++
				if sp.Status.Code != 0 && sp.Status.Code.String() == "Error" {
					t.Errorf("span %s marked failed: %s", sp.Name, sp.Status.Description)
				}
			}
			if count[telemetry.SpanStoreLookup] != 2 || count[telemetry.SpanStore] != 2 {
				t.Errorf("spans %v, want 2 look-ups and 2 creates", count)
			}
		})
	}
}

// TestPolicyAndStageWhileOffAllocateNothing holds the traced policy and
// stage hooks to the promise of Start: nothing allocated while off.
func TestPolicyAndStageWhileOffAllocateNothing(t *testing.T) {
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		telemetry.Stage(ctx, engine.TraceDecode)(nil)
	})
	if allocs != 0 {
		t.Fatalf("Stage while off: %.1f allocations, want 0", allocs)
	}
}

// failingPolicy answers every evaluation with err.
type failingPolicy struct{ err error }

func (p failingPolicy) Evaluate(context.Context, engine.PolicyInput) (engine.PolicyDecision, error) {
	return engine.PolicyDecision{}, p.err
}
func (failingPolicy) Revision() string { return "r" }

// TestPolicySpanOfARefusalForTheBudget: the policy's refusal of an input
// without the budget counters, which the engine answers by reading them
// and asking again, leaves a span marked budget_unread, not a failed one;
// any other error still fails its span. The error reaches the engine
// either way.
func TestPolicySpanOfARefusalForTheBudget(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	t.Cleanup(telemetry.Install(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))))
	broken := errors.New("rego: undefined function")
	for _, tc := range []struct {
		err    error
		failed bool
	}{{engine.ErrBudgetUnread, false}, {broken, true}} {
		exp.Reset()
		if _, err := telemetry.Policy(failingPolicy{tc.err}).Evaluate(t.Context(), engine.PolicyInput{}); !errors.Is(err, tc.err) {
			t.Fatalf("Evaluate: %v, want %v", err, tc.err)
		}
		spans := exp.GetSpans()
		if len(spans) != 1 || spans[0].Name != telemetry.SpanPolicy {
			t.Fatalf("spans %v, want one %s", spans, telemetry.SpanPolicy)
		}
		sp := spans[0]
		if failed := sp.Status.Code.String() == "Error"; failed != tc.failed {
			t.Errorf("%v: span failed %v, want %v", tc.err, failed, tc.failed)
		}
		marked := false
		for _, a := range sp.Attributes {
			marked = marked || (string(a.Key) == telemetry.AttrBudgetUnread && a.Value.AsBool())
		}
		if marked == tc.failed {
			t.Errorf("%v: span marked %s %v, want %v", tc.err, telemetry.AttrBudgetUnread, marked, !tc.failed)
		}
	}
}
