package test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gated/gated/internal/bench"
)

var (
	benchOnce  sync.Once
	benchPath  string
	benchBuild error
)

// benchBin builds gated-bench once, next to the gated the tests built, so
// that its embedded runs start that gated as a user's bin/ does.
func benchBin(t *testing.T) string {
	t.Helper()
	benchOnce.Do(func() {
		benchPath = filepath.Join(filepath.Dir(gatedBin), "gated-bench")
		if out, err := exec.Command("go", "build", "-o", benchPath, "../cmd/gated-bench").CombinedOutput(); err != nil {
			benchBuild = fmt.Errorf("building gated-bench: %v\n%s", err, out)
		}
	})
	if benchBuild != nil {
		t.Fatal(benchBuild)
	}
	return benchPath
}

// TestBenchEmbedded runs gated-bench as a user does, on every path: it
// starts its own gated, sends the mix, measures the floor, and reports.
// The figures are not judged (a test never asserts speed); that every
// proposal got its path's verdict, that the report adds up and that the
// gated process was measured are.
func TestBenchEmbedded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts gated and two plugin processes")
	}
	out := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(benchBin(t), "-n", "120", "--mix", "denied=1,read=1,plugin=1,llm=1",
		"-c", "denied=4,read=4,plugin=4,llm=30", "--llm-latency", "50ms", "--probe-rate", "50",
		"--warmup", "20", "--json", out, "--progress", "on")
	code, stdout, stderr := run(t, cmd)
	if code != 0 {
		t.Fatalf("gated-bench exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"gated (publish → verdict)", "floor: bare JetStream", "× floor", "gated and its plugin processes: peak RSS", "scripted model: 30 calls"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "100%") {
		t.Errorf("no progress bar on stderr:\n%s", stderr)
	}
	var rep bench.Report
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	byPath := map[string]bench.Summary{}
	for _, s := range rep.Gated {
		byPath[s.Path] = s
	}
	for _, p := range []string{"denied", "read", "plugin", "llm"} {
		s := byPath[p]
		if s.Answered != 30 || s.Unexpected != 0 || s.Errors != 0 || s.PerSecond <= 0 || s.P50MS <= 0 || s.MaxMS < s.P99MS {
			t.Errorf("%s: %+v", p, s)
		}
		// gated runs on this host: every stage of every answer is known,
		// and no stage takes longer than the whole wait.
		for _, stage := range []string{bench.StageToGated, bench.StageDeciding, bench.StageAfterDeciding} {
			if q := s.Stages[stage]; q.N != 30 || q.MaxMS > s.MaxMS {
				t.Errorf("%s: stage %s = %+v, whole wait max %g ms", p, stage, q, s.MaxMS)
			}
		}
	}
	// The scripted model's 50 ms are part of deciding, not of the bus.
	if q := byPath["llm"].Stages[bench.StageDeciding]; q.P50MS < 50 {
		t.Errorf("llm deciding p50 %g ms, below the model's 50 ms", q.P50MS)
	}
	if !strings.Contains(stdout, "where the time goes") {
		t.Errorf("report lacks the stages:\n%s", stdout)
	}
	if all := byPath["all"]; all.Answered != 120 {
		t.Errorf("all: %+v", all)
	}
	if len(rep.Floor) != 5 || rep.Ratio["all"] <= 0 {
		t.Errorf("floor %+v ratio %v", rep.Floor, rep.Ratio)
	}
	if rep.Probe == nil || rep.Probe.Answered == 0 || rep.Probe.Errors != 0 || rep.Probe.Unexpected != 0 ||
		rep.Probe.Stages[bench.StageAfterDeciding].N != rep.Probe.Answered {
		t.Errorf("probe: %+v", rep.Probe)
	}
	if rep.GatedProc == nil || rep.GatedProc.PeakRSSMB <= 0 || rep.GatedProc.CPUSeconds <= 0 {
		t.Errorf("gated process: %+v", rep.GatedProc)
	}
	if rep.AuditBytes <= 0 || rep.LLMCalls != 30 {
		t.Errorf("audit bytes %d, llm calls %d", rep.AuditBytes, rep.LLMCalls)
	}
	// The embedded gated's files are on this host: the disk's share is
	// measured.
	if rep.AuditDiskBytes <= 0 || !strings.Contains(stdout, "on disk") {
		t.Errorf("audit bytes on disk %d:\n%s", rep.AuditDiskBytes, stdout)
	}
}

