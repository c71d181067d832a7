package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
)

func auditTailCmd() *cobra.Command {
	var (
		o      auditReadOptions
		since  string
		last   int
		follow bool
	)
	c := &cobra.Command{
		Use:   "tail",
		Short: "Print the latest audit records, and with --follow new ones as they come",
		Long: `tail prints the last --last records (default 20), or every record stored since
--since, oldest first; --follow then keeps printing new records until
interrupted. Records that are not valid gated records are printed too, marked
as such.

Exit status: 0 done, 2 bad usage, 1 failure (no NATS, no audit stream).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			from, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			if last < 1 {
				return usageError("--last %d must be at least 1", last)
			}
			nc, js, err := o.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			q := audit.Query{Tenant: o.tenant, Since: from}
			return audit.Tail(cmd.Context(), js, cmd.OutOrStdout(), o.json, q, last, follow)
		},
	}
	f := c.Flags()
	o.register(f)
	f.StringVar(&since, "since", "", "records stored since then: a duration (90m, 24h, 7d) or a time (2025-01-02T15:04:05Z)")
	f.IntVar(&last, "last", 20, "how many of the latest records to print when --since is not given")
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new records until interrupted")
	return c
}

func auditQueryCmd() *cobra.Command {
	var (
		o      auditReadOptions
		since  string
		limit  int
		filter audit.Filter
	)
	c := &cobra.Command{
		Use:   "query",
		Short: "Find audit records by outcome, action, operator or tenant",
		Long: `query prints the records that match every filter given, oldest first, up to
--limit. --outcome matches verdict.decided records; --action and --operator
match the action and operator id the records' data names.

Exit status: 0 done (whether or not records matched), 2 bad usage, 1 failure
(no NATS, no audit stream).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			from, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			if limit < 0 {
				return usageError("--limit %d must not be negative (0: no limit)", limit)
			}
			if filter.Outcome != "" && !validOutcome(gated.Outcome(filter.Outcome)) {
				return usageError("--outcome %q: want approved, rejected, blocked, error, timeout or invalid", filter.Outcome)
			}
			nc, js, err := o.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			q := audit.Query{Tenant: o.tenant, Since: from}
			invalid, err := audit.Search(cmd.Context(), js, cmd.OutOrStdout(), o.json, q, filter, limit)
			if err != nil {
				return err
			}
			if invalid > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "gated: %d messages on audit subjects are not valid gated records; run gated audit verify\n", invalid)
			}
			return nil
		},
	}
	f := c.Flags()
	o.register(f)
	f.StringVar(&since, "since", "", "records stored since then: a duration (90m, 24h, 7d) or a time (2025-01-02T15:04:05Z)")
	f.IntVar(&limit, "limit", 100, "print at most this many records (0: no limit)")
	f.StringVar(&filter.Outcome, "outcome", "", "verdicts of this outcome: approved, rejected, blocked, error, timeout, invalid")
	f.StringVar(&filter.Action, "action", "", "records of this action")
	f.StringVar(&filter.Operator, "operator", "", "records of this operator id")
	return c
}

func validOutcome(o gated.Outcome) bool {
	switch o {
	case gated.OutcomeApproved, gated.OutcomeRejected, gated.OutcomeBlocked,
		gated.OutcomeError, gated.OutcomeTimeout, gated.OutcomeInvalid:
		return true
	}
	return false
}

// parseSince reads --since (audit.ParseSince); a bad value is a usage
// error.
func parseSince(s string, now time.Time) (time.Time, error) {
	t, err := audit.ParseSince(s, now)
	if err != nil {
		return t, usageError("%v", err)
	}
	return t, nil
}
