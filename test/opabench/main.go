// Command opabench compares gated's policy path with stock OPA's REST API
// on the same default bundle and the same inputs, at equal client
// concurrency.
//
// It builds the policy-decided proposals of `gated-bench` (paths denied and
// read, alternating), checks on a sample that OPA decides each exactly as
// gated does, then makes the same decisions both ways: POSTs to
// /v1/data/gated/decision of a running `opa run --server`, over kept-alive
// connections, and calls in process to the policy gated serves, through
// the engine's routing. It prints decisions per second, p50 and p99 per
// mode and the ratio gated/OPA. test/opa-bench.sh builds and starts OPA
// and runs it:
//
//	go run ./test/opabench -opa http://127.0.0.1:8181 -c 1,8,32 -n 20000
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/policies"
)

// errUndefined is OPA answering without a result.
var errUndefined = errors.New("data.gated.decision is undefined on OPA: is it serving gated's default bundle (policies/*.rego without tests, and policies/data.json)?")

// errUsage marks a bad command line; main exits 2 on it.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "opabench:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "opabench:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	opaURL  string
	levels  []int // client concurrencies, each measured on both sides
	n       int   // decisions measured per mode and level
	warmup  int   // decisions made and discarded before each measurement
	check   int   // decisions compared between OPA and gated first
	jsonOut string
	opaPID  int // OPA's process id, for its CPU use; 0 when not known
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("opabench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	levels := fs.String("c", "32", "client `concurrency`, or a comma-separated list of them, the same on both sides")
	fs.StringVar(&o.opaURL, "opa", "http://127.0.0.1:8181", "base `URL` of a running `opa run --server` serving gated's default bundle")
	fs.IntVar(&o.n, "n", 20000, "`decisions` measured per mode and concurrency")
	fs.IntVar(&o.warmup, "warmup", 2000, "`decisions` made and discarded before each measurement")
	fs.IntVar(&o.check, "check", 200, "`decisions` compared between OPA and gated before measuring; any difference fails the run")
	fs.StringVar(&o.jsonOut, "json", "", "also write the results as JSON to `file`")
	fs.IntVar(&o.opaPID, "opa-pid", 0, "OPA's process `id`, to report its CPU use from /proc (optional)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, fmt.Errorf("%w: %w", errUsage, err)
	}
	var problems []string
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Sprintf("unexpected arguments %q", fs.Args()))
	}
	for s := range strings.SplitSeq(*levels, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || c < 1 || c > 4096 {
			problems = append(problems, fmt.Sprintf("-c %q: each concurrency must be an integer from 1 to 4096", s))
			continue
		}
		o.levels = append(o.levels, c)
	}
	if u, err := url.Parse(o.opaURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
		problems = append(problems, fmt.Sprintf("-opa %q: want the server's base URL, such as http://127.0.0.1:8181", o.opaURL))
	}
	o.opaURL = strings.TrimRight(o.opaURL, "/")
	if o.n < 1 {
		problems = append(problems, fmt.Sprintf("-n %d: want at least 1 decision", o.n))
	}
	if o.warmup < 0 {
		problems = append(problems, fmt.Sprintf("-warmup %d: want 0 or more decisions", o.warmup))
	}
	if o.check < 1 {
		problems = append(problems, fmt.Sprintf("-check %d: want at least 1 decision compared; the figures mean nothing if OPA decides otherwise", o.check))
	}
	if o.opaPID < 0 {
		problems = append(problems, fmt.Sprintf("-opa-pid %d: want a process id, or 0", o.opaPID))
	}
	if len(problems) > 0 {
		return o, fmt.Errorf("%w: %s", errUsage, strings.Join(problems, "; "))
	}
	return o, nil
}

// report is the JSON output.
type report struct {
	OPAVersion string  `json:"opa_version"`
	OPAURL     string  `json:"opa_url"`
	Mix        string  `json:"mix"`
	GOMAXPROCS int     `json:"gomaxprocs"`
	CPUs       int     `json:"cpus"`
	Checked    int     `json:"checked"`
	Warmup     int     `json:"warmup"`
	Levels     []level `json:"levels"`
}

