package budget

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Show prints the counters of the tenants beside limits (every tenant
// with counters or limits of its own when none is named) as a table: what
// gated budgets show prints.
func Show(ctx context.Context, nc *nats.Conn, limits *Config, tenants []string, now time.Time, out io.Writer) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}
	kv, err := js.KeyValue(ctx, Bucket)
	if err != nil {
		return fmt.Errorf("opening bucket %s: %w", Bucket, err)
	}
	s := New(kv, limits, nil)
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

func row(w io.Writer, tenant, scope string, u Usage) {
	c, l := u.Counters, u.Limits
	of := func(n int64, r Rate) string {
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
