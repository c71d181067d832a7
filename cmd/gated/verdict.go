package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/gated/gated"
)

// exitNotFound is the status of `verdict get` when no verdict is stored.
const exitNotFound = 3

func verdictCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "verdict",
		Short: "Read stored verdicts",
	}
	c.AddCommand(verdictGetCmd())
	return c
}

func verdictGetCmd() *cobra.Command {
	var (
		url     string
		timeout time.Duration
		conn    natsConnOptions
	)
	c := &cobra.Command{
		Use:   "get TENANT ID",
		Short: "Print the stored verdict of a proposal",
		Long: `get prints the verdict gated stored for proposal ID of TENANT, as JSON. It
reads the key TENANT.ID of the GATED_VERDICTS bucket with one JetStream direct
get, so a tenant's NATS user needs no right beyond reading its own keys.

Exit status: 0 found (whatever the outcome), 3 no verdict stored (never
decided, still under review, or past --verdict-ttl), 2 bad usage (TENANT or ID
is not a valid token), 1 failure (no NATS).`,
		Args: func(c *cobra.Command, args []string) error {
			if err := wantArgs(c, args, "TENANT", "ID"); err != nil {
				return err
			}
			if !gated.ValidTenant(args[0]) {
				return usageError("tenant %q must match [a-z0-9_-]{1,64}", args[0])
			}
			if !gated.ValidID(args[1]) {
				return usageError("id %q must match [A-Za-z0-9_-]{1,128}", args[1])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant, id := args[0], args[1]
			if timeout <= 0 {
				return usageError("--timeout %s must be positive", timeout)
			}
			nc, client, err := conn.client(url, "gated-verdict")
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			v, err := client.Verdict(ctx, tenant, id)
			if errors.Is(err, gated.ErrNotFound) {
				return &exitError{code: exitNotFound, err: fmt.Errorf("no verdict stored for tenant %s, proposal %s", tenant, id)}
			}
			if err != nil {
				return err
			}
			out, _ := json.MarshalIndent(v, "", "  ")
			fmt.Fprintln(cmd.OutOrStdout(), string(out))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&url, "nats-url", nats.DefaultURL, "NATS server URL")
	f.DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the look-up")
	conn.register(f)
	return c
}