// level is both modes at one concurrency.
type level struct {
	Concurrency int         `json:"concurrency"`
	OPA         measurement `json:"opa_rest"`
	Gated       measurement `json:"gated_in_process"`
	Ratio       float64     `json:"ratio_gated_over_opa"`
	// CPURatio is OPA's CPU per decision over gated's, where /proc tells
	// both: how many times the work the REST path costs the decider.
	CPURatio float64 `json:"cpu_ratio_opa_over_gated,omitempty"`
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseOptions(args, os.Stderr)
	if err != nil {
		return err
	}
	reg, err := personas.Builtin()
	if err != nil {
		return fmt.Errorf("loading the built-in personas: %w", err)
	}
	// The policy `gated serve` builds from the embedded default bundle.
	pol, err := policies.NewLive(ctx, policies.Sources{}, nil)
	if err != nil {
		return fmt.Errorf("building the default policy: %w", err)
	}
	w, err := newWorkload(o.n, time.Now(), reg)
	if err != nil {
		return err
	}
	probe := newOPAClient(o.opaURL, 1)
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = probe.health(hctx, o.opaURL)
	cancel()
	if err != nil {
		return err
	}
	checked, err := compare(ctx, w, pol, reg, probe, o.check)
	probe.close()
	if err != nil {
		return err
	}
	rep := report{
		OPAVersion: moduleVersion("github.com/open-policy-agent/opa"), OPAURL: o.opaURL,
		Mix: mix, GOMAXPROCS: runtime.GOMAXPROCS(0), CPUs: runtime.NumCPU(),
		Checked: checked, Warmup: o.warmup,
	}
	fmt.Fprintf(stdout, "OPA %s REST at %s against gated in process: default bundle, mix %s, %d decisions per run after %d warm-up, GOMAXPROCS %d\n",
		rep.OPAVersion, o.opaURL, rep.Mix, o.n, o.warmup, rep.GOMAXPROCS)
	fmt.Fprintf(stdout, "checked %d decisions: OPA and gated agree\n\n", checked)
	const row = "%5v  %-16s  %11v  %8v  %8v  %8v  %10v  %7v  %12v\n"
	fmt.Fprintf(stdout, row, "c", "mode", "decisions/s", "p50", "p99", "max", "driver CPU", "OPA CPU", "CPU/decision")
	for _, c := range o.levels {
		l, err := measureLevel(ctx, w, pol, reg, o, c)
		if err != nil {
			return err
		}
		rep.Levels = append(rep.Levels, l)
		for _, m := range []measurement{l.OPA, l.Gated} {
			fmt.Fprintf(stdout, row, c, m.Mode, strconv.FormatFloat(m.PerSecond, 'f', 0, 64),
				fmtMicros(m.P50us), fmtMicros(m.P99us), fmtMicros(m.MaxUS), fmtCores(m.DriverCores), fmtCores(m.OPACores), fmtCPU(m.DeciderCPUus))
		}
		ratio := fmt.Sprintf("%5v  %-16s  %11v", c, "gated/OPA", strconv.FormatFloat(l.Ratio, 'f', 2, 64)+"x")
		if l.CPURatio > 0 {
			ratio += fmt.Sprintf("  (OPA spends %.2fx gated's CPU per decision)", l.CPURatio)
		}
		fmt.Fprintln(stdout, ratio)
	}
	if o.jsonOut == "" {
		return nil
	}
	raw, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.jsonOut, append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the JSON report: %w", err)
	}
	return nil
}

