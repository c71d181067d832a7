package plugins

import (
	"slices"
	"testing"
)

// TestOtelEnvPassesOnlyWhatPluginsMayHave checks which of the host's
// variables a plugin inherits for tracing: the OTEL_* ones, but not the
// exporter headers (a collector's credentials) nor the service name, and
// nothing else of the host's.
func TestOtelEnvPassesOnlyWhatPluginsMayHave(t *testing.T) {
	environ := []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4317",
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_TRACES_SAMPLER=parentbased_traceidratio",
		"OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer s3cret",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS=x-api-key=s3cret",
		"OTEL_SERVICE_NAME=gated",
		"OPENAI_API_KEY=sk-s3cret",
		"GATED_NATS_PASSWORD=s3cret",
		"MY_OTEL_THING=1",
		"OTEL_MALFORMED",
	}
	got := otelEnv(environ)
	want := []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4317",
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_TRACES_SAMPLER=parentbased_traceidratio",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("otelEnv passed %q, want %q", got, want)
	}
}
