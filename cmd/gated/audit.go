package main

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
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
tenant's hash chain and the records' MACs. checkpoint signs each tenant's
Merkle tree head, prove and export write evidence bundles that verify --bundle
checks with no NATS and no secret. See docs/AUDIT.md.`,
	}
	c.AddCommand(auditTailCmd(), auditQueryCmd(), auditVerifyCmd(), auditCheckpointCmd(), auditProveCmd(), auditExportCmd())
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
		bundle       string
		ek           evidenceKeyOptions
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

With --bundle FILE (- for standard input) it reads no stream: it checks an
evidence bundle that gated audit export or prove wrote, with --key (gated's
checkpoint public key) and no secret; see docs/AUDIT.md#evidence.

Exit status: 0 no problem, 3 problems found, 2 bad usage, 1 failure (no NATS,
no audit stream, unreadable key).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			if bundle != "" {
				return verifyBundle(cmd, bundle, o.tenant, ek, o.json)
			}
			var opts audit.VerifyOptions
			opts.Tenant, opts.SkipVerdicts = o.tenant, skipVerdicts
			integrity := replayIntegrityOptions{keyFiles: keyFiles, anchors: anchors, stdin: cmd.InOrStdin()}
			keys, heads, err := integrity.load("", "")
			if err != nil {
				return err
			}
			opts.Keys, opts.Anchors = keys, heads
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
				rep.WriteJSONLines(cmd.OutOrStdout())
			} else {
				rep.WriteText(cmd.OutOrStdout())
			}
			if !rep.Clean() {
				return &exitError{code: exitAuditProblems, err: fmt.Errorf("%d problem(s) in the audit stream", rep.ProblemCount())}
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
	f.StringVar(&bundle, "bundle", "", "check this evidence bundle (- for standard input) instead of the stream")
	ek.register(f, true)
	return c
}
