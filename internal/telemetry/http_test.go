package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestSetupExportsOverHTTP turns tracing on with the default protocol,
// http/protobuf, towards an OTLP/HTTP receiver, and checks that a span
// arrives at /v1/traces under gated's service name once shutdown flushes.
func TestSetupExportsOverHTTP(t *testing.T) {
	var mu sync.Mutex
	var got []string
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					got = append(got, service+":"+sp.GetName())
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	defer rcv.Close()
	// The exporter reads the endpoint from the process's environment.
	t.Setenv(envEndpoint, rcv.URL)
	shutdown, err := Setup(context.Background(), "gated", os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	_, span := Start(context.Background(), SpanProposal, KindConsumer)
	span.String(AttrTenant, "acme")
	span.End(nil)
	if err := shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "gated:"+SpanProposal {
		t.Fatalf("the receiver got %v, want one gated:%s", got, SpanProposal)
	}
}
