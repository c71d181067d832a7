package intake_test

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/engine/wire"
)

// BenchmarkServerMemory measures what an in-process NATS server, as
// `gated serve` embeds it, keeps live on the Go heap per stored verdict
// (a key of GATED_VERDICTS: the bucket's index of its subjects) and per
// message id in the duplicate window of GATED_PROPOSALS, both set up by
// bus.Setup. Reported: live-B/key and live-B/id, the growth of the live
// heap after a collection over 100,000 of each, divided by 100,000. The
// values are small and the proposals are purged before the count, so
// that the file store's cache of recent blocks, which is bounded and not
// per key, stays out of it. docs/NATS.md ("Memory") quotes them.
func BenchmarkServerMemory(b *testing.B) {
	const n = 100_000
	live := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for range b.N {
		s := natstest.Server(b)
		nc, js := natstest.Connect(b, s)
		ctx := b.Context()
		if _, err := bus.Setup(ctx, js, bus.Config{}); err != nil {
			b.Fatal(err)
		}
		ajs, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
		if err != nil {
			b.Fatal(err)
		}
		publish := func(m *nats.Msg) {
			if _, err := ajs.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute)); err != nil {
				b.Fatal(err)
			}
		}
		verdict := []byte(`{"v":1}`)
		before := live()
		for i := range n {
			id := "b1a2b3c4d5e6f-read-" + strconv.Itoa(i)
			publish(&nats.Msg{Subject: "$KV." + wire.VerdictBucket + ".bench." + id, Data: verdict})
		}
		<-ajs.PublishAsyncComplete()
		keys := live()
		for i := range n {
			id := "b1a2b3c4d5e6f-read-" + strconv.Itoa(i)
			publish(&nats.Msg{Subject: "gated.proposals.bench.host_list_services", Data: []byte("{}"),
				Header: nats.Header{"Nats-Msg-Id": []string{"bench." + id}}})
		}
		<-ajs.PublishAsyncComplete()
		proposals, err := js.Stream(ctx, bus.ProposalsStream)
		if err != nil {
			b.Fatal(err)
		}
		if err := proposals.Purge(ctx); err != nil {
			b.Fatal(err)
		}
		ids := live()
		b.ReportMetric(float64(int64(keys)-int64(before))/n, "live-B/key")
		b.ReportMetric(float64(int64(ids)-int64(keys))/n, "live-B/id")
	}
}
