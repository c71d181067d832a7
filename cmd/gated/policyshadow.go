package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gated/gated/bus/audit"
)

func policyShadowCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "shadow",
		Short: "See how a shadow policy (serve --shadow-policies) agrees with the live one",
	}
	c.AddCommand(policyShadowReportCmd())
	return c
}

func policyShadowReportCmd() *cobra.Command {
	var (
		o      auditReadOptions
		since  string
		first  int
		format string
	)
	c := &cobra.Command{
		Use:   "report",
		Short: "Summarise the shadow policy's agreement with the live one from the audit stream",
		Long: `report reads the audit stream (GATED_AUDIT) of a gated serve started with
--shadow-policies and summarises how the shadow policy agreed with the live one:
the proposals decided with a shadow (policy.decided records naming a shadow
revision), the differences (policy.shadow_differs records) by kind (error,
outcome, denies, route), by deny rule, tenant, action and live -> shadow
outcome, and the first --first differences with both decisions.

Messages on audit subjects that are not valid records are counted and the
first is named: the range is not whole, and gated audit verify says more.

Exit status: 0 done, 3 invalid records in the range, 2 bad usage, 1 failure
(no NATS, no audit stream).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			if o.json {
				format = "json"
			}
			if err := checkFormat(format); err != nil {
				return err
			}
			if first < 0 {
				return usageError("--first %d must not be negative", first)
			}
			from, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			nc, js, err := o.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			sum := audit.NewShadowSummary(first)
			err = audit.Read(cmd.Context(), js, audit.Query{Tenant: o.tenant, Since: from}, func(e audit.Entry) error {
				sum.Add(e)
				return nil
			})
			if err != nil {
				return fmt.Errorf("reading the audit stream: %w", err)
			}
			if format == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(sum); err != nil {
					return err
				}
			} else {
				sum.WriteText(cmd.OutOrStdout())
			}
			if sum.Invalid > 0 {
				return &exitError{code: exitAuditProblems, err: fmt.Errorf("%d invalid records in the audit range (first: %s); run gated audit verify", sum.Invalid, sum.FirstInvalid)}
			}
			return nil
		},
	}
	f := c.Flags()
	o.register(f)
	_ = f.MarkHidden("json")
	f.StringVar(&since, "since", "", "records stored since then: a duration (90m, 24h, 7d) or a time (2025-01-02T15:04:05Z)")
	f.IntVar(&first, "first", 10, "list this many differences, oldest first")
	f.StringVar(&format, "format", "text", "text or json")
	return c
}
