package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/engine"
)

// exitAuditProblems is the status of `audit verify` when it found
// problems.
const exitAuditProblems = 3

// auditKeyFile is the name of the key gated creates in --data-dir when it
// runs the embedded server and no key file is given.
const auditKeyFile = "audit.key"

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
	if o.tenant != "" && o.tenant != engine.UnknownTenant && !engine.ValidTenant(o.tenant) {
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
			q := bus.AuditQuery{Tenant: o.tenant, Since: from}
			if from.IsZero() {
				if q.StartSeq, err = printLast(ctx, js, o.tenant, last, out); err != nil {
					return err
				}
				if !follow {
					return nil
				}
			}
			q.Follow = follow
			return bus.ReadAudit(ctx, js, q, out.entry)
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
	q := bus.AuditQuery{Tenant: tenant}
	if tenant == "" {
		// Every message of the stream is an audit message: the last n are
		// the last n sequences.
		stream, err := js.Stream(ctx, bus.AuditStream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return 0, bus.ErrNoAuditStream
		}
		if err != nil {
			return 0, fmt.Errorf("opening stream %s: %w", bus.AuditStream, err)
		}
		st := stream.CachedInfo().State
		if st.Msgs == 0 {
			return st.LastSeq + 1, nil
		}
		q.StartSeq = max(st.FirstSeq, st.LastSeq-min(st.LastSeq, uint64(n))+1)
	}
	// One tenant's messages are spread over the stream: keep the last n.
	ring := make([]bus.AuditEntry, 0, n)
	err := bus.ReadAudit(ctx, js, q, func(e bus.AuditEntry) error {
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
		filter bus.AuditFilter
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
			if filter.Outcome != "" && !validOutcome(engine.Outcome(filter.Outcome)) {
				return usageError("--outcome %q: want approved, rejected, blocked, error, timeout or invalid", filter.Outcome)
			}
			nc, js, err := o.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			out := newAuditPrinter(cmd.OutOrStdout(), o.json)
			var matched, invalid int
			err = bus.ReadAudit(cmd.Context(), js, bus.AuditQuery{Tenant: o.tenant, Since: from}, func(e bus.AuditEntry) error {
				if e.Record == nil {
					invalid++
					return nil
				}
				if !filter.Match(e.Record) {
					return nil
				}
				if err := out.entry(e); err != nil {
					return err
				}
				if matched++; limit > 0 && matched >= limit {
					return errEnough
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
			var opts bus.VerifyOptions
			opts.Tenant, opts.SkipVerdicts = o.tenant, skipVerdicts
			for _, f := range keyFiles {
				key, err := readAuditKey(f)
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
				if opts.Anchors, err = bus.ParseAuditHeads(data); err != nil {
					return usageError("--anchors %s: %v", anchors, err)
				}
			}
			nc, js, err := o.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			rep, err := bus.Verify(cmd.Context(), js, opts)
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
func problemCount(rep *bus.AuditReport) int {
	n := len(rep.Problems)
	if rep.Verdicts != nil {
		n += int(rep.Verdicts.Unlisted)
	}
	return n
}

func printReport(w io.Writer, rep *bus.AuditReport) {
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
func printReportJSON(w io.Writer, rep *bus.AuditReport) {
	enc := json.NewEncoder(w)
	_ = enc.Encode(struct {
		Type        string            `json:"type"`
		Messages    uint64            `json:"messages"`
		Records     uint64            `json:"records"`
		FirstSeq    uint64            `json:"first_seq"`
		LastSeq     uint64            `json:"last_seq"`
		MACsChecked bool              `json:"macs_checked"`
		KeyIDs      []string          `json:"key_ids,omitempty"`
		Problems    int               `json:"problems"`
		Verdicts    *bus.VerdictCheck `json:"verdicts,omitempty"`
	}{"summary", rep.Messages, rep.Records, rep.FirstSeq, rep.LastSeq, rep.MACsChecked, rep.KeyIDs, problemCount(rep), rep.Verdicts})
	for _, p := range rep.Problems {
		_ = enc.Encode(struct {
			Type string `json:"type"`
			bus.AuditProblem
		}{"problem", p})
	}
	for _, n := range rep.Notes {
		_ = enc.Encode(map[string]string{"type": "note", "note": n})
	}
	for _, h := range rep.Heads {
		_ = enc.Encode(struct {
			Type string `json:"type"`
			bus.AuditHead
		}{"head", h})
	}
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

func (p *auditPrinter) entry(e bus.AuditEntry) error {
	if p.json {
		line := struct {
			Seq     uint64          `json:"seq"`
			Stored  time.Time       `json:"stored"`
			Subject string          `json:"subject"`
			Record  json.RawMessage `json:"record,omitempty"`
			Invalid string          `json:"invalid,omitempty"`
			Data    string          `json:"data,omitempty"`
		}{Seq: e.Seq, Stored: e.Stored.UTC(), Subject: e.Subject}
		if e.Record != nil {
			line.Record = e.Data
		} else {
			line.Invalid, line.Data = e.Err.Error(), string(e.Data)
		}
		return json.NewEncoder(p.w).Encode(line)
	}
	at := e.Stored.UTC().Format("2006-01-02T15:04:05.000Z")
	if e.Record == nil {
		_, err := fmt.Fprintf(p.w, "%s #%d %s %s (%v)\n", at, e.Seq, orDash(e.Tenant()), e.Subject, e.Err)
		return err
	}
	ev := e.Record.Event
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

func validOutcome(o engine.Outcome) bool {
	switch o {
	case engine.OutcomeApproved, engine.OutcomeRejected, engine.OutcomeBlocked,
		engine.OutcomeError, engine.OutcomeTimeout, engine.OutcomeInvalid:
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

// readAuditKey reads an audit key file: 32 or more random bytes, raw or
// hex.
func readAuditKey(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := bus.ParseAuditKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return key, nil
}

// ensureAuditKey returns the key in dir/audit.key, creating it (32 random
// bytes in hex, mode 0600) when there is none. created says which.
func ensureAuditKey(dir string) (key []byte, path string, created bool, err error) {
	path = filepath.Join(dir, auditKeyFile)
	key, err = readAuditKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, path, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, path, false, fmt.Errorf("creating the audit key: %w", err)
	}
	raw := make([]byte, bus.MinAuditKeyLen)
	if _, err := rand.Read(raw); err != nil {
		return nil, path, false, fmt.Errorf("creating the audit key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// Another gated on the same directory was quicker.
		key, err = readAuditKey(path)
		return key, path, false, err
	}
	if err != nil {
		return nil, path, false, fmt.Errorf("creating the audit key: %w", err)
	}
	_, werr := f.WriteString(hex.EncodeToString(raw) + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(path)
		return nil, path, false, fmt.Errorf("writing the audit key %s: %w", path, werr)
	}
	return raw, path, true, nil
}

// parsePublishMode reads --audit-publish.
func parsePublishMode(s string) (bus.PublishMode, error) {
	switch s {
	case "auto":
		return bus.PublishAuto, nil
	case "batches":
		return bus.PublishBatches, nil
	case "one-at-a-time":
		return bus.PublishOneAtATime, nil
	case "pipelined":
		return bus.PublishPipelined, nil
	}
	return 0, usageError("--audit-publish %q: want auto, batches, pipelined or one-at-a-time", s)
}

// serveAuditKey decides, before serve writes anything, the key its audit
// records are MACed with: --audit-key-file; failing that, with the
// embedded server, <data-dir>/audit.key, created on first start; failing
// that, none, and forged records cannot be detected, which it logs.
//
// The key must extend the audit stream's chain (see bus.CheckAuditKey):
// a gated without the key of a stream of MACed records, or with another
// key, does not start, and a missing <data-dir>/audit.key is not replaced
// while the stream holds MACed records, unless --audit-key-rotate says the
// change is meant.
func serveAuditKey(ctx context.Context, js jetstream.JetStream, o serveOptions, embedded bool, log *zap.Logger) ([]byte, error) {
	var (
		key     []byte
		keyFile = o.auditKeyFile
		err     error
	)
	switch {
	case keyFile != "":
		if key, err = readAuditKey(keyFile); err != nil {
			return nil, usageError("--audit-key-file: %v", err)
		}
		if st, err := os.Stat(keyFile); err == nil && st.Mode().Perm()&0o077 != 0 {
			log.Warn("the audit key file is readable by others: whoever reads it can forge audit records; chmod 600 it",
				zap.String("file", keyFile), zap.Stringer("mode", st.Mode().Perm()))
		}
	case embedded:
		keyFile = filepath.Join(o.dataDir, auditKeyFile)
		if key, err = readAuditKey(keyFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	checkCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = bus.CheckAuditKey(checkCtx, js, key)
	cancel()
	var mismatch *bus.AuditKeyError
	switch {
	case errors.As(err, &mismatch) && o.auditKeyRotate:
		// Logged below, once the new key is known.
	case errors.As(err, &mismatch):
		return nil, auditKeyRefusal(mismatch, o, keyFile, embedded)
	case err != nil:
		return nil, fmt.Errorf("checking the audit key against the audit stream: %w", err)
	}
	switch {
	case key != nil:
	case embedded:
		var created bool
		if key, _, created, err = ensureAuditKey(o.dataDir); err != nil {
			return nil, err
		}
		if created {
			log.Info("created the audit key; give it to gated audit verify --audit-key-file, and keep a copy outside the data directory",
				zap.String("file", keyFile))
		}
	default:
		log.Warn("no --audit-key-file: audit records are chained but not MACed, so a forged record that follows the format cannot be detected")
	}
	if mismatch != nil {
		log.Warn("--audit-key-rotate: the audit key changes; verify needs the old key and the new one from here on",
			zap.String("chain_key_id", mismatch.RecordKeyID), zap.Uint64("chain_seq", mismatch.Seq), zap.String("new_key_id", keyID(key)))
	}
	return key, nil
}

// keyID is the id of key, or "none".
func keyID(key []byte) string {
	if len(key) == 0 {
		return "none"
	}
	return bus.AuditKeyID(key)
}

// auditKeyRefusal explains why serve does not start with the key it has,
// and how to give it the right one.
func auditKeyRefusal(e *bus.AuditKeyError, o serveOptions, keyFile string, embedded bool) error {
	const share = "give every gated on this stream the same key: --audit-key-file FILE, GATED_AUDIT_KEY_FILE=FILE or audit_key_file in the --config file"
	const rotate = "; to start a new key on purpose, add --audit-key-rotate"
	switch {
	case e.Problem == bus.AuditKeyMissing && embedded && o.auditKeyFile == "":
		return fmt.Errorf("%s is missing, yet the audit stream holds records MACed with key %s (the newest at seq %d): restore the key file from your copy, or give it with --audit-key-file%s",
			keyFile, e.RecordKeyID, e.Seq, rotate)
	case e.Problem == bus.AuditKeyMissing:
		return fmt.Errorf("%v: %s (the first gated keeps it in <data-dir>/%s)%s", e, share, auditKeyFile, rotate)
	case e.Problem == bus.AuditKeyOther:
		return fmt.Errorf("%s holds key %s, but the audit stream's newest record (seq %d) is MACed with key %s: %s%s",
			keyFile, e.KeyID, e.Seq, e.RecordKeyID, share, rotate)
	}
	return fmt.Errorf("%v: run gated audit verify --audit-key-file %s; to start anyway, add --audit-key-rotate", e, keyFile)
}

// newServeAuditor starts serve's Auditor with the key serveAuditKey
// chose.
func newServeAuditor(ctx context.Context, js jetstream.JetStream, o serveOptions, key []byte, log *zap.Logger) (*bus.Auditor, error) {
	mode, err := parsePublishMode(o.auditPublish)
	if err != nil {
		return nil, err
	}
	a, err := bus.NewAuditor(ctx, js, bus.AuditorConfig{Key: key, Log: log.Named("audit"), Publish: mode})
	if err != nil {
		return nil, err
	}
	log.Info("audit trail", zap.String("instance", a.Instance()), zap.String("key_id", a.KeyID()), zap.Bool("atomic_batches", a.Batching()))
	return a, nil
}

// closeAuditor drains the Auditor at shutdown: events queued are stored.
func closeAuditor(a *bus.Auditor, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		log.Error("audit events queued at shutdown were lost", zap.Error(err))
	}
}
