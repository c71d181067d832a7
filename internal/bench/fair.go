package bench

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

	"github.com/gated/gated"
)

// fairReport is what `gated-bench --fair` measures: the quiet tenant's
// reviews alone, then beside a tenant that floods at its review limit, in
// one run.
type fairReport struct {
	Quiet       string  `json:"quiet_tenant"`
	Flood       string  `json:"flood_tenant"`
	FloodLimit  int     `json:"flood_reviews_in_flight"`
	FloodConc   int     `json:"flood_senders"`
	LLMLatency  string  `json:"llm_latency"`
	Alone       Summary `json:"alone"`
	BesideFlood Summary `json:"beside_flood"`
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

// runFair measures whether one tenant at its review limit delays
// another tenant's reviews: the quiet tenant's llm-path proposals alone,
// then the same number again while the flood tenant keeps --fair-flood
// llm-path proposals in flight against a reviews-in-flight limit of
// --fair-limit.
func runFair(ctx context.Context, o Options, stdout, stderr io.Writer) (err error) {
	switch {
	case o.NATSURL != "":
		return usageError("--fair configures the embedded gated's budgets; it cannot run against --nats-url")
	case o.N < 1:
		return usageError("-n %d must be at least 1", o.N)
	case o.FairFlood < 1 || o.FairLimit < 1:
		return usageError("--fair-flood %d and --fair-limit %d must be at least 1", o.FairFlood, o.FairLimit)
	case !gated.ValidTenant(o.Tenant) || o.Tenant == fairFloodTenant:
		return usageError("--tenant %q must be a tenant token other than %s", o.Tenant, fairFloodTenant)
	case o.Gated == "":
		return usageError("%s", errNoGated)
	}
	conc, err := ParseConcurrency(o.Concurrency, Mix{PathLLM: 1})
	if err != nil {
		return usageError("--concurrency: %v", err)
	}
	quietConc := conc[PathLLM]
	llm, err := ServeLLM("127.0.0.1:0", o.LLMLatency)
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
	limit := fmt.Sprintf("{proposals: unlimited, reads: unlimited, tokens: unlimited, reviews_in_flight: %d}", o.FairLimit)
	file := fmt.Sprintf("tenants:\n  %s: {tenant: %s, agent: %s}\n  %s: {tenant: %s, agent: %s}\n",
		o.Tenant, unlimitedScope, unlimitedScope, fairFloodTenant, limit, limit)
	if err := os.WriteFile(budgets, []byte(file), 0o644); err != nil {
		return err
	}
	// Room for both tenants' proposals at once, and an llm reviewer that
	// runs all of them: only the budget stands between the flood and the
	// quiet tenant's reviews.
	all := Concurrency{PathLLM: quietConc + o.FairFlood}
	args := embeddedServeArgs(all, append([]string{"--budgets=" + budgets}, o.ServeArgs...))
	fmt.Fprintln(stderr, "starting gated serve with an embedded NATS server…")
	g, err := StartGated(ctx, GatedOptions{Exe: o.Gated, Dir: filepath.Join(dir, "gated"), LLMBaseURL: llm.BaseURL(), Args: args, Env: o.ServeEnv})
	if err != nil {
		return err
	}
	defer func() {
		if serr := g.Stop(time.Minute); serr != nil && err == nil {
			err = serr
		}
	}()
	nc, err := o.connect(g.URL, "gated-bench", nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	nonce := newNonce()
	rep := fairReport{Quiet: o.Tenant, Flood: fairFloodTenant, FloodLimit: o.FairLimit, FloodConc: o.FairFlood, LLMLatency: o.LLMLatency.String()}

	quiet := func(phase string) (Summary, error) {
		gen := Proposals{Tenant: o.Tenant, Nonce: nonce + phase}
		fleet, err := NewGatedFleet(nc, gen, map[Path]int{PathLLM: o.N}, o.Timeout)
		if err != nil {
			return Summary{}, err
		}
		defer fleet.Close()
		fmt.Fprintf(stderr, "quiet tenant %s: %d reviews, %d in flight (%s)…\n", o.Tenant, o.N, quietConc, phase)
		recs := Drive(ctx, Plan{Counts: map[Path]int{PathLLM: o.N}, Concurrency: conc}, fleet.Send, nil)
		return recs[PathLLM].Summary(phase), nil
	}
	if rep.Alone, err = quiet("alone"); err != nil {
		return err
	}

	// The flood: --fair-flood senders in a closed loop, each sending its
	// next proposal as soon as the last is answered, reviewed or refused.
	fctx, stopFlood := context.WithCancel(ctx)
	ffleet, err := NewGatedFleet(nc, Proposals{Tenant: fairFloodTenant, Nonce: nonce + "f"}, nil, o.Timeout)
	if err != nil {
		stopFlood()
		return err
	}
	defer ffleet.Close()
	var next, admitted, refused, failed atomic.Int64
	var measuring atomic.Bool
	var wg sync.WaitGroup
	for range o.FairFlood {
		wg.Go(func() {
			for fctx.Err() == nil {
				_, err := ffleet.SendNew(fctx, PathLLM, int(next.Add(1)))
				if !measuring.Load() {
					continue
				}
				var ue *UnexpectedError
				switch {
				case err == nil:
					admitted.Add(1)
				case errors.As(err, &ue) && ue.Outcome == gated.OutcomeBlocked:
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
	case <-time.After(2*o.LLMLatency + time.Second):
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
	for _, s := range []Summary{rep.Alone, rep.BesideFlood} {
		fmt.Fprintf(stdout, "  %-13s %8d %9.1f %9.1f %9.1f %9.1f\n", s.Path, s.Answered, s.P50MS, s.P90MS, s.P99MS, s.MaxMS)
	}
	fmt.Fprintf(stdout, "  p99 beside the flood / alone: %.2f×\n", rep.P99Ratio)
	fmt.Fprintf(stdout, "  flood while measured: %d reviewed, %d refused by its budget, %d failed\n", rep.FloodAdmitted, rep.FloodRefused, rep.FloodErrors)
	if o.JSON != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.JSON, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("writing --json: %w", err)
		}
	}
	for _, s := range []Summary{rep.Alone, rep.BesideFlood} {
		if s.Errors > 0 || s.Unexpected > 0 {
			return fmt.Errorf("quiet tenant, %s: %d proposals got an unexpected verdict and %d none (%s)", s.Path, s.Unexpected, s.Errors, s.FirstError)
		}
	}
	return nil
}
