package bench

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

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/internal/progress"
)

// Options are the settings of one bench run, as gated-bench's flags give
// them. The zero value is not usable: N, Mix, Concurrency, Tenant,
// Timeout and Progress have no defaults here (the command's flags hold
// them).
type Options struct {
	// N is how many proposals to send, shared out over the paths by Mix.
	N int
	// Mix weighs the paths: "denied=1,read=1" (ParseMix).
	Mix string
	// Concurrency is the proposals in flight: one number shared out by
	// weight, or per path (ParseConcurrency).
	Concurrency string
	// NATSURL names the NATS servers of a running deployment to measure;
	// empty starts an embedded gated (the binary Gated).
	NATSURL string
	// Connect opens a connection to servers under the name given, with
	// the command's authentication and TLS settings; extra options come
	// last and win. Nil connects with no credentials.
	Connect func(servers, name string, extra ...nats.Option) (*nats.Conn, error)
	// AuthFlags names the authentication and TLS flags the command was
	// given; they need NATSURL.
	AuthFlags []string
	// Tenant is the tenant the proposals are sent as.
	Tenant string
	// LLMLatency is how long the scripted model takes to answer.
	LLMLatency time.Duration
	// LLMListen, with NATSURL, is the address to serve the scripted model
	// on, for the deployment's bench-llm persona.
	LLMListen string
	// ProbeRate sends policy-decided proposals at this rate per second
	// while the load runs, measured apart; 0 sends none.
	ProbeRate float64
	// Floor measures the bare JetStream floor after gated.
	Floor bool
	// Timeout is the longest wait for one verdict.
	Timeout time.Duration
	// JSON, when set, is the file the report is also written to as JSON.
	JSON string
	// PID, with NATSURL, is a local gated whose RSS and CPU to report.
	PID int
	// ServeArgs and ServeEnv are added to the embedded gated's command
	// line and environment; they conflict with NATSURL.
	ServeArgs, ServeEnv []string
	// Keep keeps the embedded gated's directory after the run.
	Keep bool
	// Ramp spreads each path's senders' start over this long.
	Ramp time.Duration
	// Warmup is the policy-decided proposals sent first and not measured;
	// -1 is a tenth of N, at most 2000.
	Warmup int
	// Pad is bytes added to every proposal's reason.
	Pad int
	// Progress draws a progress bar on stderr: auto (on a terminal), on
	// or off.
	Progress string
	// Fair measures fairness instead (RunFair): the quiet tenant's
	// llm-path reviews alone, then beside tenant bench-flood keeping
	// FairFlood reviews in flight against a reviews_in_flight budget of
	// FairLimit.
	Fair                 bool
	FairFlood, FairLimit int
	// Prefill fills the embedded gated's store with the histories of this
	// many policy-decided proposals before measuring. Conflicts with
	// Curve and NATSURL.
	Prefill int
	// Curve runs the bench once per prefill size ("0,100000"), each on a
	// new embedded gated. Conflicts with Prefill and NATSURL.
	Curve string
	// Gated is the gated binary the embedded run starts.
	Gated string
	// Version is the gated version the report names.
	Version string
}

// Run runs the bench o describes and prints its report to stdout, its
// progress to stderr. Settings that cannot work are a *UsageError,
// returned before anything starts; a run in which a proposal got no
// verdict or an unexpected one is an error after the report is printed.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	if o.Fair {
		return runFair(ctx, o, stdout, stderr)
	}
	if _, _, err := o.validate(); err != nil {
		return err
	}
	if o.Curve != "" {
		return runCurve(ctx, o, stdout, stderr)
	}
	_, err := runOnce(ctx, o, stdout, stderr)
	return err
}

