package telemetry

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		note    string
		env     map[string]string
		want    Config
		wantErr string
	}{
		{note: "nothing set: off", env: nil, want: Config{}},
		{note: "endpoint: on over http/protobuf", env: map[string]string{envEndpoint: "http://collector:4318"},
			want: Config{Enabled: true, Protocol: ProtocolHTTP}},
		{note: "traces endpoint with grpc", env: map[string]string{envTracesEndpoint: "http://c:4317", envProtocol: "grpc"},
			want: Config{Enabled: true, Protocol: ProtocolGRPC}},
		{note: "traces protocol wins", env: map[string]string{envEndpoint: "x", envProtocol: "grpc", envTracesProtocol: "http/protobuf"},
			want: Config{Enabled: true, Protocol: ProtocolHTTP}},
		{note: "exporter otlp alone: on, default endpoint", env: map[string]string{envTracesExporter: "otlp"},
			want: Config{Enabled: true, Protocol: ProtocolHTTP}},
		{note: "exporter none wins over an endpoint", env: map[string]string{envTracesExporter: "none", envEndpoint: "x"}, want: Config{}},
		{note: "sdk disabled wins", env: map[string]string{envSDKDisabled: "TRUE", envEndpoint: "x"}, want: Config{}},
		{note: "sdk disabled false", env: map[string]string{envSDKDisabled: "false", envEndpoint: "x"},
			want: Config{Enabled: true, Protocol: ProtocolHTTP}},
		{note: "protocol alone does not turn it on", env: map[string]string{envProtocol: "grpc"}, want: Config{}},
		{note: "bad sdk disabled", env: map[string]string{envSDKDisabled: "yes"}, wantErr: "OTEL_SDK_DISABLED"},
		{note: "unsupported exporter", env: map[string]string{envTracesExporter: "zipkin"}, wantErr: "OTEL_TRACES_EXPORTER"},
		{note: "unsupported protocol", env: map[string]string{envEndpoint: "x", envTracesProtocol: "http/json"}, wantErr: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{note: "bad protocol while off is still an error", env: map[string]string{envProtocol: "udp"}, wantErr: "OTEL_EXPORTER_OTLP_PROTOCOL"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			got, err := ParseConfig(lookupIn(tc.env))
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrInvalidConfig naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// FuzzParseConfig holds ParseConfig to its contract on any values: an
// error wraps ErrInvalidConfig and names a variable; a config that is on
// has a protocol gated speaks, one that is off has none.
func FuzzParseConfig(f *testing.F) {
	f.Add("", "", "", "", "")
	f.Add("false", "otlp", "http://c:4317", "grpc", "")
	f.Add("true", "none", "", "", "http/json")
	f.Fuzz(func(t *testing.T, disabled, exporter, endpoint, protocol, tracesProtocol string) {
		env := map[string]string{}
		for k, v := range map[string]string{envSDKDisabled: disabled, envTracesExporter: exporter, envEndpoint: endpoint,
			envProtocol: protocol, envTracesProtocol: tracesProtocol} {
			if v != "" {
				env[k] = v
			}
		}
		c, err := ParseConfig(lookupIn(env))
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "OTEL_") {
				t.Fatalf("error %v does not wrap ErrInvalidConfig or name a variable", err)
			}
			return
		}
		switch {
		case c.Enabled && c.Protocol != ProtocolGRPC && c.Protocol != ProtocolHTTP:
			t.Fatalf("on with protocol %q", c.Protocol)
		case !c.Enabled && c.Protocol != "":
			t.Fatalf("off with protocol %q", c.Protocol)
		}
	})
}

// TestStartWhileOffAllocatesNothing is the promise the hot path relies
// on: with no provider installed, a span costs no allocation.
func TestStartWhileOffAllocatesNothing(t *testing.T) {
	if Enabled() {
		t.Fatal("tracing is on before any Setup")
	}
	ctx := t.Context()
	allocs := testing.AllocsPerRun(1000, func() {
		c, s := Start(ctx, SpanProposal, KindConsumer)
		s.String(AttrTenant, "acme")
		s.Int(AttrDelivery, 1)
		s.End(nil)
		_ = c
	})
	if allocs != 0 {
		t.Fatalf("Start/End while off: %.1f allocations, want 0", allocs)
	}
}

// TestSetupWithNothingSetStaysOff checks that Setup with no OTEL_*
// variable installs nothing, and that a variable gated cannot follow is
// an error naming it.
func TestSetupWithNothingSetStaysOff(t *testing.T) {
	shutdown, err := Setup(context.Background(), "gated", lookupIn(nil))
	if err != nil {
		t.Fatal(err)
	}
	if Enabled() {
		t.Fatal("tracing is on with no OTEL_* variable set")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := Setup(context.Background(), "gated", lookupIn(map[string]string{envTracesExporter: "jaeger"})); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Setup with OTEL_TRACES_EXPORTER=jaeger: %v, want ErrInvalidConfig", err)
	}
}

// TestSetupOnAndShutdownOff checks that an endpoint turns tracing on, and
// that shutdown turns it off again.
func TestSetupOnAndShutdownOff(t *testing.T) {
	shutdown, err := Setup(context.Background(), "gated", lookupIn(map[string]string{envEndpoint: "http://127.0.0.1:1", envProtocol: "grpc"}))
	if err != nil {
		t.Fatal(err)
	}
	if !Enabled() {
		t.Fatal("tracing is off with OTEL_EXPORTER_OTLP_ENDPOINT set")
	}
	ctx, span := Start(context.Background(), SpanProposal, KindConsumer)
	if !span.Recording() {
		t.Fatal("a span started while on does not record")
	}
	_, child := Start(ctx, SpanDecode, KindInternal)
	child.End(nil)
	span.End(errors.New("boom"))
	sctx, cancel := context.WithTimeout(context.Background(), 0)
	cancel()
	_ = shutdown(sctx) // nothing listens at the endpoint: the flush may fail
	if Enabled() {
		t.Fatal("tracing is still on after shutdown")
	}
}

// BenchmarkSpanWhileOff is what a stage pays for its span while tracing
// is off: one atomic load, no allocation.
func BenchmarkSpanWhileOff(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c, s := Start(ctx, SpanDecode, KindInternal)
		s.End(nil)
		_ = c
	}
}
