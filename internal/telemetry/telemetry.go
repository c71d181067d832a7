// Package telemetry is gated's OpenTelemetry tracing: it installs a tracer
// provider exporting over OTLP when the standard OTEL_* variables ask for
// one, starts spans for the stages of a decision, and carries trace
// context over gRPC to reviewer plugins.
//
// With tracing off (no OTEL_* variable set) no provider is installed,
// Enabled is false, and Start returns its context and a Span that does
// nothing, without allocating: the hot path pays one atomic load.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// InstrumentationName names gated's tracer.
const InstrumentationName = "github.com/gated/gated"

// tracer is nil while tracing is off.
var tracer atomic.Pointer[trace.Tracer]

// Enabled tells whether spans are recorded and exported.
func Enabled() bool { return tracer.Load() != nil }

// Setup installs gated's tracer provider when the OTEL_* variables, read
// through lookup, ask for traces (see ParseConfig); service is the default
// service.name (OTEL_SERVICE_NAME overrides it). The OTLP exporter and the
// SDK read the rest of their variables (endpoint, headers, TLS, sampler,
// batching, resource) from the process's environment themselves, so
// lookup is os.LookupEnv but in tests of ParseConfig's decisions. It returns a shutdown function that
// flushes the spans still buffered and turns tracing off again; with
// tracing off, shutdown does nothing. An error is a variable gated cannot
// follow, or an exporter that cannot be built.
func Setup(ctx context.Context, service string, lookup func(string) (string, bool)) (shutdown func(context.Context) error, err error) {
	cfg, err := ParseConfig(lookup)
	if err != nil {
		return nil, err
	}
	if !cfg.Enabled {
		return func(context.Context) error { return nil }, nil
	}
	var client otlptrace.Client
	switch cfg.Protocol {
	case ProtocolGRPC:
		client = otlptracegrpc.NewClient()
	default:
		client = otlptracehttp.NewClient()
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("starting the OTLP trace exporter (%s): %w", cfg.Protocol, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("reading the trace resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %w", err)
	}
	// The sampler and the batch processor read OTEL_TRACES_SAMPLER and
	// OTEL_BSP_* themselves.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t := tp.Tracer(InstrumentationName)
	tracer.Store(&t)
	// Installed globally too, so that a plugin's own OpenTelemetry code
	// (otel.Tracer) exports through it.
	otel.SetTracerProvider(tp)
	return func(ctx context.Context) error {
		if tracer.CompareAndSwap(&t, nil) {
			otel.SetTracerProvider(noop.NewTracerProvider())
		}
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("flushing traces: %w", err)
		}
		return nil
	}, nil
}

// Install makes tp gated's tracer provider, as Setup does with the one it
// builds, for tests and for programs that build their own; restore puts
// back what was installed before (tracing off, if nothing was).
func Install(tp trace.TracerProvider) (restore func()) {
	t := tp.Tracer(InstrumentationName)
	prev := tracer.Swap(&t)
	return func() { tracer.CompareAndSwap(&t, prev) }
}

// Span is one stage's span. Its zero value, what Start returns while
// tracing is off, does nothing.
type Span struct{ s trace.Span }

// Start starts a span named name, a child of ctx's span (local, or remote
// as Extract or a trace header put it there). While tracing is off it
// returns ctx and the zero Span, and allocates nothing.
func Start(ctx context.Context, name string, kind trace.SpanKind) (context.Context, Span) {
	t := tracer.Load()
	if t == nil {
		return ctx, Span{}
	}
	ctx, s := (*t).Start(ctx, name, trace.WithSpanKind(kind))
	return ctx, Span{s: s}
}

// Recording tells whether the span records: only then are attributes
// worth computing.
func (s Span) Recording() bool { return s.s != nil && s.s.IsRecording() }

// String sets a string attribute. Only ids, tenant, action, outcome and
// names of gated's own parts go in attributes: never a proposal's payload
// or a secret.
func (s Span) String(key, value string) {
	if s.s != nil {
		s.s.SetAttributes(attribute.String(key, value))
	}
}

// Int sets an integer attribute.
func (s Span) Int(key string, value int64) {
	if s.s != nil {
		s.s.SetAttributes(attribute.Int64(key, value))
	}
}

// Bool sets a boolean attribute.
func (s Span) Bool(key string, value bool) {
	if s.s != nil {
		s.s.SetAttributes(attribute.Bool(key, value))
	}
}

// End ends the span; a non-nil err marks it failed, with err's message as
// the status description.
func (s Span) End(err error) {
	if s.s == nil {
		return
	}
	if err != nil {
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}

// Span kinds, re-exported so that callers need not import the trace API.
const (
	KindInternal = trace.SpanKindInternal
	KindServer   = trace.SpanKindServer
	KindClient   = trace.SpanKindClient
	KindConsumer = trace.SpanKindConsumer
	KindProducer = trace.SpanKindProducer
)
