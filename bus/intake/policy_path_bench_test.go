//go:build unix

package intake_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/bench"
	"github.com/gated/gated/internal/telemetry"
	"github.com/gated/gated/personas"
)

// BenchmarkPolicyPath measures proposals decided at stage policy, end to
// end and in process, with the pieces `gated serve` wires: an embedded
// nats-server with JetStream on a temp dir, Setup, the default policy
// bundle, the engine, the chained audit writer (with a key, publish mode auto)
// and the Worker. A fleet of 256 agents on its own connection publishes
// a 50/50 mix of policy-denied proposals and reads, as fleet.Client does
// (subject gated.proposals.<tenant>.<action>, Nats-Msg-Id <tenant>.<id>,
// publish acknowledged by the stream), and waits for each verdict on one
// wildcard subscription. One op is one proposal. Reported: proposals/s
// and the p50, p99 and max of publish-to-verdict latency.
//
//	go test ./bus -run '^$' -bench '^BenchmarkPolicyPath$' -benchtime 20000x -count 3
func BenchmarkPolicyPath(b *testing.B) { benchPolicyPath(b, false) }

// BenchmarkPolicyPathTraced is BenchmarkPolicyPath with tracing on, as
// the OTEL_* variables turn it on in serve: every span exported over OTLP
// gRPC to a receiver in this process, which counts them (spans/proposal).
//
//	go test ./bus -run '^$' -bench '^BenchmarkPolicyPathTraced$' -benchtime 20000x -count 3
func BenchmarkPolicyPathTraced(b *testing.B) { benchPolicyPath(b, true) }

// otlpSink is an OTLP trace receiver that counts the spans it gets.
type otlpSink struct {
	collectortrace.UnimplementedTraceServiceServer
	spans atomic.Int64
}

func (s *otlpSink) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			s.spans.Add(int64(len(ss.GetSpans())))
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// startTracing starts an OTLP receiver on loopback and turns tracing on
// towards it; the cleanup flushes and turns it off.
func startTracing(b *testing.B) *otlpSink {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	sink := &otlpSink{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, sink)
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(srv.Stop)
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + ln.Addr().String(),
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_INSECURE": "true",
	}
	for k, v := range env {
		b.Setenv(k, v) // the exporter reads the endpoint itself
	}
	shutdown, err := telemetry.Setup(b.Context(), "gated", os.LookupEnv)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = shutdown(ctx)
	})
	return sink
}

// servedEngine is the engine as serve wires it: the store, the policy and
// the engine's own stages traced (at no cost while tracing is off).
func servedEngine(b *testing.B, st engine.VerdictStore) *engine.Engine {
	b.Helper()
	reg, err := personas.Builtin()
	if err != nil {
		b.Fatal(err)
	}
	eng, err := engine.New(engine.Config{
		Policy: telemetry.Policy(bustest.Policy(b)), Personas: reg, Router: noPlugins{},
		Store: telemetry.Store(st, nil), Trace: telemetry.Stage,
	})
	if err != nil {
		b.Fatal(err)
	}
	return eng
}

