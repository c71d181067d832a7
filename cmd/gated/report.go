package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gated/gated/bus/audit"
)

func reportCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "report",
		Short: "Summarise the audit stream",
		Long:  `report reads the GATED_AUDIT stream and summarises it. See docs/GRANTS.md.`,
	}
	c.AddCommand(reportReviewersCmd())
	return c
}

func reportReviewersCmd() *cobra.Command {
	var (
		o      auditReadOptions
		since  time.Duration
		format string
	)
	c := &cobra.Command{
		Use:   "reviewers",
		Short: "Each reviewer's track record: approvals, rejections, approved-then-failed, overrides, latency",
		Long: `reviewers reads the audit stream and prints, per reviewer (plugin, plugin
version, persona, model): its reviews, approvals and rejections; of the approved
verdicts it approved, how many grants were last reported succeeded and failed,
and the approved-then-failed rate (null when none was reported); the operator
decisions on held actions or run reviews that differ from its own; and its
review latency p50 and p99 in milliseconds (nearest rank). Rows are ordered by
plugin, version, persona and model. See docs/GRANTS.md#reviewer-track-record.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			if since < 0 {
				return usageError("--since %s must not be negative", since)
			}
			if o.json {
				format = "json"
			}
			if format != "text" && format != "json" {
				return usageError("--format %q must be text or json", format)
			}
			nc, js, err := o.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			var from time.Time
			if since > 0 {
				from = time.Now().Add(-since)
			}
			var tenants []string
			if o.tenant != "" {
				tenants = []string{o.tenant}
			}
			rows, err := audit.ReadTrackRecord(cmd.Context(), js, tenants, from)
			if err != nil {
				return fmt.Errorf("reading the audit stream: %w", err)
			}
			return audit.WriteReviewers(cmd.OutOrStdout(), rows, format)
		},
	}
	o.register(c.Flags())
	_ = c.Flags().MarkHidden("json") // --format json says it; kept for the audit commands' habit
	c.Flags().DurationVar(&since, "since", 0, "only records stored this long ago or later (0: all)")
	c.Flags().StringVar(&format, "format", "text", "text or json")
	return c
}
