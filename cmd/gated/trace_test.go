package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/internal/telemetry"
)

// otlpReceiver is an OTLP trace collector: a real gRPC TraceService on
// loopback that keeps every span it is sent, with its service name.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	addr string

	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	service string
	span    *tracepb.Span
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{addr: ln.Addr().String()}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return r
}

// Export implements the collector's TraceService.
func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := stringAttr(rs.GetResource().GetAttributes(), "service.name")
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{service: service, span: sp})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// trace returns the spans received of one trace.
func (r *otlpReceiver) trace(traceID []byte) []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []receivedSpan
	for _, s := range r.spans {
		if string(s.span.GetTraceId()) == string(traceID) {
			out = append(out, s)
		}
	}
	return out
}

func stringAttr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// stageParents are the spans one reviewed proposal gives, each with the
// span its parent must be. A first delivery whose review claim is fresh
// looks no stored verdict up: it has no gated.store.lookup span.
var stageParents = map[string]string{
	telemetry.SpanDecode:       telemetry.SpanProposal,
	telemetry.SpanStoreHistory: telemetry.SpanProposal,
	telemetry.SpanPolicy:       telemetry.SpanProposal,
	telemetry.SpanClaim:        telemetry.SpanProposal,
	telemetry.SpanReview:       telemetry.SpanProposal,
	telemetry.SpanAudit:        telemetry.SpanProposal,
	telemetry.SpanStore:        telemetry.SpanProposal,
	telemetry.SpanPublish:      telemetry.SpanProposal,
	telemetry.SpanPluginReview: telemetry.SpanReview,
}

