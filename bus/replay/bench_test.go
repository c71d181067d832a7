package replay

import (
	"flag"
	"fmt"
	"runtime"
	"testing"

	"github.com/gated/gated/internal/natstest"

	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/replay/replaytest"
	"github.com/gated/gated/personas"
)

// replayProposals is the size of BenchmarkReplay's history: 20,000
// proposals unless -replay.proposals says otherwise, as for a history of a
// million:
//
//	go test ./bus/replay -run '^$' -bench '^BenchmarkReplay$/workers=2' -benchtime 1x -args -replay.proposals 1000000
var replayProposals = flag.Int("replay.proposals", 20_000, "proposals in BenchmarkReplay's history")

// BenchmarkReplay replays a recorded history of 20,000 proposals (their
// whole trails: 100,000 records) under the candidate that freezes
// cache_purge, reading included, on one worker and on GOMAXPROCS. It
// reports the proposals decided per second end to end, the records read
// per second, the records per second the reader sustained on its own
// (replayReport.ReadRate), and the process's CPU time per proposal.
func BenchmarkReplay(b *testing.B) {
	n := *replayProposals
	js := replaytest.Server(b)
	replaytest.WriteTrailHistory(b, natstest.AuditWriter(b, js, audit.Config{}), n)
	reg, err := personas.Builtin()
	if err != nil {
		b.Fatal(err)
	}
	cand, _ := replaytest.Candidate(b)
	defer TuneGC()() // as the command does
	for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			var (
				records  uint64
				readRate float64
			)
			b.ReportAllocs()
			cpu := bustest.ProcessCPU(b)
			for b.Loop() {
				rep, err := Run(b.Context(), js, audit.Query{}, cand, reg, Config{Show: 10, Workers: workers})
				if err != nil {
					b.Fatal(err)
				}
				if rep.Replayed != n || !rep.Intact {
					b.Fatalf("replayed %d of %d, intact %v", rep.Replayed, n, rep.Intact)
				}
				records += rep.Records
				readRate += rep.ReadRate
			}
			// The process's CPU time per proposal holds on a shared machine,
			// where the rates depend on what else runs; it counts the
			// in-process NATS server's work for the read too.
			cpu = bustest.ProcessCPU(b) - cpu
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(n*b.N)/secs, "proposals/s")
			b.ReportMetric(float64(records)/secs, "records/s")
			// The rate the reader sustained on its own wall time, its waits
			// for the workers left out: reading and decoding, apart from
			// the decisions.
			b.ReportMetric(readRate/float64(b.N), "read-records/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(n*b.N), "cpu-µs/proposal")
		})
	}
}
