package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gated/gated/internal/bench"
	"github.com/gated/gated/internal/natsconn"
)

// run parses the command line and runs the bench; only main exits.
func run(ctx context.Context, args []string) error {
	o := bench.Options{Version: version}
	var conn natsconn.Options
	c := &cobra.Command{
		Use:   "gated-bench",
		Short: "Measure throughput and latency: gated's paths against bare JetStream, in one run",
		Long: `gated-bench publishes proposals the way a fleet does (JetStream publish
with a message id, one wildcard subscription for the verdicts) and
measures, per path, answers per second and the latency from publish to
verdict:

  denied  asks to skip review; the policy rejects it
  read    a read; the policy approves it without review
  plugin  a restart the SOP catalog covers, approved by the sop reviewer plugin
  llm     a restart reviewed by the llm plugin alone against a scripted
          model that answers after --llm-latency (persona bench-llm)

A verdict counts as expected only with its path's outcome, stage and
reviewer plugins (none, sop alone, llm alone).

Without --nats-url it starts its own gated serve (the --gated binary, an
embedded NATS server, a temporary data directory, a policy data file that
lets the llm path's proposals be reviewed by bench-llm instead of the
routed persona) and reports that process's peak RSS and CPU. With
--nats-url it measures a running deployment; the llm path then needs a
persona bench-llm there and the same reviewer_overrides entry (see
docs/BENCHMARKS.md).

Then, unless --floor=false, the same counts, concurrency and message sizes
go through bare JetStream on the same server (publish, durable consume,
log append, reply) and each path's gated/floor ratio is reported.

Any flag the command line leaves unset can be given as GATED_<FLAG>
(--nats-url is GATED_NATS_URL), as with gated.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		PreRunE:       func(cmd *cobra.Command, _ []string) error { return flagsFromEnv(cmd.Flags()) },
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.AuthFlags = conn.AuthFlags()
			o.Connect = func(servers, name string, extra ...nats.Option) (*nats.Conn, error) {
				return conn.Connect(servers, name, extra...)
			}
			if o.NATSURL == "" && o.Gated == "" {
				o.Gated = findGated()
			}
			return bench.Run(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	c.SetArgs(args)
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError("%v", err) })
	f := c.Flags()
	f.IntVarP(&o.N, "proposals", "n", 20000, "proposals to send, shared out over the paths by --mix")
	f.StringVar(&o.Mix, "mix", "denied=1,read=1,plugin=1", "weight of each path: denied, read, plugin, llm")
	f.StringVarP(&o.Concurrency, "concurrency", "c", "64", "proposals in flight: one number shared out by weight, or per path (llm=2000,read=8)")
	f.StringVar(&o.NATSURL, "nats-url", "", "measure the gated deployment on these NATS servers; empty starts an embedded one")
	conn.Register(f)
	f.StringVar(&o.Gated, "gated", "", "gated binary the embedded run starts (default: the gated next to gated-bench, else gated on PATH)")
	f.StringVar(&o.Tenant, "tenant", "bench", "tenant the proposals are sent as")
	f.DurationVar(&o.LLMLatency, "llm-latency", 2*time.Second, "how long the scripted model takes to answer")
	f.StringVar(&o.LLMListen, "llm-listen", "", "with --nats-url: serve the scripted model on this address (the deployment's bench-llm persona must reach it)")
	f.DurationVar(&o.Ramp, "ramp", 0, "start each path's senders spread over this long instead of all at once, so a large -c reaches its steady state without an opening burst")
	f.Float64Var(&o.ProbeRate, "probe-rate", 0, "also send policy-decided proposals at this rate per second while the load runs, and report their latency apart")
	f.BoolVar(&o.Floor, "floor", true, "measure the bare JetStream floor after gated, on the same server")
	f.DurationVar(&o.Timeout, "timeout", 2*time.Minute, "longest wait for one verdict; a proposal waiting longer counts as an error")
	f.StringVar(&o.JSON, "json", "", "also write the report as JSON to this file")
	f.IntVar(&o.PID, "pid", 0, "with --nats-url: PID of a local gated whose RSS and CPU to report")
	f.StringArrayVar(&o.ServeArgs, "serve-arg", nil, "extra argument for the embedded gated serve, e.g. --serve-arg=--max-in-flight=4096 (repeatable)")
	f.StringArrayVar(&o.ServeEnv, "serve-env", nil, "environment variable KEY=VALUE for the embedded gated serve only, e.g. --serve-env GOMEMLIMIT=256MiB (repeatable)")
	f.BoolVar(&o.Keep, "keep", false, "keep the embedded gated's directory (data, log) after the run")
	f.IntVar(&o.Warmup, "warmup", -1, "policy-decided proposals sent first and not measured (-1: a tenth of -n, at most 2000)")
	f.IntVar(&o.Pad, "pad", 0, "bytes added to every proposal's reason, for larger messages")
	f.StringVar(&o.Progress, "progress", "auto", "progress bar on stderr: auto (on a terminal), on or off")
	f.BoolVar(&o.Fair, "fair", false, "measure fairness instead: --tenant's -n llm-path reviews alone, then beside tenant bench-flood keeping --fair-flood reviews in flight against a reviews_in_flight budget of --fair-limit, in one run (embedded gated only)")
	f.IntVar(&o.FairFlood, "fair-flood", 256, "with --fair: the flooding tenant's proposals in flight")
	f.IntVar(&o.FairLimit, "fair-limit", 8, "with --fair: the flooding tenant's reviews_in_flight budget")
	f.IntVar(&o.Prefill, "prefill", 0, "before measuring, fill the embedded gated's store with the histories of this many policy-decided proposals, copied from the warm-up's")
	f.StringVar(&o.Curve, "prefill-curve", "", "run the bench once per prefill size, each on a new embedded gated, and report the rates side by side, e.g. 0,100000,1000000")
	return asUsage(c.ExecuteContext(ctx))
}

// flagsFromEnv lets GATED_<FLAG> set any flag the command line leaves
// unset, as gated does: GATED_NATS_URL, and the secrets best kept out of
// the process list (GATED_NATS_PASSWORD, GATED_NATS_TOKEN).
func flagsFromEnv(f *pflag.FlagSet) error {
	var err error
	f.VisitAll(func(fl *pflag.Flag) {
		if fl.Changed || err != nil {
			return
		}
		key := "GATED_" + strings.ToUpper(strings.ReplaceAll(fl.Name, "-", "_"))
		if v, ok := os.LookupEnv(key); ok {
			if serr := f.Set(fl.Name, v); serr != nil {
				err = usageError("%s=%q: %v", key, v, serr)
			}
		}
	})
	return err
}

// findGated is the gated binary next to this one, else gated on PATH,
// else "" (the bench then asks for --gated).
func findGated() string {
	if exe, err := os.Executable(); err == nil {
		next := filepath.Join(filepath.Dir(exe), "gated")
		if st, err := os.Stat(next); err == nil && !st.IsDir() {
			return next
		}
	}
	if p, err := exec.LookPath("gated"); err == nil {
		return p
	}
	return ""
}

// asUsage makes the refusals of the bench and of the connection flags,
// and cobra's own argument errors, usage errors; other errors stay as
// they are.
func asUsage(err error) error {
	var be *bench.UsageError
	var ne *natsconn.UsageError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &be), errors.As(err, &ne):
		return usageError("%v", err)
	case strings.HasPrefix(err.Error(), "unknown command"), strings.HasPrefix(err.Error(), "unknown flag"):
		return usageError("%v", err)
	}
	return err
}
