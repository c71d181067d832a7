package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/bench"
)

// fairReport is what `gated bench --fair` measures: the quiet tenant's
// reviews alone, then beside a tenant that floods at its review limit, in
// one run.
type fairReport struct {
	Quiet       string        `json:"quiet_tenant"`
	Flood       string        `json:"flood_tenant"`
	FloodLimit  int           `json:"flood_reviews_in_flight"`
	FloodConc   int           `json:"flood_senders"`
	LLMLatency  string        `json:"llm_latency"`
	Alone       bench.Summary `json:"alone"`
	BesideFlood bench.Summary `json:"beside_flood"`
	// P99Ratio is the quiet tenant's p99 beside the flood over its p99
	// alone.
	P99Ratio float64 `json:"p99_ratio"`
	// FloodAdmitted and FloodRefused count the flood's proposals reviewed
	// and refused by its budget while the quiet tenant was measured.
	FloodAdmitted int64 `json:"flood_admitted"`
	FloodRefused  int64 `json:"flood_refused"`
	FloodErrors   int64 `json:"flood_errors"`
}

// fairFloodTenant is the tenant that floods in a fairness run.
const fairFloodTenant = "bench-flood"

// unlimitedScope lifts every limit of a scope in the fairness run's
// budgets file.
const unlimitedScope = "{proposals: unlimited, reads: unlimited, tokens: unlimited, reviews_in_flight: unlimited, holds_pending: unlimited}"

