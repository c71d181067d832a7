package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/budget"
)

// watchBudgets reads --budgets again every --budgets-poll, and swaps in a
// change once two polls in a row read it the same and it is valid; a bad
// or empty one is logged with its file and line, and the limits in force
// stay.
func (s *gateServer) watchBudgets() {
	path, every := s.o.budgets, s.o.budgetsWatch
	if path == "" || every <= 0 {
		return
	}
	last, _ := os.ReadFile(path)
	f := budgetsFile{last: last}
	s.watchers.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.watchCtx.Done():
				return
			case <-t.C:
			}
			data, err := os.ReadFile(path)
			if err != nil {
				if f.gone() { // said once, not every poll
					s.m.budgetReloads.WithLabelValues("refused").Inc()
					s.log.Error("budgets reload refused: the limits in force stay", zap.Error(err))
				}
				continue
			}
			if !f.settled(data) {
				continue
			}
			cfg, err := parseReloadedBudgets(path, data)
			if err != nil {
				s.m.budgetReloads.WithLabelValues("refused").Inc()
				s.log.Error("budgets reload refused: the limits in force stay", zap.Error(err))
				continue
			}
			s.budgets.SetConfig(cfg)
			s.m.budgetReloads.WithLabelValues("applied").Inc()
			s.log.Info("budgets reloaded", zap.String("file", path), zap.Strings("tenants", cfg.Tenants()))
		}
	})
}

// budgetsFile is what the budgets watcher knows of the file between two
// polls. A file being written can be read empty (truncated, not yet
// written) or half written, and half a file can be a valid one that
// drops some tenants' limits: a change is taken up only once two polls in
// a row have read the same bytes.
type budgetsFile struct {
	// last is the content taken up last, applied or refused; nil after a
	// read failed.
	last []byte
	// seen is a change read once, waiting for a second read to agree.
	seen []byte
}

// settled reports whether data, read by a poll, is a change to take up:
// different from the last content taken up, and the same as the poll
// before read. It then becomes the last content taken up.
func (f *budgetsFile) settled(data []byte) bool {
	if f.last != nil && bytes.Equal(data, f.last) {
		f.seen = nil
		return false
	}
	if f.seen == nil || !bytes.Equal(data, f.seen) {
		f.seen = bytes.Clone(data)
		return false
	}
	f.last, f.seen = f.seen, nil
	return true
}

// gone records a poll that could not read the file. It reports whether
// the file had been read before, so that the refusal is said once.
func (f *budgetsFile) gone() bool {
	had := f.last != nil
	f.last, f.seen = nil, nil
	return had
}

// parseReloadedBudgets parses a budgets file read again. An empty file is
// refused: on start-up it means the defaults, but read again it is far
// more often a file caught between its truncation and its write, or left
// so by an editor that failed, than a wish to drop every limit (which
// "tenants: {}" says).
func parseReloadedBudgets(path string, data []byte) (*budget.Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s is empty; to go back to the default limits, write \"tenants: {}\"", path)
	}
	return budget.ParseConfig(path, data)
}

func budgetsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "budgets",
		Short: "Show the budget counters of tenants and their agents",
	}
	c.AddCommand(budgetsShowCmd(), budgetsResetCmd())
	return c
}

