// Package tracectx carries W3C trace context (the traceparent and
// tracestate headers) in NATS message headers. It depends only on the
// OpenTelemetry API, so fleets may use it without building gated's
// server side or an OpenTelemetry SDK.
package tracectx

import (
	"context"
	"net/textproto"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The W3C trace context headers, spelled as the W3C specification and
// every OpenTelemetry propagator spell them. NATS headers are case
// sensitive: these are the keys a message carries.
const (
	TraceparentHeader = "traceparent"
	TracestateHeader  = "tracestate"
)

// w3c is the only propagation gated speaks on the bus.
var w3c propagation.TraceContext

// Header adapts a NATS header to OpenTelemetry's TextMapCarrier. Set
// writes the key as given; Get reads it as given or in the canonical MIME
// form (Traceparent), which some clients write.
type Header nats.Header

var _ propagation.TextMapCarrier = Header(nil)

// Get returns the first value of key.
func (h Header) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	if v := h[textproto.CanonicalMIMEHeaderKey(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key with value.
func (h Header) Set(key, value string) { h[key] = []string{value} }

// Keys lists the header's keys.
func (h Header) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// Inject writes the trace context of ctx's span into h, when ctx has a
// valid span context; otherwise h is left as it is. h must not be nil
// when ctx has one.
func Inject(ctx context.Context, h nats.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	w3c.Inject(ctx, Header(h))
}

// Extract returns ctx with the remote span context h carries, or ctx
// itself when h carries none or a malformed one (which is ignored, as the
// W3C specification asks).
func Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	if (Header(h)).Get(TraceparentHeader) == "" {
		return ctx
	}
	return w3c.Extract(ctx, Header(h))
}
