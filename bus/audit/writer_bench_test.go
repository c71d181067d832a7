package audit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// BenchmarkAuditTrail measures the chained audit trail as the worker uses
// it: 64 deliveries at once over 16 tenants, each recording 4 events and
// sealing a fifth. One op is one trail. It compares group commit (atomic
// batches), one record per round trip, and, as the baseline that shows
// what chaining costs, unchained events published asynchronously (gated's
// trail before chaining); pipelined-json is pipelined with the records
// stored as JSON (Config.Uncompressed), the baseline of what compressing
// them costs. Each runs on an R1 file stream (the embedded server's) and
// on a memory stream, where the server stages batches in memory as it
// does on a replicated stream. Reported: events/s, the p50 and p99 of
// Seal, records per publish round trip, the stream's bytes per trail.
//
//	go test ./bus -run '^$' -bench '^BenchmarkAuditTrail$' -benchtime 2000x -count 3
func BenchmarkAuditTrail(b *testing.B) {
	for _, storage := range []jetstream.StorageType{jetstream.FileStorage, jetstream.MemoryStorage} {
		for _, mode := range []struct {
			name         string
			publish      audit.PublishMode
			uncompressed bool
		}{
			{"group-commit", audit.PublishBatches, false},
			{"pipelined", audit.PublishPipelined, false},
			{"pipelined-json", audit.PublishPipelined, true},
			{"one-at-a-time", audit.PublishOneAtATime, false},
			{"unchained", -1, false},
		} {
			b.Run(strings.ToLower(storage.String())+"/"+mode.name, func(b *testing.B) {
				benchmarkAuditTrail(b, storage, mode.publish, mode.uncompressed)
			})
		}
	}
}

func benchmarkAuditTrail(b *testing.B, storage jetstream.StorageType, publish audit.PublishMode, uncompressed bool) {
	const (
		concurrency = 64
		tenants     = 16
		records     = 4
	)
	s := bustest.Server(b)
	_, js := bustest.Connect(b, s)
	stream, err := js.CreateStream(b.Context(), jetstream.StreamConfig{
		Name: audit.Stream, Subjects: []string{wire.AuditSubjectPrefix + ">"},
		Storage: storage, AllowAtomicPublish: true, DenyDelete: true, DenyPurge: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	var (
		trails = func() engine.AuditTrail { return &unchainedTrail{js: js} }
		a      *audit.Writer
	)
	if publish >= 0 {
		a = bustest.AuditWriter(b, js, audit.Config{Key: testKey, Publish: publish, Uncompressed: uncompressed, Log: zap.NewNop()})
		trails = a.Trail
	}
	seal := make([]time.Duration, b.N)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		fail atomic.Pointer[error]
	)
	b.ReportAllocs()
	b.ResetTimer()
	for range concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				tenant, id := fmt.Sprint("t", i%tenants), fmt.Sprint("p", i)
				tr := trails()
				for range records {
					ev := gated.AuditEvent{V: 1, Event: gated.EventReceived, Tenant: tenant, ProposalID: id, Data: []byte(`{"action":"db_backup","operator":"alice"}`)}
					if err := tr.Record(b.Context(), ev); err != nil {
						fail.Store(&err)
						return
					}
				}
				start := time.Now()
				if _, err := tr.Seal(b.Context(), verdictEvent(tenant, id)); err != nil {
					fail.Store(&err)
					return
				}
				seal[i] = time.Since(start)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if err := fail.Load(); err != nil {
		b.Fatal(*err)
	}
	slices.Sort(seal)
	ms := func(q float64) float64 { return float64(seal[int(q*float64(len(seal)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(float64(b.N*(records+1))/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(ms(0.50), "p50-seal-ms")
	b.ReportMetric(ms(0.99), "p99-seal-ms")
	if a != nil {
		st := a.Stats()
		b.ReportMetric(float64(st.Records)/float64(max(st.Publishes, 1)), "records/publish")
	}
	info, err := stream.Info(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(info.State.Bytes)/float64(b.N), "stream-bytes/trail")
}

// unchainedTrail publishes events as they come, asynchronously and
// without a chain, and waits for every acknowledgement at Seal: the cost
// of an audit trail without tamper evidence.
type unchainedTrail struct {
	js      jetstream.JetStream
	futures []jetstream.PubAckFuture
}

func (t *unchainedTrail) Record(_ context.Context, ev gated.AuditEvent) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	m := nats.NewMsg(wire.AuditSubject(ev.Tenant, ev.Event))
	m.Data = data
	f, err := t.js.PublishMsgAsync(m)
	if err != nil {
		return err
	}
	t.futures = append(t.futures, f)
	return nil
}

func (t *unchainedTrail) Flush(context.Context) error { return nil }

func (t *unchainedTrail) Seal(ctx context.Context, ev gated.AuditEvent) (uint64, error) {
	if err := t.Record(ctx, ev); err != nil {
		return 0, err
	}
	var last uint64
	for _, f := range t.futures {
		select {
		case ack := <-f.Ok():
			last = ack.Sequence
		case err := <-f.Err():
			return 0, err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return last, nil
}
