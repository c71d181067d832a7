package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine"
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
				printShadowSummary(cmd.OutOrStdout(), sum)
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

func printShadowSummary(w io.Writer, s *audit.ShadowSummary) {
	fmt.Fprintf(w, "decisions with a shadow: %d\ndifferences: %d\nagreement: %.4f\n", s.Decisions, s.Differences, s.Agreement)
	counts := func(title string, m map[string]int) {
		if len(m) == 0 {
			return
		}
		fmt.Fprintf(w, "%s:\n", title)
		keys := slices.Sorted(maps.Keys(m))
		slices.SortStableFunc(keys, func(a, b string) int { return m[b] - m[a] })
		for _, k := range keys {
			fmt.Fprintf(w, "  %-40s %d\n", orDash(k), m[k])
		}
	}
	counts("shadow revisions", s.ShadowRevisions)
	counts("by kind", s.ByKind)
	counts("by outcome (live -> shadow)", s.ByOutcome)
	counts("by rule", s.ByRule)
	counts("by tenant", s.ByTenant)
	counts("by action", s.ByAction)
	if len(s.First) > 0 {
		fmt.Fprintf(w, "first differences:\n")
	}
	for _, d := range s.First {
		fmt.Fprintf(w, "  seq %d %s %s/%s %s: live %s%s, shadow %s%s [%s]\n", d.Seq, d.At.Format(time.RFC3339), d.Tenant, d.ProposalID, d.Action,
			d.Live.Outcome, shadowDetail(d.Live.Denies, d.Live.Route, d.Live.Error), d.Shadow.Outcome, shadowDetail(d.Shadow.Denies, d.Shadow.Route, d.Shadow.Error), strings.Join(d.Kinds, ", "))
	}
	if s.Invalid > 0 {
		fmt.Fprintf(w, "invalid records: %d (first: %s)\n", s.Invalid, s.FirstInvalid)
	}
}

// shadowDetail is one side's denies, route or error in a few words.
func shadowDetail(denies []gated.Deny, route *engine.Route, err string) string {
	switch {
	case err != "":
		return " (" + err + ")"
	case len(denies) > 0:
		rules := make([]string, 0, len(denies))
		for _, d := range denies {
			rules = append(rules, d.Rule)
		}
		return " (" + strings.Join(rules, ", ") + ")"
	case route != nil && route.Required:
		return fmt.Sprintf(" (to %s, quorum %d)", orDash(route.Persona), route.Quorum)
	}
	return ""
}