func benchPolicyPath(b *testing.B, traced bool) {
	const (
		concurrency = 256
		tenant      = "bench"
	)
	log := zap.NewNop()
	s := natstest.Server(b)
	ctx := b.Context()

	// gated's side, set up as serve does.
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(16384), jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	cfg := bus.Config{}
	res, err := bus.Setup(ctx, js, cfg)
	if err != nil {
		b.Fatal(err)
	}
	var sink *otlpSink
	if traced {
		sink = startTracing(b)
	}
	eng := servedEngine(b, store.New(res.Verdicts))
	auditor, err := audit.NewWriter(ctx, js, audit.Config{Key: []byte("0123456789abcdef0123456789abcdef"), Log: log, Publish: benchPublishMode()})
	if err != nil {
		b.Fatal(err)
	}
	w, err := intake.NewWorker(nc, js, res, eng, auditor.Trail, cfg, log)
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	// Cleanups run last in first out: the worker stops, then the auditor
	// drains, then the connection closes and the server stops.
	b.Cleanup(func() {
		actx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = auditor.Close(actx)
	})
	b.Cleanup(func() { w.Stop(5 * time.Second) })

	// The fleet's side.
	fleet, fjs := natstest.Connect(b, s)
	gen := bench.Proposals{Tenant: tenant, Nonce: fmt.Sprintf("b%d", time.Now().UnixNano())}
	type sent struct {
		msg  *nats.Msg
		path bench.Path
		at   time.Time
		done chan *gated.Verdict
	}
	proposals := make([]*sent, b.N)
	byID := make(map[string]*sent, b.N)
	for i := range b.N {
		path := bench.PathDenied
		if i%2 == 1 {
			path = bench.PathRead
		}
		p := gen.New(path, i)
		data, err := json.Marshal(p)
		if err != nil {
			b.Fatal(err)
		}
		m := nats.NewMsg(wire.ProposalSubject(p.Tenant, p.Action))
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, p.Tenant+"."+p.ID)
		proposals[i] = &sent{msg: m, path: path, done: make(chan *gated.Verdict, 1)}
		byID[p.ID] = proposals[i]
	}
	sub, err := fleet.Subscribe(wire.VerdictSubjectPrefix+tenant+".*", func(m *nats.Msg) {
		p := byID[m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]]
		if p == nil {
			return
		}
		var v gated.Verdict
		if err := json.Unmarshal(m.Data, &v); err != nil {
			return
		}
		select {
		case p.done <- &v:
		default:
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := fleet.Flush(); err != nil {
		b.Fatal(err)
	}

	latency := make([]time.Duration, b.N)
	var (
		next       atomic.Int64
		wg         sync.WaitGroup
		fail       atomic.Pointer[error]
		unexpected atomic.Int64
	)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for range concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N || fail.Load() != nil {
					return
				}
				p := proposals[i]
				start := time.Now()
				if _, err := fjs.PublishMsg(ctx, p.msg); err != nil {
					err = fmt.Errorf("publishing proposal %d: %w", i, err)
					fail.Store(&err)
					return
				}
				select {
				case v := <-p.done:
					latency[i] = time.Since(start)
					outcome, stage := p.path.Expect()
					if v.Outcome != outcome || v.Stage != stage {
						unexpected.Add(1)
					}
				case <-time.After(30 * time.Second):
					err := fmt.Errorf("no verdict for proposal %d within 30s", i)
					fail.Store(&err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu := cpuTime() - cpu0
	if err := fail.Load(); err != nil {
		b.Fatal(*err)
	}
	if n := unexpected.Load(); n > 0 {
		b.Fatalf("%d of %d verdicts had an unexpected outcome or stage", n, b.N)
	}
	slices.Sort(latency)
	ms := func(q float64) float64 {
		return float64(latency[int(q*float64(len(latency)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "proposals/s")
	b.ReportMetric(ms(0.50), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
	b.ReportMetric(ms(1), "max-ms")
	// The process's CPU time (server, gated and fleet together) is steadier
	// than throughput on a machine that runs other work.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/proposal")
	st := auditor.Stats()
	b.ReportMetric(float64(st.Records)/float64(max(b.N, 1)), "records/proposal")
	if sink != nil {
		// Spans still buffered are flushed by the cleanup: count what was
		// exported while the proposals ran, a lower bound.
		b.ReportMetric(float64(sink.spans.Load())/float64(max(b.N, 1)), "spans/proposal")
	}
}

func benchPublishMode() audit.PublishMode {
	switch os.Getenv("BENCH_PUBLISH") {
	case "batches":
		return audit.PublishBatches
	case "one-at-a-time":
		return audit.PublishOneAtATime
	}
	return audit.PublishAuto
}

// cpuTime is the CPU time, user and system, the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