// runFairBench measures whether one tenant at its review limit delays
// another tenant's reviews: the quiet tenant's llm-path proposals alone,
// then the same number again while the flood tenant keeps --fair-flood
// llm-path proposals in flight against a reviews-in-flight limit of
// --fair-limit.
func runFairBench(ctx context.Context, o benchOptions, stdout, stderr io.Writer) (err error) {
	switch {
	case o.natsURL != "":
		return usageError("--fair configures the embedded gated's budgets; it cannot run against --nats-url")
	case o.n < 1:
		return usageError("-n %d must be at least 1", o.n)
	case o.fairFlood < 1 || o.fairLimit < 1:
		return usageError("--fair-flood %d and --fair-limit %d must be at least 1", o.fairFlood, o.fairLimit)
	case !engine.ValidTenant(o.tenant) || o.tenant == fairFloodTenant:
		return usageError("--tenant %q must be a tenant token other than %s", o.tenant, fairFloodTenant)
	}
	conc, err := bench.ParseConcurrency(o.concurrency, bench.Mix{bench.PathLLM: 1})
	if err != nil {
		return usageError("--concurrency: %v", err)
	}
	quietConc := conc[bench.PathLLM]
	llm, err := bench.ServeLLM("127.0.0.1:0", o.llmLatency)
	if err != nil {
		return err
	}
	defer llm.Close()
	dir, err := os.MkdirTemp("", "gated-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	budgets := filepath.Join(dir, "budgets.yaml")
	limit := fmt.Sprintf("{proposals: unlimited, reads: unlimited, tokens: unlimited, reviews_in_flight: %d}", o.fairLimit)
	file := fmt.Sprintf("tenants:\n  %s: {tenant: %s, agent: %s}\n  %s: {tenant: %s, agent: %s}\n",
		o.tenant, unlimitedScope, unlimitedScope, fairFloodTenant, limit, limit)
	if err := os.WriteFile(budgets, []byte(file), 0o644); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the gated binary to start: %w", err)
	}
	// Room for both tenants' proposals at once, and an llm reviewer that
	// runs all of them: only the budget stands between the flood and the
	// quiet tenant's reviews.
	all := bench.Concurrency{bench.PathLLM: quietConc + o.fairFlood}
	args := embeddedServeArgs(all, append([]string{"--budgets=" + budgets}, o.serveArgs...))
	fmt.Fprintln(stderr, "starting gated serve with an embedded NATS server…")
	g, err := bench.StartGated(ctx, bench.GatedOptions{Exe: exe, Dir: filepath.Join(dir, "gated"), LLMBaseURL: llm.BaseURL(), Args: args, Env: o.serveEnv})
	if err != nil {
		return err
	}
	defer func() {
		if serr := g.Stop(time.Minute); serr != nil && err == nil {
			err = serr
		}
	}()
	nc, err := o.natsConn.connect(g.URL, "gated-bench", nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	nonce := newNonce()
	rep := fairReport{Quiet: o.tenant, Flood: fairFloodTenant, FloodLimit: o.fairLimit, FloodConc: o.fairFlood, LLMLatency: o.llmLatency.String()}

	quiet := func(phase string) (bench.Summary, error) {
		gen := bench.Proposals{Tenant: o.tenant, Nonce: nonce + phase}
		fleet, err := bench.NewGatedFleet(nc, gen, map[bench.Path]int{bench.PathLLM: o.n}, o.timeout)
		if err != nil {
			return bench.Summary{}, err
		}
		defer fleet.Close()
		fmt.Fprintf(stderr, "quiet tenant %s: %d reviews, %d in flight (%s)…\n", o.tenant, o.n, quietConc, phase)
		recs := bench.Drive(ctx, bench.Plan{Counts: map[bench.Path]int{bench.PathLLM: o.n}, Concurrency: conc}, fleet.Send, nil)
		return recs[bench.PathLLM].Summary(phase), nil
	}
	if rep.Alone, err = quiet("alone"); err != nil {
		return err
	}

	// The flood: --fair-flood senders in a closed loop, each sending its
	// next proposal as soon as the last is answered, reviewed or refused.
	fctx, stopFlood := context.WithCancel(ctx)
	ffleet, err := bench.NewGatedFleet(nc, bench.Proposals{Tenant: fairFloodTenant, Nonce: nonce + "f"}, nil, o.timeout)
	if err != nil {
		stopFlood()
		return err
	}
	defer ffleet.Close()
	var next, admitted, refused, failed atomic.Int64
	var measuring atomic.Bool
	var wg sync.WaitGroup
	for range o.fairFlood {
		wg.Go(func() {
			for fctx.Err() == nil {
				_, err := ffleet.SendNew(fctx, bench.PathLLM, int(next.Add(1)))
				if !measuring.Load() {
					continue
				}
				var ue *bench.UnexpectedError
				switch {
				case err == nil:
					admitted.Add(1)
				case errors.As(err, &ue) && ue.Outcome == engine.OutcomeBlocked:
					refused.Add(1)
				case fctx.Err() == nil:
					failed.Add(1)
				}
			}
		})
	}
	// The flood reaches its limit within a review's latency; measure after
	// two.
	select {
	case <-time.After(2*o.llmLatency + time.Second):
	case <-ctx.Done():
	}
	measuring.Store(true)
	rep.BesideFlood, err = quiet("beside_flood")
	measuring.Store(false)
	stopFlood()
	wg.Wait()
	if err != nil {
		return err
	}
	rep.FloodAdmitted, rep.FloodRefused, rep.FloodErrors = admitted.Load(), refused.Load(), failed.Load()
	if rep.Alone.P99MS > 0 {
		rep.P99Ratio = rep.BesideFlood.P99MS / rep.Alone.P99MS
	}
	fmt.Fprintf(stdout, "fairness: tenant %s's reviews (llm path, %s model latency, %d in flight), alone and beside tenant %s flooding %d in flight at a reviews_in_flight limit of %d\n",
		rep.Quiet, rep.LLMLatency, quietConc, rep.Flood, rep.FloodConc, rep.FloodLimit)
	fmt.Fprintf(stdout, "  %-13s %8s %9s %9s %9s %9s\n", "quiet tenant", "answered", "p50 ms", "p90 ms", "p99 ms", "max ms")
	for _, s := range []bench.Summary{rep.Alone, rep.BesideFlood} {
		fmt.Fprintf(stdout, "  %-13s %8d %9.1f %9.1f %9.1f %9.1f\n", s.Path, s.Answered, s.P50MS, s.P90MS, s.P99MS, s.MaxMS)
	}
	fmt.Fprintf(stdout, "  p99 beside the flood / alone: %.2f×\n", rep.P99Ratio)
	fmt.Fprintf(stdout, "  flood while measured: %d reviewed, %d refused by its budget, %d failed\n", rep.FloodAdmitted, rep.FloodRefused, rep.FloodErrors)
	if o.jsonOut != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonOut, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("writing --json: %w", err)
		}
	}
	for _, s := range []bench.Summary{rep.Alone, rep.BesideFlood} {
		if s.Errors > 0 || s.Unexpected > 0 {
			return fmt.Errorf("quiet tenant, %s: %d proposals got an unexpected verdict and %d none (%s)", s.Path, s.Unexpected, s.Errors, s.FirstError)
		}
	}
	return nil
}
