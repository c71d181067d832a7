package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/internal/server"
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
		url      string
		timeout  time.Duration
		since    string
		keyFiles []string
		dataDir  string
		conn     natsConnOptions
	)
	c := &cobra.Command{
		Use:   "get TENANT ID",
		Short: "Print the stored verdict of a proposal",
		Long: `get prints the verdict gated stored for proposal ID of TENANT, as JSON. It
reads the key TENANT.ID of the GATED_VERDICTS bucket with one JetStream direct
get, so a tenant's NATS user needs no right beyond reading its own keys.

When the key is gone (past --verdict-ttl, or removed), it reads the verdict
from the audit trail instead, on a connection that may read GATED_AUDIT, with
the audit key (--audit-key-file, or the audit.key of --data-dir): the trail is
indexed by tenant and event, not by proposal, so it reads every record of
TENANT stored since --since and checks them, each record's MAC and the
tenant's chain through them; a range that does not verify answers nothing.
Without a key the trail is not read: a record that anyone able to publish on
the audit subjects could write would be taken for gated's. A verdict read from
the trail is printed as the stored one was, without its grant's token, which
the trail does not keep (the grant expired before the key), and a note on
standard error says where it came from.

Exit status: 0 found (whatever the outcome), 3 no verdict stored and none in
the audit trail since --since (never decided, still under review, or older),
2 bad usage (TENANT or ID is not a valid token), 1 failure (no NATS, an audit
trail that does not verify, verdicts of different proposals under the id).`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageError("want TENANT and ID, got %d arguments", len(args))
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
			from, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			keys, err := server.ReadAuditKeys(keyFiles, dataDir)
			if err != nil {
				return fromServer(err)
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
				v, err = verdictFromTrail(ctx, nc, cmd.ErrOrStderr(), tenant, id, from, keys)
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
	f.DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the look-up, the audit trail's included")
	f.StringVar(&since, "since", "7d", "when the key is gone, read the audit trail's records stored since then: a duration (90m, 24h, 7d) or a time (2025-01-02T15:04:05Z)")
	f.StringSliceVar(&keyFiles, "audit-key-file", nil, "audit key that MACs the records (repeatable, for rotated keys), as for audit verify; the audit trail is read only with a key")
	_ = c.MarkFlagFilename("audit-key-file")
	f.StringVar(&dataDir, "data-dir", server.Defaults().DataDir, "without --audit-key-file, the audit key is this data directory's audit.key, as serve wrote it")
	conn.register(f)
	return c
}

// verdictFromTrail reads the verdict of tenant and id from the audit
// trail, for a key that is gone, and notes on w where it came from.
// Without keys, or a trail that cannot be read (no right to read
// GATED_AUDIT), the verdict is not found; a trail that does not verify is
// an error.
func verdictFromTrail(ctx context.Context, nc *nats.Conn, w io.Writer, tenant, id string, since time.Time, keys [][]byte) (*gated.Verdict, error) {
	notFound := func(why string) error {
		return &exitError{code: exitNotFound, err: fmt.Errorf("no verdict stored for tenant %s, proposal %s%s", tenant, id, why)}
	}
	if len(keys) == 0 {
		return nil, notFound("; give --audit-key-file (or --data-dir) to read it from the audit trail")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("opening JetStream: %w", err)
	}
	found, err := audit.FindVerdict(ctx, js, tenant, id, since, keys)
	var trail *audit.TrailError
	switch {
	case errors.Is(err, gated.ErrNotFound):
		return nil, notFound(fmt.Sprintf(", nor in the audit trail since %s", since.UTC().Format(time.RFC3339)))
	case errors.As(err, &trail), errors.Is(err, audit.ErrTrailAmbiguous):
		return nil, err
	case errors.Is(err, context.DeadlineExceeded):
		return nil, notFound("; the audit trail was not read within --timeout: raise it, or give a later --since")
	case err != nil:
		return nil, notFound("; the audit trail was not read: " + err.Error())
	}
	fmt.Fprintf(w, "note: the key %s.%s is gone from the verdict bucket (past --verdict-ttl, or removed); this verdict is read from the audit trail: record %d of %s, its MAC and the tenant's chain checked over its %d records since %s\n",
		tenant, id, found.Seq, found.Stored.UTC().Format(time.RFC3339), found.Records, since.UTC().Format(time.RFC3339))
	return found.Verdict, nil
}
