package plugins

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// BenchmarkReviewRoundTrip measures a review through a real plugin process:
// host → gRPC → the sop reviewer → one brokered get_sop_text call back to
// the host → the answer → the host's reading of it. "bare" is the same
// round trip without a tool bag, so the broker's share shows as the
// difference. It reports p50/p99 per review and, for the parallel runs,
// reviews per second.
//
// With GATED_BENCH_PYTHON_PLUGIN set to a reviewer plugin written with the
// Python SDK (make bench-plugin-python), the same cases run through it
// too, under python/, in the same run.
func BenchmarkReviewRoundTrip(b *testing.B) {
	benchReviewRoundTrip(b, helperSpec(b, "sop"), "")
	if path := os.Getenv("GATED_BENCH_PYTHON_PLUGIN"); path != "" {
		sum, err := FileSHA256(path)
		if err != nil {
			b.Fatal(err)
		}
		benchReviewRoundTrip(b, Spec{Name: "python", Path: path, SHA256: sum}, "python/")
	}
}

func benchReviewRoundTrip(b *testing.B, spec Spec, prefix string) {
	spec.MaxConcurrency = 64
	h, err := NewHost(zap.NewNop(), spec.Name, spec)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h.Close)
	if err := h.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	r, err := h.Route(reviewer)
	if err != nil {
		b.Fatal(err)
	}
	sop := &gated.SOP{ID: "SOP-001", Title: "Restart", Actions: []string{"host_restart_service"}, Rollback: "start the old unit"}
	for _, bc := range []struct {
		name     string
		tools    []string
		parallel int
	}{
		{name: "bare", parallel: 1},
		{name: "one-tool-call", tools: []string{toolGetSOPText}, parallel: 1},
		{name: "one-tool-call-x16", tools: []string{toolGetSOPText}, parallel: 16},
	} {
		b.Run(prefix+bc.name, func(b *testing.B) {
			base := reviewRequest(b, "host_restart_service", sop)
			base.Tools = bc.tools
			var seq atomic.Int64
			var mu sync.Mutex
			lat := make([]time.Duration, 0, 1<<16)
			review := func() {
				req := base
				req.ReviewID = "rv" + strconv.FormatInt(seq.Add(1), 10)
				start := time.Now()
				res, err := r.Review(context.Background(), req)
				d := time.Since(start)
				if err != nil {
					b.Error(err)
					return
				}
				if _, ok, why := engine.Judge(res, reviewer); !ok {
					b.Errorf("not approved: %s", why)
				}
				mu.Lock()
				if len(lat) < cap(lat) {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			if bc.parallel == 1 {
				for b.Loop() {
					review()
				}
			} else {
				b.SetParallelism(bc.parallel)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						review()
					}
				})
			}
			elapsed := time.Since(start)
			b.StopTimer()
			if len(lat) == 0 {
				return
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "reviews/s")
		})
	}
}