// TestBenchExternal measures a running deployment given by --nats-url,
// and fails (exit 1, naming the path) when proposals do not get the
// verdict their path expects: here the deployment has no bench-llm
// persona, so the llm path is blocked.
func TestBenchExternal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts gated")
	}
	g := startGated(t)
	code, stdout, stderr := run(t, exec.Command(benchBin(t), "--nats-url", g.natsURL, "-n", "40",
		"--mix", "denied=1,read=1", "-c", "4", "--floor=false", "--pid", strconv.Itoa(g.cmd.Process.Pid)))
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	// A deployment's files are its server's: the disk's share is not
	// guessed.
	if !strings.Contains(stdout, "gated bench (external)") || !strings.Contains(stdout, "gated and its plugin processes: peak RSS") || strings.Contains(stdout, "floor:") ||
		!strings.Contains(stdout, "audit stream:") || strings.Contains(stdout, "on disk") {
		t.Errorf("report:\n%s", stdout)
	}
	// --pid says gated runs here: its clock is this one.
	if !strings.Contains(stdout, "to gated: the publish") {
		t.Errorf("report with --pid lacks the stages before and after deciding:\n%s", stdout)
	}
	code, stdout, stderr = run(t, exec.Command(benchBin(t), "--nats-url", g.natsURL, "-n", "4",
		"--mix", "llm=1", "--floor=false", "--warmup", "0", "--timeout", "20s"))
	if code != 1 || !strings.Contains(stderr, "llm: 4 proposals got an unexpected verdict") {
		t.Fatalf("llm path without its persona: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "first problem on llm") {
		t.Errorf("the report does not say what went wrong:\n%s", stdout)
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mix", "write=1"}, `unknown path "write"`},
		{[]string{"-n", "0"}, "-n 0 must be at least 1"},
		{[]string{"-c", "0"}, "concurrency 0 must be at least 1"},
		{[]string{"--pid", "1"}, "--pid and --llm-listen apply to a deployment"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--serve-arg=--http=x"}, "--serve-arg applies to the embedded gated"},
		{[]string{"--tenant", "Bad Tenant"}, "--tenant"},
		{[]string{"--progress", "maybe"}, "want auto, on or off"},
	} {
		code, _, stderr := run(t, exec.Command(benchBin(t), tc.args...))
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("gated-bench %v: exit %d, stderr %q; want exit 2 saying %q", tc.args, code, stderr, tc.want)
		}
	}
}

// TestBenchPrefillCurve runs `gated-bench --prefill-curve` as a user
// does: one embedded gated per size, the store prefilled with copies of
// the warm-up's trails before the measurement. It checks that each size's
// store holds what was asked for, that the copies verify as gated's own
// (the run answers every proposal after them), and that gated's resident
// set is reported along each run.
func TestBenchPrefillCurve(t *testing.T) {
	if testing.Short() {
		t.Skip("starts gated twice")
	}
	out := filepath.Join(t.TempDir(), "curve.json")
	cmd := exec.Command(benchBin(t), "-n", "200", "--mix", "denied=1,read=1", "-c", "8", "--floor=false",
		"--warmup", "20", "--prefill-curve", "0,500", "--json", out, "--progress", "on")
	code, stdout, stderr := run(t, cmd)
	if code != 0 {
		t.Fatalf("gated-bench exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"prefill curve", "=== prefill 500 ===", "prefilled: 500 proposals' histories", "gated's own RSS along the run"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "prefill  [") {
		t.Errorf("no prefill progress bar on stderr:\n%s", stderr)
	}
	var points []struct {
		Prefill int           `json:"prefill"`
		Report  *bench.Report `json:"report"`
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &points); err != nil {
		t.Fatal(err)
	}
	if len(points) != 2 || points[0].Prefill != 0 || points[1].Prefill != 500 {
		t.Fatalf("curve has %d points: %+v", len(points), points)
	}
	for _, p := range points {
		all := bench.Overall(p.Report.Gated)
		if all.Answered != 200 || all.Errors != 0 || all.Unexpected != 0 {
			t.Errorf("prefill %d: %+v", p.Prefill, all)
		}
		if g := p.Report.GatedProc; g == nil || g.RSS == nil || g.RSS.StartMB <= 0 || g.RSS.EndMB <= 0 || len(g.RSS.Along) < 2 {
			t.Errorf("prefill %d: gated's RSS along the run is missing: %+v", p.Prefill, g)
		}
		if _, err := os.Stat(strings.TrimSuffix(out, ".json") + "-prefill-" + strconv.Itoa(p.Prefill) + ".json"); err != nil {
			t.Errorf("prefill %d: no report of its own: %v", p.Prefill, err)
		}
	}
	if points[0].Report.Prefill != nil {
		t.Errorf("size 0 was prefilled: %+v", points[0].Report.Prefill)
	}
	pf := points[1].Report.Prefill
	// A denial's or a read's trail is one record: its arrival, the
	// policy's decision and the verdict happen at once.
	if pf == nil || pf.Proposals != 500 || pf.Records != 500 {
		t.Fatalf("prefill 500 wrote %+v; want 500 proposals' trails of one record each", pf)
	}
	// Stored: the warm-up's 20 proposals and the 500 copies, each with
	// its trail and its verdict.
	if pf.AuditRecords < uint64(pf.Records+20) || pf.BucketMessages < 520 {
		t.Errorf("prefill 500 left %d audit records and %d bucket messages; want at least %d and 520", pf.AuditRecords, pf.BucketMessages, pf.Records+20)
	}
}
