package telemetry

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidConfig is wrapped by every error about an OTEL_* variable that
// gated cannot follow.
var ErrInvalidConfig = errors.New("invalid OpenTelemetry configuration")

// Protocols an OTLP trace exporter speaks.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Config is what the standard OTEL_* variables ask of gated's traces.
type Config struct {
	// Enabled is true when traces are exported: an OTLP endpoint or
	// OTEL_TRACES_EXPORTER=otlp is set, OTEL_TRACES_EXPORTER is not none
	// and OTEL_SDK_DISABLED is not true.
	Enabled bool
	// Protocol is ProtocolGRPC or ProtocolHTTP (the default, as the
	// OpenTelemetry specification has it).
	Protocol string
}

// The variables ParseConfig reads. The OTLP exporters read the rest
// (endpoint, headers, TLS, timeout, compression) themselves; the SDK reads
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and
// OTEL_BSP_*.
const (
	envSDKDisabled    = "OTEL_SDK_DISABLED"
	envTracesExporter = "OTEL_TRACES_EXPORTER"
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
)

// ParseConfig reads the OTEL_* variables through lookup (os.LookupEnv in
// gated). With none of them set, tracing is off: no tracer provider is
// installed and spans cost nothing. An error names the variable and the
// values it takes.
func ParseConfig(lookup func(string) (string, bool)) (Config, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	var c Config
	switch d := strings.ToLower(get(envSDKDisabled)); d {
	case "", "false":
	case "true":
		return c, nil
	default:
		return c, fmt.Errorf("%w: %s=%q: want true or false", ErrInvalidConfig, envSDKDisabled, d)
	}
	exporter := strings.ToLower(get(envTracesExporter))
	switch exporter {
	case "none":
		return c, nil
	case "", "otlp":
	default:
		return c, fmt.Errorf("%w: %s=%q: gated exports traces over otlp only (or none)", ErrInvalidConfig, envTracesExporter, exporter)
	}
	c.Enabled = exporter == "otlp" || get(envEndpoint) != "" || get(envTracesEndpoint) != ""
	protoVar, proto := envTracesProtocol, get(envTracesProtocol)
	if proto == "" {
		protoVar, proto = envProtocol, get(envProtocol)
	}
	switch proto {
	case "":
		c.Protocol = ProtocolHTTP
	case ProtocolGRPC, ProtocolHTTP:
		c.Protocol = proto
	default:
		return Config{}, fmt.Errorf("%w: %s=%q: want %s or %s", ErrInvalidConfig, protoVar, proto, ProtocolGRPC, ProtocolHTTP)
	}
	if !c.Enabled {
		c.Protocol = ""
	}
	return c, nil
}
