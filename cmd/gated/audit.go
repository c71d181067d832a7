package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/internal/server"
)

// exitAuditProblems is the status of `audit verify` when it found
// problems.
const exitAuditProblems = 3

func auditCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "audit",
		Short: "Read and verify the audit stream",
		Long: `audit reads the GATED_AUDIT stream: tail prints the latest records, query
finds records by outcome, action, operator or tenant, and verify checks every
tenant's hash chain and the records' MACs. See docs/AUDIT.md.`,
	}
	c.AddCommand(auditTailCmd(), auditQueryCmd(), auditVerifyCmd())
	return c
}

// auditReadOptions are the flags every audit command has.
type auditReadOptions struct {
	url    string
	conn   natsConnOptions
	tenant string
	json   bool
}

func (o *auditReadOptions) register(f *pflag.FlagSet) {
	f.StringVar(&o.url, "nats-url", nats.DefaultURL, "NATS server URL")
	f.StringVar(&o.tenant, "tenant", "", "only this tenant's records (_ for gated's own events)")
	f.BoolVar(&o.json, "json", false, "print JSON lines instead of text")
	o.conn.register(f)
}

func (o *auditReadOptions) check() error {
	if o.tenant != "" && o.tenant != gated.UnknownTenant && !gated.ValidTenant(o.tenant) {
		return usageError("--tenant %q must match [a-z0-9_-]{1,64}, or be _ for gated's own events", o.tenant)
	}
	return nil
}

// connect opens JetStream on the server the flags name.
func (o *auditReadOptions) connect() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := o.conn.connect(o.url, "gated-audit", nats.Timeout(5*time.Second), nats.MaxReconnects(0))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("opening JetStream: %w", err)
	}
	return nc, js, nil
}

