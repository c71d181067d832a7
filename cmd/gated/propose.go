package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/gated/gated/bus"
)

func proposeCmd() *cobra.Command {
	var (
		file string
		url  string
		wait time.Duration
		conn natsConnOptions
	)
	c := &cobra.Command{
		Use:   "propose -f proposal.json",
		Short: "Publish a proposal and print its verdict",
		Long: `propose publishes one proposal, waits for its verdict and prints it as JSON.
Exit status: 0 approved, 3 not approved (rejected, blocked, error, timeout,
invalid), 2 bad usage or unreadable input file, 1 failure (no NATS, no verdict
in time).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageError("-f is required: a proposal JSON file, or - for standard input")
			}
			data, err := readInput(file, cmd.InOrStdin())
			if err != nil {
				return usageError("reading %s: %v", file, err)
			}
			if !json.Valid(data) {
				return usageError("%s is not valid JSON", file)
			}
			if _, err := bus.AddressOf(data); err != nil {
				return usageError("%s: %v", file, err)
			}
			opts, err := conn.options("gated-propose")
			if err != nil {
				return err
			}
			opts = append(opts, nats.Timeout(5*time.Second), nats.MaxReconnects(0))
			nc, err := nats.Connect(url, opts...)
			if err != nil {
				return fmt.Errorf("connecting to NATS at %s: %w (is gated serve running?)", url, err)
			}
			defer nc.Close()
			client, err := bus.NewClient(nc)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			v, err := client.Propose(ctx, data)
			if err != nil {
				if errors.Is(err, bus.ErrBadProposal) {
					return usageError("%v", err)
				}
				if errors.Is(err, bus.ErrIDReused) {
					return &exitError{code: exitNotApproved, err: fmt.Errorf("%v; it was not decided: choose a new id", err)}
				}
				return err
			}
			out, _ := json.MarshalIndent(v, "", "  ")
			fmt.Fprintln(cmd.OutOrStdout(), string(out))
			if !v.Approved {
				return &exitError{code: exitNotApproved, err: fmt.Errorf("not approved: %s", v.Outcome), silent: true}
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVarP(&file, "file", "f", "", "proposal JSON file, or - for standard input")
	f.StringVar(&url, "nats-url", nats.DefaultURL, "NATS server URL")
	f.DurationVar(&wait, "wait", 90*time.Second, "how long to wait for the verdict")
	conn.register(f)
	return c
}

func readInput(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(io.LimitReader(stdin, 16<<20))
	}
	return os.ReadFile(name)
}
