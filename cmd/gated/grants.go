package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/gated/gated/engine/grant"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/server"
)

// DefaultRotateGrace is how long after `gated grants rotate` the old key
// may still sign: every gated reads its key file at least this often.
const DefaultRotateGrace = 30 * time.Second

func grantsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "grants",
		Short: "Grant signing keys: print the published key set, rotate the key",
		Long: `Every approved action verdict carries a grant, signed with gated's Ed25519 key
(docs/GRANTS.md). gated grants keys prints the key set executors verify grants
with; gated grants rotate replaces the signing key.`,
	}
	c.AddCommand(grantsKeysCmd(), grantsRotateCmd())
	return c
}

func grantsKeysCmd() *cobra.Command {
	var (
		url     string
		timeout time.Duration
		conn    natsConnOptions
	)
	c := &cobra.Command{
		Use:   "keys",
		Short: "Print the grant key set gated publishes on " + wire.GrantKeysSubject,
		Long: `keys asks ` + wire.GrantKeysSubject + ` for the key set every gated on the cluster
publishes, and prints it: a service that verifies grants may be configured with
this file instead of asking NATS.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return usageError("--timeout %s must be positive", timeout)
			}
			nc, err := conn.connect(url, "gated-grants", nats.Timeout(5*time.Second), nats.MaxReconnects(0))
			if err != nil {
				return err
			}
			defer nc.Close()
			msg, err := nc.RequestWithContext(cmd.Context(), wire.GrantKeysSubject, nil)
			if err != nil {
				return fmt.Errorf("asking %s: %w", wire.GrantKeysSubject, err)
			}
			ks, err := grant.ParseKeySet(msg.Data)
			if err != nil {
				return fmt.Errorf("the key set gated answered: %w", err)
			}
			out, _ := json.MarshalIndent(ks, "", "  ")
			fmt.Fprintln(cmd.OutOrStdout(), string(out))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&url, "nats-url", nats.DefaultURL, "NATS server URL")
	f.DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the answer")
	conn.register(f)
	return c
}

func grantsRotateCmd() *cobra.Command {
	var (
		dataDir, keyFile string
		maxTTL, grace    time.Duration
	)
	c := &cobra.Command{
		Use:   "rotate",
		Short: "Make a new grant signing key active and retire the old one",
		Long: `rotate adds a new Ed25519 key to the grant key file and makes it the signing
key; the key it replaces is retired --grace from now (a running gated reads its
key file every few seconds and signs with the new key before then). A retired
key stays in the published key set until no grant it signed can be alive
(retired_at + max_ttl_s), so a rotation never invalidates a grant before its
expiry. Run it where the key file is; a running gated picks the change up.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := server.CheckGrantTTL(maxTTL); err != nil {
				return usageError("--max-ttl: %v", err)
			}
			if grace < server.GrantKeyPoll || grace > time.Hour {
				return usageError("--grace %s must be from %s to 1h: every gated must read the new key file within it", grace, server.GrantKeyPoll)
			}
			path := server.GrantKeyPath(keyFile, dataDir)
			ring, _, err := server.ReadGrantRing(path)
			if err != nil {
				return fmt.Errorf("reading the grant key file: %w", err)
			}
			old := ring.Active().KID
			if err := ring.Rotate(time.Now(), grace, maxTTL); err != nil {
				return err
			}
			if err := server.WriteGrantRing(path, ring); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "grant key %s is active; %s retires in %s\n", ring.Active().KID, old, grace)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&dataDir, "data-dir", "gated-data", "data directory whose grant.keys to rotate")
	f.StringVar(&keyFile, "grant-key-file", "", "grant key file to rotate (instead of <data-dir>/grant.keys)")
	f.DurationVar(&maxTTL, "max-ttl", server.DefaultGrantTTL, "longest grant the new key signs; at least serve's --grant-ttl")
	f.DurationVar(&grace, "grace", DefaultRotateGrace, "how long the old key may still sign")
	return c
}
