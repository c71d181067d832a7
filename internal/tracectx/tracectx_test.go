package tracectx

import (
	"context"
	"regexp"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

// traceparentRE is a traceparent as gated writes one (version 00);
// acceptedRE is what a reader takes, later versions included, as the W3C
// specification asks.
var (
	traceparentRE = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$`)
	acceptedRE    = regexp.MustCompile(`^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}`)
)

func TestInjectAndExtract(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	for _, tc := range []struct {
		note string
		ctx  context.Context
		want string
	}{
		{note: "no span: no header", ctx: context.Background(), want: ""},
		{note: "invalid span context: no header", ctx: trace.ContextWithSpanContext(context.Background(), trace.SpanContext{}), want: ""},
		{note: "a span: its traceparent", ctx: trace.ContextWithSpanContext(context.Background(), sc),
			want: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			h := nats.Header{}
			Inject(tc.ctx, h)
			if got := h.Get(TraceparentHeader); got != tc.want {
				t.Fatalf("traceparent %q, want %q", got, tc.want)
			}
			if tc.want == "" {
				if len(h) != 0 {
					t.Fatalf("headers %v, want none", h)
				}
				return
			}
			got := trace.SpanContextFromContext(Extract(context.Background(), h))
			if !got.IsRemote() || got.TraceID() != tid || got.SpanID() != sid || !got.IsSampled() {
				t.Fatalf("extracted %+v, want the injected span context, remote", got)
			}
		})
	}
}

func TestExtractReadsCanonicalKey(t *testing.T) {
	h := nats.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	if sc := trace.SpanContextFromContext(Extract(context.Background(), h)); !sc.IsValid() {
		t.Fatal("a Traceparent header was not read")
	}
}

// FuzzExtract feeds any header values to Extract: it never panics, and
// it yields a span context only for a well-formed traceparent.
func FuzzExtract(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "k=v")
	f.Add("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "")
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	f.Add("garbage", "=,=")
	f.Fuzz(func(t *testing.T, parent, state string) {
		h := nats.Header{TraceparentHeader: {parent}, TracestateHeader: {state}}
		sc := trace.SpanContextFromContext(Extract(context.Background(), h))
		if sc.IsValid() && !acceptedRE.MatchString(parent) {
			t.Fatalf("traceparent %q yielded %v", parent, sc)
		}
		if sc.IsValid() {
			// What was read re-injects as a well-formed traceparent.
			out := nats.Header{}
			Inject(trace.ContextWithSpanContext(context.Background(), sc), out)
			if !traceparentRE.MatchString(out.Get(TraceparentHeader)) {
				t.Fatalf("re-injected %q from %q", out.Get(TraceparentHeader), parent)
			}
		}
	})
}
