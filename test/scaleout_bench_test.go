package test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/gated/gated/internal/bench"
)

// scaleOutRow is one process count of TestBenchScaleOut.
type scaleOutRow struct {
	Processes int           `json:"processes"`
	Report    *bench.Report `json:"report"`
	// Decided is how many verdicts each gated process counted.
	Decided []float64 `json:"decided"`
	// Usage is each gated process's CPU and resident set over the run.
	Usage []bench.ProcUsage `json:"usage"`
}

// TestBenchScaleOut measures scaling out: one, two and three gated
// processes sharing the durable consumer on a three-node cluster with R3
// streams and bucket, each count on a cluster of its own, driven by
// `gated-bench --nats-url` on the policy paths. It runs only when
// GATED_BENCH_SCALEOUT is set (make bench-scaleout): it takes minutes and
// its figures are the point. The cluster's nodes run in this test's
// process, and everything shares this machine's cores, so the figures
// show what sharing the consumer costs and keeps, not what three machines
// would give. What it asserts is what scaling out must keep: every
// proposal gets its path's verdict, and every process takes a share.
//
// GATED_BENCH_SCALEOUT_N (default 20000), _C (default 256) and _COUNTS
// (default 1,2,3) set the proposals, their concurrency and the process
// counts; GATED_BENCH_SCALEOUT_JSON writes the rows as JSON.
func TestBenchScaleOut(t *testing.T) {
	if os.Getenv("GATED_BENCH_SCALEOUT") == "" {
		t.Skip("set GATED_BENCH_SCALEOUT=1 (make bench-scaleout) to measure scaling out")
	}
	n, c := envOr("GATED_BENCH_SCALEOUT_N", "20000"), envOr("GATED_BENCH_SCALEOUT_C", "256")
	var rows []scaleOutRow
	for field := range strings.SplitSeq(envOr("GATED_BENCH_SCALEOUT_COUNTS", "1,2,3"), ",") {
		k, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || k < 1 || k > 8 {
			t.Fatalf("GATED_BENCH_SCALEOUT_COUNTS: %q is not a process count from 1 to 8", field)
		}
		t.Run(fmt.Sprintf("gated=%d", k), func(t *testing.T) {
			cluster := startNATS(t, 3)
			var procs []*gatedProc
			for i := range k {
				procs = append(procs, launchGated(t, fmt.Sprintf("gated-%d", i+1), cluster.url(), 3))
			}
			assertReplicated(t, cluster, 3)
			waitReplicasCurrent(t, connectJS(t, cluster.url()))
			var samplers []*bench.Sampler
			for _, g := range procs {
				g.mu.Lock()
				pid := g.cmd.Process.Pid
				g.mu.Unlock()
				s, err := bench.StartSampler(pid, true, 250*time.Millisecond)
				if err != nil {
					t.Fatalf("%s: %v", g.name, err)
				}
				samplers = append(samplers, s)
			}
			out := filepath.Join(t.TempDir(), "report.json")
			cmd := exec.Command(benchBin(t), "--nats-url", cluster.url(), "-n", n, "--mix", "denied=1,read=1",
				"-c", c, "--floor=false", "--json", out, "--progress", "off")
			code, stdout, stderr := run(t, cmd)
			row := scaleOutRow{Processes: k}
			for i, s := range samplers {
				u, err := s.Stop()
				if err != nil {
					t.Fatalf("%s: %v", procs[i].name, err)
				}
				row.Usage = append(row.Usage, u)
			}
			if code != 0 {
				t.Fatalf("gated-bench exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			t.Logf("gated-bench with %d gated processes:\n%s", k, stdout)
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			row.Report = &bench.Report{}
			if err := json.Unmarshal(data, row.Report); err != nil {
				t.Fatal(err)
			}
			for _, g := range procs {
				d := g.verdictsCounted(t)
				if d == 0 {
					t.Errorf("%s decided nothing: the consumer is not shared", g.name)
				}
				row.Decided = append(row.Decided, d)
			}
			rows = append(rows, row)
		})
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "gated processes\tper s\t× one\tp50 ms\tp99 ms\tdecided by each\tCPU s of each\tpeak RSS MB of each\t")
	var one float64
	for _, r := range rows {
		all := bench.Overall(r.Report.Gated)
		if r.Processes == 1 || one == 0 {
			one = all.PerSecond
		}
		var decided, cpu, rss []string
		for i := range r.Decided {
			decided = append(decided, strconv.FormatFloat(r.Decided[i], 'f', 0, 64))
			cpu = append(cpu, strconv.FormatFloat(r.Usage[i].CPUSeconds, 'f', 1, 64))
			rss = append(rss, strconv.FormatFloat(r.Usage[i].PeakRSSMB, 'f', 0, 64))
		}
		fmt.Fprintf(tw, "%d\t%.0f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\t\n", r.Processes, all.PerSecond, all.PerSecond/one,
			all.P50MS, all.P99MS, strings.Join(decided, " / "), strings.Join(cpu, " / "), strings.Join(rss, " / "))
	}
	_ = tw.Flush()
	t.Logf("scale-out on a three-node cluster (R3), -n %s -c %s, policy paths:\n%s", n, c, b.String())
	if path := os.Getenv("GATED_BENCH_SCALEOUT_JSON"); path != "" {
		data, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