func budgetsResetCmd() *cobra.Command {
	var (
		url     string
		timeout time.Duration
		conn    natsConnOptions
	)
	c := &cobra.Command{
		Use:   "reset TENANT",
		Short: "Remove a tenant's budget counters: every count and lease starts from zero",
		Long: `reset removes the records of TENANT and of each of its agents from the
GATED_BUDGETS bucket: the windows, the leases of reviews in flight and
pending holds, and the refusals. Use it for a record gated refuses as not
its own, or to lift a tenant's refusals at once.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 || !gated.ValidTenant(args[0]) {
				return usageError("want one TENANT matching [a-z0-9_-]{1,64}")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, err := conn.connect(url, "gated-budgets")
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			js, err := jetstream.New(nc)
			if err != nil {
				return fmt.Errorf("opening JetStream: %w", err)
			}
			kv, err := js.KeyValue(ctx, budget.Bucket)
			if err != nil {
				return fmt.Errorf("opening bucket %s: %w", budget.Bucket, err)
			}
			n, err := budget.New(kv, nil, nil).Reset(ctx, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %d budget records of tenant %s\n", n, args[0])
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&url, "nats-url", nats.DefaultURL, "NATS server URL")
	f.DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait")
	conn.register(f)
	return c
}

func budgetsShowCmd() *cobra.Command {
	var (
		url     string
		file    string
		timeout time.Duration
		conn    natsConnOptions
	)
	c := &cobra.Command{
		Use:   "show [TENANT]",
		Short: "Print the budget counters and limits of a tenant, or of every tenant",
		Long: `show prints, for the tenant and each of its agents that has counters or limits
of its own in --budgets, the counters gated keeps in the GATED_BUDGETS bucket
beside the limits of --budgets (the built-in limits without it): proposals,
reads and tokens in the current window, reviews in flight, actions pending an
operator, and refusals in the last ten minutes. Without TENANT it prints every
tenant that has counters or limits of its own. The web console's Budgets page
shows the same, with when each count resets.`,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) > 1:
				return usageError("want at most one TENANT, got %d arguments", len(args))
			case len(args) == 1 && !gated.ValidTenant(args[0]):
				return usageError("tenant %q must match [a-z0-9_-]{1,64}", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return usageError("--timeout %s must be positive", timeout)
			}
			limits := &budget.Config{}
			if file != "" {
				var err error
				if limits, err = budget.LoadConfig(file); err != nil {
					return usageError("--budgets: %v", err)
				}
			}
			nc, err := conn.connect(url, "gated-budgets")
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return showBudgets(ctx, nc, limits, args, time.Now(), cmd.OutOrStdout())
		},
	}
	f := c.Flags()
	f.StringVar(&url, "nats-url", nats.DefaultURL, "NATS server URL")
	f.StringVar(&file, "budgets", "", "the budgets file gated serves with, for the limits beside the counters")
	_ = cobra.MarkFlagFilename(f, "budgets", "yaml", "yml")
	f.DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the counters")
	conn.register(f)
	return c
}

// showBudgets prints the counters of the tenants (every tenant with
// counters or limits of its own when none is named) as a table.
func showBudgets(ctx context.Context, nc *nats.Conn, limits *budget.Config, tenants []string, now time.Time, out io.Writer) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}
	kv, err := js.KeyValue(ctx, budget.Bucket)
	if err != nil {
		return fmt.Errorf("opening bucket %s: %w", budget.Bucket, err)
	}
	s := budget.New(kv, limits, nil)
	if len(tenants) == 0 {
		if tenants, err = s.Tenants(ctx); err != nil {
			return err
		}
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "TENANT\tSCOPE\tPROPOSALS\tREADS\tTOKENS\tREVIEWS IN FLIGHT\tHOLDS PENDING\tREFUSALS 10M")
	for _, tenant := range tenants {
		u, err := s.Usage(ctx, tenant, now)
		if err != nil {
			return err
		}
		row(w, tenant, "tenant", u.Whole)
		for _, a := range u.Agents {
			name := "agent " + a.Agent
			if a.Agent == "" {
				name = "agent (none)"
			}
			row(w, tenant, name, a)
		}
	}
	return w.Flush()
}

func row(w io.Writer, tenant, scope string, u budget.Usage) {
	c, l := u.Counters, u.Limits
	of := func(n int64, r budget.Rate) string {
		return strconv.FormatInt(n, 10) + " of " + r.String()
	}
	count := func(n, max int64) string {
		if max == 0 {
			return strconv.FormatInt(n, 10) + " of unlimited"
		}
		return strconv.FormatInt(n, 10) + " of " + strconv.FormatInt(max, 10)
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d (%d by budget)\n", tenant, scope,
		of(c.Proposals, l.Proposals), of(c.Reads, l.Reads), of(c.Tokens, l.Tokens),
		count(c.ReviewsInFlight, l.ReviewsInFlight), count(c.HoldsPending, l.HoldsPending),
		c.Refusals, c.BudgetRefusals)
}
