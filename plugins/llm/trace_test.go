package llm_test

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/gated/gated/internal/telemetry"
	"github.com/gated/gated/plugins/sdk"
)

// TestModelCallsAreTraced runs a review of two model calls (a tool call,
// then the answer) with tracing on: each call has a span, a child of the
// review's context, naming the model and the turn, and no span carries
// the proposal's reason or the model's text.
func TestModelCallsAreTraced(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	restore := telemetry.Install(tp)
	defer restore()

	const kind = "openai"
	const reason = "nginx is wedged: trace-must-not-carry-this"
	p := newProvider(t, kind,
		toolTurn(kind, usage{10, 5}, toolCall{id: "c1", name: sdk.ToolGetVerdictHistory, args: `{}`}),
		textTurn(kind, rejection, usage{20, 10}))
	ctx, parent := tp.Tracer("test").Start(t.Context(), "parent")
	res, err := reviewerFor(kind, p).Review(ctx, newRequest(kind, reason, newFakeTools()))
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	if res.Turns != 2 {
		t.Fatalf("%d turns, want 2", res.Turns)
	}
	var calls []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == telemetry.SpanLLMCall {
			calls = append(calls, s)
		}
		for _, a := range s.Attributes {
			if v := a.Value.Emit(); strings.Contains(v, "trace-must-not-carry-this") || strings.Contains(v, "Decision:") {
				t.Errorf("span %s attribute %s carries the proposal or the answer: %q", s.Name, a.Key, v)
			}
		}
	}
	if len(calls) != 2 {
		t.Fatalf("%d %s spans, want one per model call (2)", len(calls), telemetry.SpanLLMCall)
	}
	for i, c := range calls {
		if c.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("call %d's parent is %s, want the review's span %s", i+1, c.Parent.SpanID(), parent.SpanContext().SpanID())
		}
		attrs := map[string]string{}
		for _, a := range c.Attributes {
			attrs[string(a.Key)] = a.Value.Emit()
		}
		if attrs[telemetry.AttrModel] != modelFor(kind) || attrs[telemetry.AttrTurn] != []string{"1", "2"}[i] {
			t.Errorf("call %d attributes %v, want model %s and turn %d", i+1, attrs, modelFor(kind), i+1)
		}
	}
}