// TestServeTracesAReviewedProposal runs serve with the OTEL_* variables
// pointing at an in-process OTLP receiver, publishes one proposal that
// goes to the bundled sop reviewer with the Go fleet client under a
// parent span, and checks the trace: gated's proposal span is a child of
// the fleet's, every stage's span a child of the proposal's, the plugin
// process's review span a child of gated's review span, and no attribute
// carries the proposal's payload.
func TestServeTracesAReviewedProposal(t *testing.T) {
	clearGatedEnv(t)
	rcv := startOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+rcv.addr)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	s := natstest.Server(t)
	_, stop := startServe(t, s.ClientURL())
	defer stop()
	if !telemetry.Enabled() {
		t.Fatal("serve did not turn tracing on with OTEL_EXPORTER_OTLP_ENDPOINT set")
	}

	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The fleet's own tracer: its span is the parent gated must name.
	fleetTP := sdktrace.NewTracerProvider()
	defer func() { _ = fleetTP.Shutdown(context.Background()) }()
	ctx, fleetSpan := fleetTP.Tracer("fleet").Start(t.Context(), "fleet.restart")
	const payloadMark = "payload-must-not-be-traced"
	data := fmt.Appendf(nil, `{"v":1,"id":"p-traced","tenant":"acme","action":"host_restart_service","class":"write","blast_radius":"single_device",`+
		`"target":{"device_id":7,"service":"nginx"},"reason":%q,"operator":{"id":"alice","roles":["sre"]},`+
		`"requested_by":{"agent":"a","session":"s"}}`, payloadMark)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	v, err := client.ProposeRaw(pctx, data)
	cancel()
	fleetSpan.End()
	if err != nil {
		t.Fatal(err)
	}
	if v.Outcome != gated.OutcomeApproved || v.Stage != gated.StageReview {
		t.Fatalf("verdict %s at %s (%s), want approved at review", v.Outcome, v.Stage, v.Reason)
	}
	sc := fleetSpan.SpanContext()
	traceID, fleetID := sc.TraceID(), sc.SpanID()

	// Spans are exported in batches, by two processes: wait for them all.
	var spans []receivedSpan
	byName := map[string][]receivedSpan{}
	deadline := time.Now().Add(time.Minute)
	for {
		spans = rcv.trace(traceID[:])
		clear(byName)
		for _, s := range spans {
			byName[s.span.GetName()] = append(byName[s.span.GetName()], s)
		}
		missing := []string{}
		for _, name := range append([]string{telemetry.SpanProposal}, keys(stageParents)...) {
			if len(byName[name]) == 0 {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute the trace lacks %v; it has %d spans: %v", missing, len(spans), names(spans))
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A first delivery with a fresh claim looks a stored verdict up once:
	// its approval, before it is sealed; the claim adds no look-up.
	if n := len(byName[telemetry.SpanStoreLookup]); n != 1 {
		t.Errorf("a first delivery's approval looked a stored verdict up %d times (%s spans), want once", n, telemetry.SpanStoreLookup)
	}
	proposal := byName[telemetry.SpanProposal]
	if len(proposal) != 1 {
		t.Fatalf("%d proposal spans, want 1", len(proposal))
	}
	ps := proposal[0].span
	if got := hex.EncodeToString(ps.GetParentSpanId()); got != fleetID.String() {
		t.Errorf("the proposal span's parent is %s, want the fleet's span %s", got, fleetID)
	}
	if proposal[0].service != "gated" {
		t.Errorf("the proposal span comes from service %q, want gated", proposal[0].service)
	}
	for attr, want := range map[string]string{
		telemetry.AttrTenant: "acme", telemetry.AttrProposalID: "p-traced", telemetry.AttrAction: "host_restart_service",
		telemetry.AttrOutcome: "approved", telemetry.AttrStage: "review",
	} {
		if got := stringAttr(ps.GetAttributes(), attr); got != want {
			t.Errorf("proposal span %s = %q, want %q", attr, got, want)
		}
	}
	ids := map[string]string{} // span id → name
	for _, s := range spans {
		ids[string(s.span.GetSpanId())] = s.span.GetName()
	}
	for _, s := range spans {
		name := s.span.GetName()
		parent, ok := stageParents[name]
		if !ok {
			continue
		}
		if got := ids[string(s.span.GetParentSpanId())]; got != parent {
			t.Errorf("span %s has parent %q, want %s", name, got, parent)
		}
		wantService := "gated"
		if name == telemetry.SpanPluginReview {
			wantService = "gated-plugin"
		}
		if s.service != wantService {
			t.Errorf("span %s comes from service %q, want %s", name, s.service, wantService)
		}
	}
	review := byName[telemetry.SpanReview][0].span
	for attr, want := range map[string]string{telemetry.AttrPlugin: "sop", telemetry.AttrPersona: "reviewer"} {
		if got := stringAttr(review.GetAttributes(), attr); got != want {
			t.Errorf("review span %s = %q, want %q", attr, got, want)
		}
	}
	for _, s := range spans {
		for _, kv := range s.span.GetAttributes() {
			if strings.Contains(kv.GetValue().String(), payloadMark) {
				t.Errorf("span %s attribute %s carries the proposal's reason", s.span.GetName(), kv.GetKey())
			}
		}
	}

	// Through the review service (gated.review.<tenant>): the requester's
	// span is still the parent of gated's proposal span.
	rctx, reqSpan := fleetTP.Tracer("fleet").Start(t.Context(), "fleet.request")
	rctx, cancel = context.WithTimeout(rctx, 30*time.Second)
	_, err = client.RequestReview(rctx, readProposal("p-requested", "nginx"))
	cancel()
	reqSpan.End()
	if err != nil {
		t.Fatal(err)
	}
	rsc := reqSpan.SpanContext()
	rtid := rsc.TraceID()
	for deadline := time.Now().Add(time.Minute); ; {
		var found *tracepb.Span
		for _, s := range rcv.trace(rtid[:]) {
			if s.span.GetName() == telemetry.SpanProposal {
				found = s.span
			}
		}
		if found != nil {
			if got := hex.EncodeToString(found.GetParentSpanId()); got != rsc.SpanID().String() {
				t.Errorf("through the review service, the proposal span's parent is %s, want the requester's %s", got, rsc.SpanID())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("after a minute no proposal span in the requester's trace: the review service dropped its trace context")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func names(spans []receivedSpan) []string {
	out := make([]string, 0, len(spans))
	for _, s := range spans {
		out = append(out, s.service+":"+s.span.GetName())
	}
	return out
}
