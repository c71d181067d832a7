package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/budget"
)

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
			return budget.Show(ctx, nc, limits, args, time.Now(), cmd.OutOrStdout())
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
