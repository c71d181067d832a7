package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// w3c is the propagation gated uses between its processes.
var w3c propagation.TraceContext

// mdCarrier adapts gRPC metadata to a TextMapCarrier; gRPC keys are lower
// case, as traceparent and tracestate are.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// UnaryClientInterceptor sends the trace context of the call's ctx in the
// gRPC metadata (traceparent, tracestate), so that the server's spans are
// children of the caller's. Without a valid span context in ctx (tracing
// off) it adds nothing.
func UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if trace.SpanContextFromContext(ctx).IsValid() {
			md, _ := metadata.FromOutgoingContext(ctx)
			md = md.Copy()
			w3c.Inject(ctx, mdCarrier(md))
			ctx = metadata.NewOutgoingContext(ctx, md)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// UnaryServerInterceptor puts the caller's trace context, as
// UnaryClientInterceptor sent it, into the handler's ctx, where Start
// finds it as the remote parent. While tracing is off it does nothing.
func UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if Enabled() {
			if md, ok := metadata.FromIncomingContext(ctx); ok {
				ctx = w3c.Extract(ctx, mdCarrier(md))
			}
		}
		return handler(ctx, req)
	}
}
