package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine"
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
			ctx := cmd.Context()
			out := newAuditPrinter(cmd.OutOrStdout(), o.json)
			q := audit.Query{Tenant: o.tenant, Since: from}
			if from.IsZero() {
				if q.StartSeq, err = printLast(ctx, js, o.tenant, last, out); err != nil {
					return err
				}
				if !follow {
					return nil
				}
			}
			q.Follow = follow
			return audit.Read(ctx, js, q, out.entry)
		},
	}
	f := c.Flags()
	o.register(f)
	f.StringVar(&since, "since", "", "records stored since then: a duration (90m, 24h, 7d) or a time (2025-01-02T15:04:05Z)")
	f.IntVar(&last, "last", 20, "how many of the latest records to print when --since is not given")
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new records until interrupted")
	return c
}

// printLast prints the last n messages (of one tenant, when tenant is
// set) and returns the sequence after them, where following goes on.
func printLast(ctx context.Context, js jetstream.JetStream, tenant string, n int, out *auditPrinter) (uint64, error) {
	q := audit.Query{Tenant: tenant}
	if tenant == "" {
		// Every message of the stream is an audit message: the last n are
		// the last n sequences.
		stream, err := js.Stream(ctx, audit.Stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return 0, audit.ErrNoStream
		}
		if err != nil {
			return 0, fmt.Errorf("opening stream %s: %w", audit.Stream, err)
		}
		st := stream.CachedInfo().State
		if st.Msgs == 0 {
			return st.LastSeq + 1, nil
		}
		q.StartSeq = max(st.FirstSeq, st.LastSeq-min(st.LastSeq, uint64(n))+1)
	}
	// One tenant's messages are spread over the stream: keep the last n.
	ring := make([]audit.Entry, 0, n)
	err := audit.Read(ctx, js, q, func(e audit.Entry) error {
		if len(ring) == n {
			copy(ring, ring[1:])
			ring = ring[:n-1]
		}
		ring = append(ring, e)
		return nil
	})
	if err != nil {
		return 0, err
	}
	next := q.StartSeq
	for _, e := range ring {
		if err := out.entry(e); err != nil {
			return 0, err
		}
		next = e.Seq + 1
	}
	return next, nil
}

// errEnough ends a read once the limit is reached.
var errEnough = errors.New("limit reached")

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
			out := newAuditPrinter(cmd.OutOrStdout(), o.json)
			var matched, invalid int
			err = audit.Read(cmd.Context(), js, audit.Query{Tenant: o.tenant, Since: from}, func(e audit.Entry) error {
				if e.Record == nil {
					invalid++
					return nil
				}
				for i, ev := range e.Record.Events() {
					if !filter.MatchEvent(ev) {
						continue
					}
					if err := out.event(e, i, ev); err != nil {
						return err
					}
					if matched++; limit > 0 && matched >= limit {
						return errEnough
					}
				}
				return nil
			})
			if err != nil && !errors.Is(err, errEnough) {
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

// auditPrinter prints audit messages as text or JSON lines.
type auditPrinter struct {
	w    io.Writer
	json bool
}

func newAuditPrinter(w io.Writer, asJSON bool) *auditPrinter {
	return &auditPrinter{w: w, json: asJSON}
}

// auditDataKeys are the data members a text line shows, in this order.
var auditDataKeys = []string{"outcome", "stage", "action", "operator", "persona", "plugin", "tool", "revision", "error", "reason"}

// entry prints a message of the stream: each event of a record on a
// line of its own, with the record's sequence.
func (p *auditPrinter) entry(e audit.Entry) error {
	if e.Record == nil {
		if p.json {
			line := auditLine{Seq: e.Seq, Stored: e.Stored.UTC(), Subject: e.Subject, Invalid: e.Err.Error()}
			if body, ok := audit.RecordJSON(e.Data); ok && utf8.Valid(body) {
				line.Data = string(body)
			} else {
				line.Raw = e.Data
			}
			return json.NewEncoder(p.w).Encode(line)
		}
		at := e.Stored.UTC().Format("2006-01-02T15:04:05.000Z")
		_, err := fmt.Fprintf(p.w, "%s #%d %s %s (%v)\n", at, e.Seq, orDash(e.Tenant()), e.Subject, e.Err)
		return err
	}
	for i, ev := range e.Record.Events() {
		if err := p.event(e, i, ev); err != nil {
			return err
		}
	}
	return nil
}

// auditLine is a line of --json output: an event of the record at seq
// (the index-th, from 0), or a message that is not a record.
type auditLine struct {
	Seq     uint64    `json:"seq"`
	Index   int       `json:"index,omitempty"`
	Stored  time.Time `json:"stored"`
	Subject string    `json:"subject"`
	// Record is the event as a record of its own holds it (version 1),
	// with the chain link of the record that holds it.
	Record  *auditLineEvent `json:"record,omitempty"`
	Invalid string          `json:"invalid,omitempty"`
	// Data is the body of a message that is not a record, decompressed
	// when it is a zstd frame; Raw, in base64, a body that is neither
	// such a frame nor UTF-8 text.
	Data string `json:"data,omitempty"`
	Raw  []byte `json:"raw,omitempty"`
}

type auditLineEvent struct {
	engine.AuditEvent
	Chain audit.Chain `json:"chain"`
}

// event prints the index-th event of the record e holds.
func (p *auditPrinter) event(e audit.Entry, index int, ev engine.AuditEvent) error {
	if p.json {
		line := auditLine{Seq: e.Seq, Index: index, Stored: e.Stored.UTC(), Subject: e.Subject,
			Record: &auditLineEvent{AuditEvent: ev, Chain: e.Record.Chain}}
		return json.NewEncoder(p.w).Encode(line)
	}
	at := e.Stored.UTC().Format("2006-01-02T15:04:05.000Z")
	var b strings.Builder
	fmt.Fprintf(&b, "%s #%d %s %s %s n=%d", at, e.Seq, ev.Tenant, ev.Event, orDash(ev.ProposalID), e.Record.Chain.N)
	var data map[string]json.RawMessage
	if len(ev.Data) > 0 && json.Unmarshal(ev.Data, &data) == nil {
		for _, k := range auditDataKeys {
			raw, ok := data[k]
			if !ok {
				continue
			}
			var s string
			if json.Unmarshal(raw, &s) != nil {
				s = string(raw)
			}
			if len(s) > 80 {
				s = s[:77] + "..."
			}
			fmt.Fprintf(&b, " %s=%s", k, strconv.Quote(s))
		}
	}
	b.WriteByte('\n')
	_, err := io.WriteString(p.w, b.String())
	return err
}

func validOutcome(o gated.Outcome) bool {
	switch o {
	case gated.OutcomeApproved, gated.OutcomeRejected, gated.OutcomeBlocked,
		gated.OutcomeError, gated.OutcomeTimeout, gated.OutcomeInvalid:
		return true
	}
	return false
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// parseSince reads --since: a duration back from now (90m, 24h, 7d) or a
// time (RFC 3339, or a date). Empty is the zero time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	bad := usageError("--since %q: want a duration such as 90m, 24h or 7d, or a time such as 2025-01-02T15:04:05Z or 2025-01-02", s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		// Written so that NaN, for which every comparison is false, fails.
		if err != nil || !(n > 0 && n <= 36500) {
			return time.Time{}, bad
		}
		return now.Add(-time.Duration(n * float64(24*time.Hour))), nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, bad
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, bad
}
