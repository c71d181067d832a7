package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/replay"
	"github.com/gated/gated/internal/progress"
	"github.com/gated/gated/internal/server"
	"github.com/gated/gated/policies"
)

// policyReplayOptions are the flags of `gated policy replay`.
type policyReplayOptions struct {
	bundle      server.PolicySource
	personasDir string
	url         string
	conn        natsConnOptions
	dataDir     string
	since       time.Duration
	fromSeq     uint64
	tenant      string
	format      string
	failOnFlip  bool
	show        int
	progress    string
	rereview    rereviewOptions
	integrity   replayIntegrityOptions
	workers     int
}

func policyReplayCmd() *cobra.Command {
	o := &policyReplayOptions{}
	c := &cobra.Command{
		Use:   "replay --policies DIR",
		Short: "Decide the recorded proposals again under a candidate policy and count what flips",
		Long: `replay reads the audit stream (of a running NATS server, --nats-url, or of
the embedded server's --data-dir while no gated runs on it) and decides every
recorded proposal again under the candidate bundle, with the input the live
decision had: the proposal, the persona, the target's history and the clock,
as its policy.decided record keeps them. It compares the two decisions as
shadow mode does (a flip is a difference of outcome) and prints old -> new
outcome counts, differences by kind, flips by rule, tenant and action, and the
first --show flips with both decisions. A proposal that both policies send to
the same reviewers keeps its recorded review result when those reviewers are
unchanged in the candidate set-up (the same persona revision, model and
plugin version, with --personas and the plugins serve would load); otherwise
it is counted "review stale" and named. One they send to other reviewers
(persona, quorum, also) is counted and named as a review change.
--rereview PERSONA runs that persona's candidate reviewer (a real plugin
process) again on its recorded review requests and reports its agreement
with the recorded decisions: the flip rate, Cohen's kappa and the
disagreements. A proposal whose input cannot be rebuilt is counted and
named. The range is checked as "audit verify" checks the stream, with the
records' MACs given --audit-key-file (with --data-dir, its audit.key), and
its end against the stream's last sequence (every tenant) and --anchors; a
range with a record altered, forged or missing is reported and the replay
fails, never counted as complete.
Exit status: 0 replayed, 4 --fail-on-flip and an outcome flipped, 1 the range
is not intact or an error, 2 bad usage.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.integrity.stdin = cmd.InOrStdin()
			return runPolicyReplay(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := c.Flags()
	registerPolicySource(f, &o.bundle)
	f.StringVar(&o.personasDir, "personas", "", "directory of persona files (*.md) added to the built-in personas")
	f.StringVar(&o.url, "nats-url", nats.DefaultURL, "NATS server URL of the deployment whose history to replay")
	f.StringVar(&o.dataDir, "data-dir", "", "replay the embedded server's JetStream files in this directory instead of --nats-url")
	f.DurationVar(&o.since, "since", 0, "replay the records of this last period, e.g. 24h (default: all)")
	f.Uint64Var(&o.fromSeq, "from-seq", 0, "replay from this audit stream sequence")
	f.StringVar(&o.tenant, "tenant", "", "replay this tenant's proposals only")
	f.StringVar(&o.format, "format", "text", "text or json")
	f.BoolVar(&o.failOnFlip, "fail-on-flip", false, "exit 4 when any outcome flips, for CI")
	f.IntVar(&o.show, "show", 10, "list the first N flipped proposals with both decisions, and the first N whose reviewers change; -1 lists all")
	f.StringVar(&o.progress, "progress", "auto", "progress line on stderr: auto (on a terminal), on or off")
	o.integrity.register(f)
	f.IntVar(&o.workers, "workers", runtime.GOMAXPROCS(0), "goroutines that decode and decide (1 decides on one)")
	o.conn.register(f)
	o.rereview.register(f)
	return c
}

// exitFlipped is the exit status of a replay with --fail-on-flip that
// flipped an outcome.
const exitFlipped = 4

func (o *policyReplayOptions) check() error {
	switch {
	case o.bundle.Dir == "":
		return usageError("--policies DIR is required: the candidate policy to replay")
	case o.since < 0:
		return usageError("--since %s: want a positive duration", o.since)
	case o.since > 0 && o.fromSeq > 0:
		return usageError("give --since or --from-seq, not both")
	case o.tenant != "" && !gated.ValidTenant(o.tenant):
		return usageError("--tenant %q must match [a-z0-9_-]{1,64}", o.tenant)
	case o.workers < 1:
		return usageError("--workers %d: want 1 or more", o.workers)
	case o.show < -1:
		return usageError("--show %d: want 0 or more, or -1 for all", o.show)
	case o.progress != "auto" && o.progress != "on" && o.progress != "off":
		return usageError("--progress %q: want auto, on or off", o.progress)
	}
	if err := o.rereview.check(); err != nil {
		return err
	}
	return checkFormat(o.format)
}

func runPolicyReplay(ctx context.Context, w, errw io.Writer, o *policyReplayOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	reg, err := loadPersonas(o.personasDir, errw)
	if err != nil {
		return err
	}
	keys, anchors, err := o.integrity.load(o.dataDir, o.tenant)
	if err != nil {
		return err
	}
	b, _, err := loadPolicyBundle(&o.bundle, nil, errw)
	if err != nil {
		return err
	}
	ev, err := policies.Compile(ctx, b, o.bundle.CompileOptions()...)
	if err != nil {
		return fmt.Errorf("compiling the candidate policy: %w", err)
	}
	js, closeConn, err := o.connect()
	if err != nil {
		return err
	}
	defer closeConn()
	reviewers := replay.NewReviewers(o.candidateReviewers(reg, ev, js.Conn()))
	defer reviewers.Close()
	var rr *replay.Rereviewer
	if o.rereview.persona != "" {
		rr, err = replay.NewRereviewer(ctx, reviewers, replay.RereviewConfig{
			Persona: o.rereview.persona, Concurrency: o.rereview.concurrency, Timeout: o.rereview.timeout, Show: o.show,
		})
		if errors.Is(err, replay.ErrUnknownPersona) {
			return usageError("--rereview %q: no such persona in the candidate set (built-in personas and --personas)", o.rereview.persona)
		}
		if err != nil {
			return err
		}
		// On an early return the workers stop before the plugins do.
		defer rr.Close()
	}
	q := audit.Query{Tenant: o.tenant, StartSeq: o.fromSeq}
	if o.since > 0 {
		q.Since = time.Now().Add(-o.since)
	}
	var read atomic.Int64
	total, err := replay.RangeSize(ctx, js, q)
	if err != nil {
		return err
	}
	stop := progress.Start(errw, o.progress, "replay", total, &read)
	defer replay.TuneGC()()
	rep, err := replay.Run(ctx, js, q, ev, reg, replay.Config{Show: o.show, Read: &read, Workers: o.workers,
		Keys: keys, Anchors: anchors, Reviewers: reviewers, Rereview: rr})
	stop()
	if err != nil {
		return err
	}
	if o.format == "json" {
		err = writeJSON(w, rep)
	} else {
		err = rep.WriteText(w)
	}
	if err != nil {
		return err
	}
	switch {
	case !rep.Intact:
		return &exitError{code: exitFailure, err: errors.New("the audit range is not intact: the replay is incomplete"), silent: true}
	case o.failOnFlip && rep.Flips > 0:
		return &exitError{code: exitFlipped, err: fmt.Errorf("%d outcome(s) flipped", rep.Flips), silent: true}
	}
	return nil
}

// connect opens JetStream on --nats-url, or on an embedded server over
// --data-dir that listens on a free local port.
func (o *policyReplayOptions) connect() (jetstream.JetStream, func(), error) {
	url := o.url
	var shutdown func()
	if o.dataDir != "" {
		var err error
		if url, shutdown, err = bus.OpenDataDir(o.dataDir); err != nil {
			return nil, nil, err
		}
	}
	nc, err := o.conn.connect(url, "gated-policy-replay", nats.Timeout(5*time.Second), nats.MaxReconnects(0))
	if err != nil {
		if shutdown != nil {
			shutdown()
		}
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	closeAll := func() {
		nc.Close()
		if shutdown != nil {
			shutdown()
		}
	}
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("opening JetStream: %w", err)
	}
	return js, closeAll, nil
}
