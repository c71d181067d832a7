package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/bench"
)

type benchOptions struct {
	n           int
	mix         string
	concurrency string
	natsURL     string
	natsConn    natsConnOptions
	tenant      string
	llmLatency  time.Duration
	llmListen   string
	probeRate   float64
	floor       bool
	timeout     time.Duration
	jsonOut     string
	pid         int
	serveArgs   []string
	serveEnv    []string
	keep        bool
	ramp        time.Duration
	warmup      int
	pad         int
	progress    string
	// fair runs the fairness measurement instead (runFairBench).
	fair      bool
	fairFlood int
	fairLimit int
	prefill   int
	curve     string
}

func benchCmd() *cobra.Command {
	o := benchOptions{}
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput and latency: gated's paths against bare JetStream, in one run",
		Long: `bench publishes proposals the way a fleet does (JetStream publish with a
message id, one wildcard subscription for the verdicts) and measures, per
path, answers per second and the latency from publish to verdict:

  denied  asks to skip review; the policy rejects it
  read    a read; the policy approves it without review
  plugin  a restart the SOP catalog covers, approved by the sop reviewer plugin
  llm     a restart reviewed by the llm plugin alone against a scripted
          model that answers after --llm-latency (persona bench-llm)

A verdict counts as expected only with its path's outcome, stage and
reviewer plugins (none, sop alone, llm alone).

Without --nats-url it starts its own gated serve (this binary, an embedded
NATS server, a temporary data directory, a policy data file that lets the
llm path's proposals be reviewed by bench-llm instead of the routed persona)
and reports that process's peak RSS and CPU. With --nats-url it measures a
running deployment; the llm path then needs a persona bench-llm there and
the same reviewer_overrides entry (see docs/BENCHMARKS.md).

Then, unless --floor=false, the same counts, concurrency and message sizes
go through bare JetStream on the same server (publish, durable consume,
log append, reply) and each path's gated/floor ratio is reported.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.fair {
				return runFairBench(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			return runBench(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := c.Flags()
	f.IntVarP(&o.n, "proposals", "n", 20000, "proposals to send, shared out over the paths by --mix")
	f.StringVar(&o.mix, "mix", "denied=1,read=1,plugin=1", "weight of each path: denied, read, plugin, llm")
	f.StringVarP(&o.concurrency, "concurrency", "c", "64", "proposals in flight: one number shared out by weight, or per path (llm=2000,read=8)")
	f.StringVar(&o.natsURL, "nats-url", "", "measure the gated deployment on these NATS servers; empty starts an embedded one")
	o.natsConn.register(f)
	f.StringVar(&o.tenant, "tenant", "bench", "tenant the proposals are sent as")
	f.DurationVar(&o.llmLatency, "llm-latency", 2*time.Second, "how long the scripted model takes to answer")
	f.StringVar(&o.llmListen, "llm-listen", "", "with --nats-url: serve the scripted model on this address (the deployment's bench-llm persona must reach it)")
	f.DurationVar(&o.ramp, "ramp", 0, "start each path's senders spread over this long instead of all at once, so a large -c reaches its steady state without an opening burst")
	f.Float64Var(&o.probeRate, "probe-rate", 0, "also send policy-decided proposals at this rate per second while the load runs, and report their latency apart")
	f.BoolVar(&o.floor, "floor", true, "measure the bare JetStream floor after gated, on the same server")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "longest wait for one verdict; a proposal waiting longer counts as an error")
	f.StringVar(&o.jsonOut, "json", "", "also write the report as JSON to this file")
	f.IntVar(&o.pid, "pid", 0, "with --nats-url: PID of a local gated whose RSS and CPU to report")
	f.StringArrayVar(&o.serveArgs, "serve-arg", nil, "extra argument for the embedded gated serve, e.g. --serve-arg=--max-in-flight=4096 (repeatable)")
	f.StringArrayVar(&o.serveEnv, "serve-env", nil, "environment variable KEY=VALUE for the embedded gated serve only, e.g. --serve-env GOMEMLIMIT=256MiB (repeatable)")
	f.BoolVar(&o.keep, "keep", false, "keep the embedded gated's directory (data, log) after the run")
	f.IntVar(&o.warmup, "warmup", -1, "policy-decided proposals sent first and not measured (-1: a tenth of -n, at most 2000)")
	f.IntVar(&o.pad, "pad", 0, "bytes added to every proposal's reason, for larger messages")
	f.StringVar(&o.progress, "progress", "auto", "progress bar on stderr: auto (on a terminal), on or off")
	f.BoolVar(&o.fair, "fair", false, "measure fairness instead: --tenant's -n llm-path reviews alone, then beside tenant bench-flood keeping --fair-flood reviews in flight against a reviews_in_flight budget of --fair-limit, in one run (embedded gated only)")
	f.IntVar(&o.fairFlood, "fair-flood", 256, "with --fair: the flooding tenant's proposals in flight")
	f.IntVar(&o.fairLimit, "fair-limit", 8, "with --fair: the flooding tenant's reviews_in_flight budget")
	f.IntVar(&o.prefill, "prefill", 0, "before measuring, fill the embedded gated's store with the histories of this many policy-decided proposals, copied from the warm-up's")
	f.StringVar(&o.curve, "prefill-curve", "", "run the bench once per prefill size, each on a new embedded gated, and report the rates side by side, e.g. 0,100000,1000000")
	return c
}

func (o *benchOptions) validate() (bench.Mix, bench.Concurrency, error) {
	switch {
	case o.n < 1:
		return nil, nil, usageError("-n %d must be at least 1", o.n)
	case o.timeout <= 0:
		return nil, nil, usageError("--timeout %s must be positive", o.timeout)
	case o.ramp < 0 || o.ramp > time.Hour:
		return nil, nil, usageError("--ramp %s must be from 0 to 1h", o.ramp)
	case o.llmLatency < 0:
		return nil, nil, usageError("--llm-latency %s must not be negative", o.llmLatency)
	case o.probeRate < 0 || o.probeRate > 100000:
		return nil, nil, usageError("--probe-rate %g must be from 0 to 100000", o.probeRate)
	case o.pad < 0 || o.pad > 512<<10:
		return nil, nil, usageError("--pad %d must be from 0 to 524288", o.pad)
	case !engine.ValidTenant(o.tenant):
		return nil, nil, usageError("--tenant %q must match [a-z0-9_-]{1,64}", o.tenant)
	case o.natsURL == "" && (o.pid != 0 || o.llmListen != ""):
		return nil, nil, usageError("--pid and --llm-listen apply to a deployment given by --nats-url")
	case o.natsURL != "" && len(o.serveArgs) > 0:
		return nil, nil, usageError("--serve-arg applies to the embedded gated; it cannot change a deployment given by --nats-url")
	case o.natsURL != "" && len(o.serveEnv) > 0:
		return nil, nil, usageError("--serve-env applies to the embedded gated; it cannot change a deployment given by --nats-url")
	case len(o.natsConn.authFlags()) > 0 && o.natsURL == "":
		return nil, nil, usageError("%s apply to an external server: give --nats-url too", strings.Join(o.natsConn.authFlags(), ", "))
	case o.progress != "auto" && o.progress != "on" && o.progress != "off":
		return nil, nil, usageError("--progress %q: want auto, on or off", o.progress)
	case o.prefill < 0 || o.prefill > bench.MaxPrefill:
		return nil, nil, usageError("--prefill %d must be from 0 to %d", o.prefill, bench.MaxPrefill)
	case o.natsURL != "" && (o.prefill > 0 || o.curve != ""):
		return nil, nil, usageError("--prefill and --prefill-curve write into the store of the embedded gated; they cannot be used with --nats-url")
	case o.prefill > 0 && o.curve != "":
		return nil, nil, usageError("give --prefill or --prefill-curve, not both")
	case o.curve != "" && o.jsonOut != "" && !strings.HasSuffix(o.jsonOut, ".json"):
		return nil, nil, usageError("--json %q: with --prefill-curve it must end in .json (each size's report gets its own file)", o.jsonOut)
	}
	for _, kv := range o.serveEnv {
		if err := bench.CheckEnv(kv); err != nil {
			return nil, nil, usageError("--serve-env: %v", err)
		}
	}
	mix, err := bench.ParseMix(o.mix)
	if err != nil {
		return nil, nil, usageError("--mix: %v", err)
	}
	conc, err := bench.ParseConcurrency(o.concurrency, mix)
	if err != nil {
		return nil, nil, usageError("--concurrency: %v", err)
	}
	return mix, conc, nil
}

func runBench(ctx context.Context, o benchOptions, stdout, stderr io.Writer) error {
	if _, _, err := o.validate(); err != nil {
		return err
	}
	if o.curve != "" {
		return runBenchCurve(ctx, o, stdout, stderr)
	}
	_, err := benchOnce(ctx, o, stdout, stderr)
	return err
}

// benchOnce runs one bench and prints its report; the report is returned
// also when the run found errors.
func benchOnce(ctx context.Context, o benchOptions, stdout, stderr io.Writer) (rep *bench.Report, err error) {
	mix, conc, err := o.validate()
	if err != nil {
		return nil, err
	}
	plan := bench.Plan{Counts: mix.Split(o.n), Concurrency: conc, Ramp: o.ramp}
	rep = &bench.Report{
		Mode: "embedded",
		Machine: bench.Machine{CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
			GoVersion: runtime.Version(), Gated: version},
		Config: bench.Config{N: o.n, Mix: mix, Concurrency: conc, Counts: plan.Counts, ProbeRate: o.probeRate, Started: time.Now().UTC()},
	}
	if o.ramp > 0 {
		rep.Config.Ramp = o.ramp.String()
	}
	if plan.Counts[bench.PathLLM] > 0 {
		rep.Config.LLMLatency = o.llmLatency.String()
	}
	nonce := newNonce()

	var llm *bench.LLMServer
	if o.natsURL == "" || o.llmListen != "" {
		addr := o.llmListen
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		if llm, err = bench.ServeLLM(addr, o.llmLatency); err != nil {
			return nil, err
		}
		defer llm.Close()
	}

	servers, gatedPID, auditKeyPath, dataDir, gatedHTTP := o.natsURL, o.pid, "", "", ""
	if o.natsURL == "" {
		dir, err := os.MkdirTemp("", "gated-bench-")
		if err != nil {
			return nil, err
		}
		if !o.keep {
			defer os.RemoveAll(dir)
		} else {
			fmt.Fprintf(stderr, "the embedded gated's files stay in %s\n", dir)
		}
		exe, err := os.Executable()
		if err != nil {
			return rep, fmt.Errorf("finding the gated binary to start: %w", err)
		}
		fmt.Fprintln(stderr, "starting gated serve with an embedded NATS server…")
		// The bench measures gated's paths, not its budgets: the tenant's
		// limits are lifted (still counted), so that the built-in ones do
		// not refuse the load. A --serve-arg=--budgets comes later and wins.
		budgets := dir + string(os.PathSeparator) + "budgets.yaml"
		file := fmt.Sprintf("tenants:\n  %s: {tenant: %s, agent: %s}\n", o.tenant, unlimitedScope, unlimitedScope)
		if err := os.WriteFile(budgets, []byte(file), 0o644); err != nil {
			return nil, err
		}
		// The tenant's turns stay at serve's default: its reviews hold
		// none while they wait on the model.
		own := []string{"--budgets=" + budgets}
		args := embeddedServeArgs(conc, append(own, o.serveArgs...))
		g, err := bench.StartGated(ctx, bench.GatedOptions{Exe: exe, Dir: dir, LLMBaseURL: llm.BaseURL(), Args: args, Env: o.serveEnv})
		if err != nil {
			return nil, err
		}
		defer func() {
			if serr := g.Stop(time.Minute); serr != nil && err == nil {
				err = serr
			}
		}()
		dataDir = filepath.Join(dir, "data")
		servers, gatedPID, auditKeyPath = g.URL, g.PID, filepath.Join(dataDir, auditKeyFile)
		gatedHTTP = g.HTTP
	} else {
		rep.Mode = "external"
	}

	nc, err := o.natsConn.connect(servers, "gated-bench", nats.MaxReconnects(-1))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}

	// Warm up on the policy paths, so the run starts with the server's
	// files, gated's caches and the connections in place.
	warm := o.warmup
	if warm < 0 {
		warm = min(o.n/10, 2000)
	}
	if o.prefill > 0 {
		warm = max(warm, 2) // the prefill copies a denied and a read proposal of the warm-up
	}
	rep.Config.Warmup = warm
	warmGen, warmStart := bench.Proposals{Tenant: o.tenant, Nonce: nonce + "w"}, time.Now()
	if warm > 0 {
		wplan := bench.Plan{Counts: bench.Mix{bench.PathDenied: 1, bench.PathRead: 1}.Split(warm),
			Concurrency: bench.Concurrency{bench.PathDenied: max(conc.Total()/2, 1), bench.PathRead: max(conc.Total()/2, 1)}}
		if _, err := driveGated(ctx, nc, warmGen, wplan, o, "warm-up", stderr); err != nil {
			return nil, err
		}
	}
	if o.prefill > 0 {
		if rep.Prefill, err = prefillStore(ctx, js, o, warmGen, warmStart, nonce+"f", auditKeyPath, stderr); err != nil {
			return nil, err
		}
	}

	auditBefore := streamBytes(ctx, js, audit.Stream)
	gatedSampler := startSampler(gatedPID, true)
	if gatedSampler != nil && gatedHTTP != "" {
		gatedSampler.ReadGoRuntime(bench.GoRuntimeOf(gatedHTTP))
	}
	benchSampler := startSampler(os.Getpid(), false)
	gen := bench.Proposals{Tenant: o.tenant, Nonce: nonce, Pad: o.pad}
	fleet, recs, probe, err := measureGated(ctx, nc, gen, plan, o, stderr)
	if err != nil {
		return nil, err
	}
	defer fleet.Close()
	rep.GatedProc = stopSampler(gatedSampler, rep)
	rep.BenchProc = stopSampler(benchSampler, rep)
	rep.Gated = bench.Summaries(recs)
	if probe != nil {
		s := probe.Summary("probe")
		rep.Probe = &s
	}
	if llm != nil {
		rep.LLMCalls, _ = llm.Calls()
		rep.LLMArrivalMS = float64(llm.Arrivals().Microseconds()) / 1000
	}
	answered := 0
	for _, s := range rep.Gated {
		if s.Path != "all" {
			answered += s.Answered
		}
	}
	if probe != nil {
		answered += rep.Probe.Answered
	}
	if after := streamBytes(ctx, js, audit.Stream); auditBefore >= 0 && after > auditBefore && answered > 0 {
		rep.AuditBytes = int((after - auditBefore) / int64(answered))
		// On disk, the whole stream's share applies to the run's records:
		// the block being written is whole, the others compressed.
		if dataDir != "" {
			if disk := bench.SettledDiskBytes(dataDir, audit.Stream, 200*time.Millisecond, 10*time.Second); disk > 0 {
				rep.AuditDiskBytes = int(float64(rep.AuditBytes) * float64(disk) / float64(after))
			}
		}
	} else {
		rep.Notes = append(rep.Notes, "the audit stream could not be read; the floor's log records are 2048 bytes")
	}

	if o.floor {
		sizes := map[bench.Path]bench.FloorSizes{}
		for _, s := range rep.Gated {
			p := bench.Path(s.Path)
			if plan.Counts[p] == 0 {
				continue
			}
			sizes[p] = bench.FloorSizes{Proposal: fleet.BodySize(p), Reply: s.ReplyBytes, Log: cmpOr(rep.AuditBytes, 2048)}
		}
		floor, err := measureFloor(ctx, nc, servers, o, sizes, plan, nonce, stderr)
		if err != nil {
			return rep, fmt.Errorf("measuring the floor: %w", err)
		}
		rep.Floor = bench.Summaries(floor)
		rep.Ratio = bench.Ratios(rep.Gated, rep.Floor)
	}

	rep.Print(stdout)
	if o.jsonOut != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(o.jsonOut, append(data, '\n'), 0o644); err != nil {
			return rep, fmt.Errorf("writing --json: %w", err)
		}
	}
	for _, s := range append(rep.Gated, rep.Floor...) {
		if s.Path != "all" && (s.Errors > 0 || s.Unexpected > 0) {
			return rep, fmt.Errorf("%s: %d proposals got an unexpected verdict and %d none", s.Path, s.Unexpected, s.Errors)
		}
	}
	return rep, nil
}

// embeddedServeArgs sizes the embedded gated for the load: room for every
// proposal the fleet keeps in flight, twice over, and an llm reviewer that
// runs all of the llm path's reviews at once, as a deployment expecting
// that load would be configured. --serve-arg comes last, so it wins.
func embeddedServeArgs(conc bench.Concurrency, extra []string) []string {
	args := []string{
		fmt.Sprintf("--max-in-flight=%d", max(1024, 2*conc.Total())),
		fmt.Sprintf("--llm-max-concurrency=%d", max(DefaultLLMMaxConcurrency, conc[bench.PathLLM])),
	}
	return append(args, extra...)
}

// measureGated runs the plan against gated, with the probe alongside.
func measureGated(ctx context.Context, nc *nats.Conn, gen bench.Proposals, plan bench.Plan, o benchOptions, stderr io.Writer) (*bench.GatedFleet, map[bench.Path]*bench.Recorder, *bench.Recorder, error) {
	fleet, err := bench.NewGatedFleet(nc, gen, plan.Counts, o.timeout)
	if err != nil {
		return nil, nil, nil, err
	}
	fleet.SameClock = o.sameClock()
	var probe *bench.Recorder
	var probeWG sync.WaitGroup
	pctx, stopProbe := context.WithCancel(ctx)
	if o.probeRate > 0 {
		// The probe's proposals are built as they go: a few per second.
		pgen := gen
		pgen.Nonce += "p"
		pfleet, err := bench.NewGatedFleet(nc, pgen, nil, o.timeout)
		if err != nil {
			stopProbe()
			return nil, nil, nil, err
		}
		defer pfleet.Close()
		pfleet.SameClock = o.sameClock()
		probeWG.Go(func() {
			probe = bench.Probe(pctx, o.probeRate, func(ctx context.Context, p bench.Path, i int) (bench.Answer, error) {
				return pfleet.SendNew(ctx, p, i)
			})
		})
	}
	recs := runWithProgress(ctx, plan, fleet.Send, o, "gated", stderr)
	stopProbe()
	probeWG.Wait()
	return fleet, recs, probe, nil
}

// sameClock says gated runs on this host: embedded, or named by --pid.
// Then the verdict's decided_at can be compared with this process's clock
// (bench.StageTimes).
func (o benchOptions) sameClock() bool { return o.natsURL == "" || o.pid > 0 }

// driveGated runs a plan against gated without keeping the fleet.
func driveGated(ctx context.Context, nc *nats.Conn, gen bench.Proposals, plan bench.Plan, o benchOptions, label string, stderr io.Writer) (map[bench.Path]*bench.Recorder, error) {
	fleet, err := bench.NewGatedFleet(nc, gen, plan.Counts, o.timeout)
	if err != nil {
		return nil, err
	}
	defer fleet.Close()
	recs := runWithProgress(ctx, plan, fleet.Send, o, label, stderr)
	for p, r := range recs {
		if s := r.Summary(string(p)); s.Errors > 0 || s.Unexpected > 0 {
			return nil, fmt.Errorf("%s: %s: %d unexpected verdicts, %d without one; first: %s", label, p, s.Unexpected, s.Errors, s.FirstError)
		}
	}
	return recs, nil
}

// measureFloor runs the plan through bare JetStream on the same server.
func measureFloor(ctx context.Context, nc *nats.Conn, servers string, o benchOptions, sizes map[bench.Path]bench.FloorSizes, plan bench.Plan, nonce string, stderr io.Writer) (map[bench.Path]*bench.Recorder, error) {
	rnc, err := o.natsConn.connect(servers, "gated-bench-floor")
	if err != nil {
		return nil, err
	}
	defer rnc.Close()
	floor, err := bench.StartFloor(ctx, nc, rnc, bench.FloorOptions{
		Sizes: sizes, InFlight: 1024, PullMax: 512, Replicas: 1, Timeout: o.timeout, Nonce: nonce,
	})
	if err != nil {
		return nil, err
	}
	recs := runWithProgress(ctx, plan, floor.Send, o, "floor", stderr)
	if err := floor.Close(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	return recs, nil
}

// runWithProgress drives the plan and draws a progress bar meanwhile.
func runWithProgress(ctx context.Context, plan bench.Plan, send bench.Sender, o benchOptions, label string, stderr io.Writer) map[bench.Path]*bench.Recorder {
	var done atomic.Int64
	stop := startProgress(stderr, o.progress, label, plan.Total(), &done)
	recs := bench.Drive(ctx, plan, send, &done)
	stop()
	return recs
}

func startSampler(pid int, tree bool) *bench.Sampler {
	if pid <= 0 {
		return nil
	}
	s, err := bench.StartSampler(pid, tree, 100*time.Millisecond)
	if err != nil {
		return nil
	}
	return s
}

func stopSampler(s *bench.Sampler, rep *bench.Report) *bench.ProcUsage {
	if s == nil {
		return nil
	}
	u, err := s.Stop()
	if err != nil {
		rep.Notes = append(rep.Notes, "reading a process's usage: "+err.Error())
		return nil
	}
	return &u
}

// streamBytes is a stream's size, or -1 when it cannot be read.
func streamBytes(ctx context.Context, js jetstream.JetStream, name string) int64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return -1
	}
	info, err := s.Info(ctx)
	if err != nil {
		return -1
	}
	return int64(info.State.Bytes)
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

func newNonce() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "b" + hex.EncodeToString(b[:])
}