// compare decides up to k inputs, spread over the workload, both ways and
// fails on any difference. It returns how many it compared.
func compare(ctx context.Context, w *workload, pol engine.Policy, reg engine.Personas, opa *opaClient, k int) (int, error) {
	n := len(w.inputs)
	k = min(k, n)
	var diffs []string
	for j := range k {
		i := j * n / k
		want, err := w.decideInProcess(ctx, pol, reg, i)
		if err != nil {
			return 0, fmt.Errorf("deciding input %d in process: %w", i, err)
		}
		od, err := opa.decision(ctx, w.bodies[i])
		if err != nil {
			return 0, fmt.Errorf("deciding input %d on OPA: %w", i, err)
		}
		got, err := od.policyDecision()
		if err != nil {
			return 0, fmt.Errorf("reading OPA's decision on input %d: %w", i, err)
		}
		if d := diffDecisions(want, got); d != "" {
			diffs = append(diffs, fmt.Sprintf("input %d (%s):\n  %s", i, w.paths[i], d))
		}
	}
	if len(diffs) > 0 {
		return 0, fmt.Errorf("OPA and gated decide %d of %d inputs differently; the comparison is void:\n%s",
			len(diffs), k, strings.Join(diffs[:min(len(diffs), 3)], "\n"))
	}
	return k, nil
}

// measureLevel measures both modes at concurrency c, OPA first.
func measureLevel(ctx context.Context, w *workload, pol engine.Policy, reg engine.Personas, o options, c int) (level, error) {
	n := len(w.inputs)
	opa := newOPAClient(o.opaURL, c)
	defer opa.close()
	bufs := make([]bytes.Buffer, c)
	viaOPA := func(ctx context.Context, worker, i int) error {
		i %= n
		got, err := opa.outcome(ctx, w.bodies[i], &bufs[worker])
		if err == nil {
			err = expect(w.paths[i], got)
		}
		if err != nil {
			return fmt.Errorf("OPA on input %d: %w", i, err)
		}
		return nil
	}
	inProcess := func(ctx context.Context, _, i int) error {
		i %= n
		d, err := w.decideInProcess(ctx, pol, reg, i)
		if err == nil {
			err = expect(w.paths[i], outcome{denied: len(d.Denies) > 0, reviewed: d.Review.Required})
		}
		if err != nil {
			return fmt.Errorf("gated on input %d: %w", i, err)
		}
		return nil
	}
	l := level{Concurrency: c}
	var err error
	if l.OPA, err = warmAndMeasure(ctx, "opa-rest", c, n, o, viaOPA); err != nil {
		return l, err
	}
	if l.Gated, err = warmAndMeasure(ctx, "gated-in-process", c, n, o, inProcess); err != nil {
		return l, err
	}
	l.OPA.DeciderCPUus = l.OPA.OPACores * 1e6 / l.OPA.PerSecond
	l.Gated.DeciderCPUus = l.Gated.DriverCores * 1e6 / l.Gated.PerSecond
	l.Ratio = l.Gated.PerSecond / l.OPA.PerSecond
	if l.OPA.DeciderCPUus > 0 && l.Gated.DeciderCPUus > 0 {
		l.CPURatio = l.OPA.DeciderCPUus / l.Gated.DeciderCPUus
	}
	return l, nil
}

func warmAndMeasure(ctx context.Context, mode string, c, n int, o options, d decide) (measurement, error) {
	if o.warmup > 0 {
		if _, err := measure(ctx, mode, c, o.warmup, 0, d); err != nil {
			return measurement{}, fmt.Errorf("warming up %s at c=%d: %w", mode, c, err)
		}
	}
	m, err := measure(ctx, mode, c, n, o.opaPID, d)
	if err != nil {
		return m, fmt.Errorf("measuring %s at c=%d: %w", mode, c, err)
	}
	return m, nil
}

// moduleVersion is the version of module path this command was built
// with: the OPA gated links and the script builds its server from.
func moduleVersion(path string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	for _, m := range info.Deps {
		if m.Path == path {
			return m.Version
		}
	}
	return "(unknown)"
}

func fmtMicros(us float64) string {
	if us >= 1000 {
		return strconv.FormatFloat(us/1000, 'f', 2, 64) + "ms"
	}
	return strconv.FormatFloat(us, 'f', 0, 64) + "µs"
}

func fmtCPU(us float64) string {
	if us == 0 {
		return "-"
	}
	return fmtMicros(us)
}

func fmtCores(c float64) string {
	if c == 0 {
		return "-"
	}
	return strconv.FormatFloat(c, 'f', 2, 64)
}