// connect connects with o.Connect, or without credentials when it is nil.
func (o Options) connect(servers, name string, extra ...nats.Option) (*nats.Conn, error) {
	if o.Connect != nil {
		return o.Connect(servers, name, extra...)
	}
	nc, err := nats.Connect(servers, append([]nats.Option{nats.Name(name)}, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s: %w", servers, err)
	}
	return nc, nil
}

func (o *Options) validate() (Mix, Concurrency, error) {
	switch {
	case o.N < 1:
		return nil, nil, usageError("-n %d must be at least 1", o.N)
	case o.Timeout <= 0:
		return nil, nil, usageError("--timeout %s must be positive", o.Timeout)
	case o.Ramp < 0 || o.Ramp > time.Hour:
		return nil, nil, usageError("--ramp %s must be from 0 to 1h", o.Ramp)
	case o.LLMLatency < 0:
		return nil, nil, usageError("--llm-latency %s must not be negative", o.LLMLatency)
	case o.ProbeRate < 0 || o.ProbeRate > 100000:
		return nil, nil, usageError("--probe-rate %g must be from 0 to 100000", o.ProbeRate)
	case o.Pad < 0 || o.Pad > 512<<10:
		return nil, nil, usageError("--pad %d must be from 0 to 524288", o.Pad)
	case !gated.ValidTenant(o.Tenant):
		return nil, nil, usageError("--tenant %q must match [a-z0-9_-]{1,64}", o.Tenant)
	case o.NATSURL == "" && (o.PID != 0 || o.LLMListen != ""):
		return nil, nil, usageError("--pid and --llm-listen apply to a deployment given by --nats-url")
	case o.NATSURL != "" && len(o.ServeArgs) > 0:
		return nil, nil, usageError("--serve-arg applies to the embedded gated; it cannot change a deployment given by --nats-url")
	case o.NATSURL != "" && len(o.ServeEnv) > 0:
		return nil, nil, usageError("--serve-env applies to the embedded gated; it cannot change a deployment given by --nats-url")
	case len(o.AuthFlags) > 0 && o.NATSURL == "":
		return nil, nil, usageError("%s apply to an external server: give --nats-url too", strings.Join(o.AuthFlags, ", "))
	case o.Progress != "auto" && o.Progress != "on" && o.Progress != "off":
		return nil, nil, usageError("--progress %q: want auto, on or off", o.Progress)
	case o.Prefill < 0 || o.Prefill > MaxPrefill:
		return nil, nil, usageError("--prefill %d must be from 0 to %d", o.Prefill, MaxPrefill)
	case o.NATSURL != "" && (o.Prefill > 0 || o.Curve != ""):
		return nil, nil, usageError("--prefill and --prefill-curve write into the store of the embedded gated; they cannot be used with --nats-url")
	case o.Prefill > 0 && o.Curve != "":
		return nil, nil, usageError("give --prefill or --prefill-curve, not both")
	case o.Curve != "" && o.JSON != "" && !strings.HasSuffix(o.JSON, ".json"):
		return nil, nil, usageError("--json %q: with --prefill-curve it must end in .json (each size's report gets its own file)", o.JSON)
	}
	for _, kv := range o.ServeEnv {
		if err := CheckEnv(kv); err != nil {
			return nil, nil, usageError("--serve-env: %v", err)
		}
	}
	mix, err := ParseMix(o.Mix)
	if err != nil {
		return nil, nil, usageError("--mix: %v", err)
	}
	conc, err := ParseConcurrency(o.Concurrency, mix)
	if err != nil {
		return nil, nil, usageError("--concurrency: %v", err)
	}
	return mix, conc, nil
}

// runOnce runs one bench and prints its report; the report is returned
// also when the run found errors.
func runOnce(ctx context.Context, o Options, stdout, stderr io.Writer) (rep *Report, err error) {
	mix, conc, err := o.validate()
	if err != nil {
		return nil, err
	}
	plan := Plan{Counts: mix.Split(o.N), Concurrency: conc, Ramp: o.Ramp}
	rep = &Report{
		Mode: "embedded",
		Machine: Machine{CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
			GoVersion: runtime.Version(), Gated: o.Version},
		Config: Config{N: o.N, Mix: mix, Concurrency: conc, Counts: plan.Counts, ProbeRate: o.ProbeRate, Started: time.Now().UTC()},
	}
	if o.Ramp > 0 {
		rep.Config.Ramp = o.Ramp.String()
	}
	if plan.Counts[PathLLM] > 0 {
		rep.Config.LLMLatency = o.LLMLatency.String()
	}
	if o.NATSURL == "" && o.Gated == "" {
		return nil, usageError("%s", errNoGated)
	}
	nonce := newNonce()

	var llm *LLMServer
	if o.NATSURL == "" || o.LLMListen != "" {
		addr := o.LLMListen
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		if llm, err = ServeLLM(addr, o.LLMLatency); err != nil {
			return nil, err
		}
		defer llm.Close()
	}

	servers, gatedPID, auditKeyPath, dataDir, gatedHTTP := o.NATSURL, o.PID, "", "", ""
	if o.NATSURL == "" {
		dir, err := os.MkdirTemp("", "gated-bench-")
		if err != nil {
			return nil, err
		}
		if !o.Keep {
			defer os.RemoveAll(dir)
		} else {
			fmt.Fprintf(stderr, "the embedded gated's files stay in %s\n", dir)
		}
		fmt.Fprintln(stderr, "starting gated serve with an embedded NATS server…")
		// The bench measures gated's paths, not its budgets: the tenant's
		// limits are lifted (still counted), so that the built-in ones do
		// not refuse the load. A --serve-arg=--budgets comes later and wins.
		budgets := dir + string(os.PathSeparator) + "budgets.yaml"
		file := fmt.Sprintf("tenants:\n  %s: {tenant: %s, agent: %s}\n", o.Tenant, unlimitedScope, unlimitedScope)
		if err := os.WriteFile(budgets, []byte(file), 0o644); err != nil {
			return nil, err
		}
		// The tenant's turns stay at serve's default: its reviews hold
		// none while they wait on the model.
		own := []string{"--budgets=" + budgets}
		args := embeddedServeArgs(conc, append(own, o.ServeArgs...))
		g, err := StartGated(ctx, GatedOptions{Exe: o.Gated, Dir: dir, LLMBaseURL: llm.BaseURL(), Args: args, Env: o.ServeEnv})
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

	nc, err := o.connect(servers, "gated-bench", nats.MaxReconnects(-1))
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
	warm := o.Warmup
	if warm < 0 {
		warm = min(o.N/10, 2000)
	}
	if o.Prefill > 0 {
		warm = max(warm, 2) // the prefill copies a denied and a read proposal of the warm-up
	}
	rep.Config.Warmup = warm
	warmGen, warmStart := Proposals{Tenant: o.Tenant, Nonce: nonce + "w"}, time.Now()
	if warm > 0 {
		wplan := Plan{Counts: Mix{PathDenied: 1, PathRead: 1}.Split(warm),
			Concurrency: Concurrency{PathDenied: max(conc.Total()/2, 1), PathRead: max(conc.Total()/2, 1)}}
		if _, err := driveGated(ctx, nc, warmGen, wplan, o, "warm-up", stderr); err != nil {
			return nil, err
		}
	}
	if o.Prefill > 0 {
		if rep.Prefill, err = prefillStore(ctx, js, o, warmGen, warmStart, nonce+"f", auditKeyPath, stderr); err != nil {
			return nil, err
		}
	}

	auditBefore := streamBytes(ctx, js, audit.Stream)
	gatedSampler := startSampler(gatedPID, true)
	if gatedSampler != nil && gatedHTTP != "" {
		gatedSampler.ReadGoRuntime(GoRuntimeOf(gatedHTTP))
	}
	benchSampler := startSampler(os.Getpid(), false)
	gen := Proposals{Tenant: o.Tenant, Nonce: nonce, Pad: o.Pad}
	fleet, recs, probe, err := measureGated(ctx, nc, gen, plan, o, stderr)
	if err != nil {
		return nil, err
	}
	defer fleet.Close()
	rep.GatedProc = stopSampler(gatedSampler, rep)
	rep.BenchProc = stopSampler(benchSampler, rep)
	rep.Gated = Summaries(recs)
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
			if disk := SettledDiskBytes(dataDir, audit.Stream, 200*time.Millisecond, 10*time.Second); disk > 0 {
				rep.AuditDiskBytes = int(float64(rep.AuditBytes) * float64(disk) / float64(after))
			}
		}
	} else {
		rep.Notes = append(rep.Notes, "the audit stream could not be read; the floor's log records are 2048 bytes")
	}

	if o.Floor {
		sizes := map[Path]FloorSizes{}
		for _, s := range rep.Gated {
			p := Path(s.Path)
			if plan.Counts[p] == 0 {
				continue
			}
			sizes[p] = FloorSizes{Proposal: fleet.BodySize(p), Reply: s.ReplyBytes, Log: cmpOr(rep.AuditBytes, 2048)}
		}
		floor, err := measureFloor(ctx, nc, servers, o, sizes, plan, nonce, stderr)
		if err != nil {
			return rep, fmt.Errorf("measuring the floor: %w", err)
		}
		rep.Floor = Summaries(floor)
		rep.Ratio = Ratios(rep.Gated, rep.Floor)
	}

	rep.Print(stdout)
	if o.JSON != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(o.JSON, append(data, '\n'), 0o644); err != nil {
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
func embeddedServeArgs(conc Concurrency, extra []string) []string {
	args := []string{
		fmt.Sprintf("--max-in-flight=%d", max(1024, 2*conc.Total())),
		fmt.Sprintf("--llm-max-concurrency=%d", max(ServeLLMMaxConcurrency, conc[PathLLM])),
	}
	return append(args, extra...)
}

// measureGated runs the plan against gated, with the probe alongside.
func measureGated(ctx context.Context, nc *nats.Conn, gen Proposals, plan Plan, o Options, stderr io.Writer) (*GatedFleet, map[Path]*Recorder, *Recorder, error) {
	fleet, err := NewGatedFleet(nc, gen, plan.Counts, o.Timeout)
	if err != nil {
		return nil, nil, nil, err
	}
	fleet.SameClock = o.sameClock()
	var probe *Recorder
	var probeWG sync.WaitGroup
	pctx, stopProbe := context.WithCancel(ctx)
	if o.ProbeRate > 0 {
		// The probe's proposals are built as they go: a few per second.
		pgen := gen
		pgen.Nonce += "p"
		pfleet, err := NewGatedFleet(nc, pgen, nil, o.Timeout)
		if err != nil {
			stopProbe()
			return nil, nil, nil, err
		}
		defer pfleet.Close()
		pfleet.SameClock = o.sameClock()
		probeWG.Go(func() {
			probe = Probe(pctx, o.ProbeRate, func(ctx context.Context, p Path, i int) (Answer, error) {
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
// (StageTimes).
func (o Options) sameClock() bool { return o.NATSURL == "" || o.PID > 0 }

// driveGated runs a plan against gated without keeping the fleet.
func driveGated(ctx context.Context, nc *nats.Conn, gen Proposals, plan Plan, o Options, label string, stderr io.Writer) (map[Path]*Recorder, error) {
	fleet, err := NewGatedFleet(nc, gen, plan.Counts, o.Timeout)
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
func measureFloor(ctx context.Context, nc *nats.Conn, servers string, o Options, sizes map[Path]FloorSizes, plan Plan, nonce string, stderr io.Writer) (map[Path]*Recorder, error) {
	rnc, err := o.connect(servers, "gated-bench-floor")
	if err != nil {
		return nil, err
	}
	defer rnc.Close()
	floor, err := StartFloor(ctx, nc, rnc, FloorOptions{
		Sizes: sizes, InFlight: 1024, PullMax: 512, Replicas: 1, Timeout: o.Timeout, Nonce: nonce,
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
func runWithProgress(ctx context.Context, plan Plan, send Sender, o Options, label string, stderr io.Writer) map[Path]*Recorder {
	var done atomic.Int64
	stop := progress.Start(stderr, o.Progress, label, plan.Total(), &done)
	recs := Drive(ctx, plan, send, &done)
	stop()
	return recs
}

func startSampler(pid int, tree bool) *Sampler {
	if pid <= 0 {
		return nil
	}
	s, err := StartSampler(pid, tree, 100*time.Millisecond)
	if err != nil {
		return nil
	}
	return s
}

func stopSampler(s *Sampler, rep *Report) *ProcUsage {
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

// errNoGated says how to name the gated binary an embedded run starts.
const errNoGated = "no gated binary to start: give --gated, or put gated next to gated-bench or on PATH (make build builds both in bin/)"

// auditKeyFile is the audit key gated serve creates in its data directory
// when it runs the embedded server and is given no key file; the prefill
// MACs its records with it.
const auditKeyFile = "audit.key"

// ServeLLMMaxConcurrency is gated serve's default --llm-max-concurrency:
// the embedded gated gets at least as many, and more when the llm path
// keeps more reviews in flight.
const ServeLLMMaxConcurrency = 64