func auditVerifyCmd() *cobra.Command {
	var (
		o            auditReadOptions
		keyFiles     []string
		anchors      string
		skipVerdicts bool
	)
	c := &cobra.Command{
		Use:   "verify",
		Short: "Check every tenant's hash chain, the records' MACs and the stored verdicts",
		Long: `verify reads the whole audit stream and reports every record that was
modified (its body does not match its hash), removed (a gap in a tenant's
chain or in the stream), reordered (a chain number that goes backwards, a link
to a later record) or forged (not a valid gated record, or, given
--audit-key-file, a missing, unknown or wrong MAC).

Then it reads the verdict store (bucket GATED_VERDICTS) and checks that each
stored verdict's audit_seq holds that verdict's verdict.decided record. A
verdict whose record is gone is reported removed (the stream was cut short or
replaced), one whose sequence holds another record or a different verdict
modified, one whose record is at another sequence reordered; each names the
tenant, the proposal id and the audit_seq. --skip-verdicts leaves this out.

It ends with each tenant's head: its last record's number and hash. Records
cut from the end of a chain leave no gap, and the stored verdicts name only
verdict records, so keep the heads outside NATS and give them back with
--anchors (the output of verify --json will do).

Exit status: 0 no problem, 3 problems found, 2 bad usage, 1 failure (no NATS,
no audit stream, unreadable key).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			var opts audit.VerifyOptions
			opts.Tenant, opts.SkipVerdicts = o.tenant, skipVerdicts
			for _, f := range keyFiles {
				key, err := server.ReadAuditKey(f)
				if err != nil {
					return usageError("--audit-key-file: %v", err)
				}
				opts.Keys = append(opts.Keys, key)
			}
			if anchors != "" {
				data, err := readInput(anchors, cmd.InOrStdin())
				if err != nil {
					return usageError("--anchors: %v", err)
				}
				if opts.Anchors, err = audit.ParseHeads(data); err != nil {
					return usageError("--anchors %s: %v", anchors, err)
				}
			}
			nc, js, err := o.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			rep, err := audit.Verify(cmd.Context(), js, opts)
			if err != nil {
				return err
			}
			if o.json {
				printReportJSON(cmd.OutOrStdout(), rep)
			} else {
				printReport(cmd.OutOrStdout(), rep)
			}
			if !rep.Clean() {
				return &exitError{code: exitAuditProblems, err: fmt.Errorf("%d problem(s) in the audit stream", problemCount(rep))}
			}
			return nil
		},
	}
	f := c.Flags()
	o.register(f)
	f.StringSliceVar(&keyFiles, "audit-key-file", nil, "audit key that MACs the records (repeatable, for rotated keys); without one MACs are not checked")
	_ = c.MarkFlagFilename("audit-key-file")
	f.StringVar(&anchors, "anchors", "", "heads kept from an earlier verify --json (file, or - for standard input); each must still be in its chain")
	_ = c.MarkFlagFilename("anchors")
	f.BoolVar(&skipVerdicts, "skip-verdicts", false, "do not check the stored verdicts against the stream (that check reads the whole verdict bucket)")
	return c
}

// problemCount is how many problems verify found, those of stored
// verdicts it did not list included.
func problemCount(rep *audit.Report) int {
	n := len(rep.Problems)
	if rep.Verdicts != nil {
		n += int(rep.Verdicts.Unlisted)
	}
	return n
}

func printReport(w io.Writer, rep *audit.Report) {
	macs := "MACs not checked (no --audit-key-file: forged records that follow the format go unnoticed)"
	if rep.MACsChecked {
		macs = "MACs checked with key " + strings.Join(rep.KeyIDs, ", ")
	}
	fmt.Fprintf(w, "%d messages (seq %d-%d), %d records, %d tenants; %s\n",
		rep.Messages, rep.FirstSeq, rep.LastSeq, rep.Records, len(rep.Heads), macs)
	if c := rep.Verdicts; c != nil {
		fmt.Fprintf(w, "%d stored verdicts checked against the stream: %d name their verdict.decided record, %d expired, %d problem(s)\n",
			c.Verdicts, c.Matched, c.Expired, c.Problems)
	} else {
		// Skipped, or there is no bucket: a note then says so.
		fmt.Fprintln(w, "stored verdicts not checked")
	}
	for _, p := range rep.Problems {
		tenant := p.Tenant
		if tenant == "" {
			tenant = "-"
		}
		proposal := ""
		if p.ProposalID != "" {
			proposal = " proposal " + p.ProposalID
		}
		fmt.Fprintf(w, "PROBLEM seq %d tenant %s%s %s: %s\n", p.Seq, tenant, proposal, p.Kind, p.Detail)
	}
	if c := rep.Verdicts; c != nil && c.Unlisted > 0 {
		fmt.Fprintf(w, "%d more problem(s) of stored verdicts, not listed\n", c.Unlisted)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if len(rep.Heads) > 0 {
		fmt.Fprintln(w, "heads (keep them outside NATS and pass them to --anchors later: a chain cut short at its end leaves no gap):")
		for _, h := range rep.Heads {
			fmt.Fprintf(w, "  %s n=%d seq=%d hash=%s\n", h.Tenant, h.N, h.Seq, h.Hash)
		}
	}
	if rep.Clean() {
		fmt.Fprintln(w, "no problem found")
	} else {
		fmt.Fprintf(w, "%d problem(s) found\n", problemCount(rep))
	}
}

// printReportJSON prints one JSON object a line: a summary, each problem,
// each note, each head. The head lines serve as --anchors.
func printReportJSON(w io.Writer, rep *audit.Report) {
	enc := json.NewEncoder(w)
	_ = enc.Encode(struct {
		Type        string              `json:"type"`
		Messages    uint64              `json:"messages"`
		Records     uint64              `json:"records"`
		FirstSeq    uint64              `json:"first_seq"`
		LastSeq     uint64              `json:"last_seq"`
		MACsChecked bool                `json:"macs_checked"`
		KeyIDs      []string            `json:"key_ids,omitempty"`
		Problems    int                 `json:"problems"`
		Verdicts    *audit.VerdictCheck `json:"verdicts,omitempty"`
	}{"summary", rep.Messages, rep.Records, rep.FirstSeq, rep.LastSeq, rep.MACsChecked, rep.KeyIDs, problemCount(rep), rep.Verdicts})
	for _, p := range rep.Problems {
		_ = enc.Encode(struct {
			Type string `json:"type"`
			audit.Problem
		}{"problem", p})
	}
	for _, n := range rep.Notes {
		_ = enc.Encode(map[string]string{"type": "note", "note": n})
	}
	for _, h := range rep.Heads {
		_ = enc.Encode(struct {
			Type string `json:"type"`
			audit.Head
		}{"head", h})
	}
}
