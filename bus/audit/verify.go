package bus

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/digest"
)

// AuditQuery selects messages of the audit stream for ReadAudit.
type AuditQuery struct {
	// Tenant keeps one tenant's messages; empty keeps all.
	Tenant string
	// Since keeps messages stored at or after it; zero keeps all.
	Since time.Time
	// StartSeq keeps messages at or after this stream sequence; 0 keeps
	// all. Since wins when both are set.
	StartSeq uint64
	// Follow keeps reading new messages until ctx ends, instead of
	// stopping at the last message stored when ReadAudit began.
	Follow bool
}

// AuditEntry is one message of the audit stream.
type AuditEntry struct {
	Seq     uint64
	Stored  time.Time
	Subject string
	Header  nats.Header
	Data    []byte
	// Record is the decoded record, nil when the message is not one.
	Record *AuditRecord
	// Err says why the message is not a valid record (it wraps
	// ErrInvalidAuditRecord); nil when Record is set.
	Err error
}

// Tenant is the tenant the entry belongs to: the record's, or for a
// message that is not a valid record, its subject's tenant token.
func (e AuditEntry) Tenant() string {
	if e.Record != nil {
		return e.Record.Event.Tenant
	}
	return subjectTenant(e.Subject)
}

// errStopReading ends ReadAudit early without an error.
var errStopReading = errors.New("stop reading")

// ReadAudit calls fn with every message of the audit stream that q
// selects, in stream order. It stops at the last message stored when it
// began unless q.Follow is set, when fn returns an error (which it
// returns), or when ctx ends. Errors: ErrNoAuditStream, NATS errors.
func ReadAudit(ctx context.Context, js jetstream.JetStream, q AuditQuery, fn func(AuditEntry) error) error {
	stream, err := js.Stream(ctx, AuditStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return ErrNoAuditStream
	}
	if err != nil {
		return fmt.Errorf("opening stream %s: %w", AuditStream, err)
	}
	return readAudit(ctx, stream, q, fn)
}

func readAudit(ctx context.Context, stream jetstream.Stream, q AuditQuery, fn func(AuditEntry) error) error {
	filter := wire.AuditSubjectPrefix + ">"
	if q.Tenant != "" {
		filter = AuditTenantSubject(q.Tenant)
	}
	// The stop point: the last message of the filter now. Without it the
	// consumer would wait forever for a message that does not come.
	var stop uint64
	if !q.Follow {
		last, err := stream.GetLastMsgForSubject(ctx, filter)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("reading the last audit record: %w", err)
		case !q.Since.IsZero() && last.Time.Before(q.Since), last.Sequence < q.StartSeq:
			return nil
		}
		stop = last.Sequence
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy}
	switch {
	case !q.Since.IsZero():
		since := q.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	case q.StartSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, q.StartSeq
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", AuditStream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", AuditStream, err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				if q.Follow {
					return nil
				}
				return ctx.Err()
			}
			return fmt.Errorf("reading stream %s: %w", AuditStream, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("reading stream %s: %w", AuditStream, err)
		}
		e := AuditEntry{Seq: md.Sequence.Stream, Stored: md.Timestamp, Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
		e.Record, e.Err = DecodeAuditRecord(e.Subject, e.Header, e.Data)
		if e.Record != nil {
			e.Record.Seq, e.Record.Stored = e.Seq, e.Stored
		}
		if err := fn(e); err != nil {
			if errors.Is(err, errStopReading) {
				return nil
			}
			return err
		}
		if !q.Follow && (e.Seq >= stop || md.NumPending == 0) {
			return nil
		}
	}
}

// AuditFilter selects records by what their data says. Empty fields
// select everything.
type AuditFilter struct {
	// Outcome keeps verdict.decided records of this outcome.
	Outcome string
	// Action keeps records whose data names this action.
	Action string
	// Operator keeps records whose data names this operator id.
	Operator string
}

// Match reports whether r passes the filter.
func (f AuditFilter) Match(r *AuditRecord) bool {
	if r == nil {
		return false
	}
	if f == (AuditFilter{}) {
		return true
	}
	var d struct {
		Action   string `json:"action"`
		Operator string `json:"operator"`
		Outcome  string `json:"outcome"`
	}
	if len(r.Event.Data) > 0 {
		_ = json.Unmarshal(r.Event.Data, &d)
	}
	switch {
	case f.Outcome != "" && (r.Event.Event != engine.EventVerdict || d.Outcome != f.Outcome):
		return false
	case f.Action != "" && d.Action != f.Action:
		return false
	case f.Operator != "" && d.Operator != f.Operator:
		return false
	}
	return true
}

// ProblemKind classifies what Verify found wrong with a record.
type ProblemKind string

// The kinds of problem Verify reports.
const (
	// ProblemModified: a record's body does not match its hash, or a
	// record's link does not match the record it follows (one of the two
	// was altered).
	ProblemModified ProblemKind = "modified"
	// ProblemRemoved: records are missing: the chain number jumps, a link
	// points to no record, or stream sequences are missing.
	ProblemRemoved ProblemKind = "removed"
	// ProblemReordered: a record comes after a record with a higher chain
	// number (a copy, or records swapped), or links to a record stored
	// after it.
	ProblemReordered ProblemKind = "reordered"
	// ProblemForged: a message on an audit subject that is not a valid
	// gated record, or, when keys are given, a record without a MAC, with
	// an unknown key id, or with a wrong MAC.
	ProblemForged ProblemKind = "forged"
)

// AuditProblem is one thing Verify found wrong.
type AuditProblem struct {
	// Seq is the stream sequence of the record concerned; for a stored
	// verdict, its audit_seq. 0 when there is none.
	Seq    uint64 `json:"seq"`
	Tenant string `json:"tenant"`
	// ProposalID names the proposal of a stored verdict that does not
	// match the stream; empty for the stream's own problems.
	ProposalID string      `json:"proposal_id,omitempty"`
	Kind       ProblemKind `json:"kind"`
	Detail     string      `json:"detail"`
}

// AuditHead is the last record of a tenant's chain. Kept outside NATS,
// heads are anchors: a later Verify given them detects the chain cut
// short or rewritten after them, which the chain alone cannot show.
type AuditHead struct {
	Tenant string `json:"tenant"`
	N      uint64 `json:"n"`
	Hash   string `json:"hash"`
	Seq    uint64 `json:"seq,omitempty"`
}

// AuditReport is the outcome of Verify.
type AuditReport struct {
	// Messages is how many messages were read, Records how many of them
	// are valid records; FirstSeq and LastSeq bound them.
	Messages uint64 `json:"messages"`
	Records  uint64 `json:"records"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	// MACsChecked is true when keys were given.
	MACsChecked bool `json:"macs_checked"`
	// KeyIDs are the ids of the keys given.
	KeyIDs []string `json:"key_ids,omitempty"`
	// Problems, in stream order; then those of anchors; then those of
	// stored verdicts (at most VerifyOptions.MaxVerdictProblems of them).
	Problems []AuditProblem `json:"problems"`
	// Verdicts sums up the cross-check of the verdict store; nil when it
	// was skipped or there is no verdict bucket.
	Verdicts *VerdictCheck `json:"verdicts,omitempty"`
	// Heads are the last record of every tenant's chain, by tenant.
	Heads []AuditHead `json:"heads"`
	// Notes say what was accepted but is worth knowing, e.g. a chain
	// that starts after records expired.
	Notes []string `json:"notes,omitempty"`
}

// Clean reports whether Verify found no problem, listed or not.
func (r *AuditReport) Clean() bool {
	return len(r.Problems) == 0 && (r.Verdicts == nil || r.Verdicts.Problems == 0)
}

// VerifyOptions configures Verify.
type VerifyOptions struct {
	// Tenant verifies one tenant's chain; empty verifies every tenant and
	// also looks for stream sequences that are missing.
	Tenant string
	// Keys are the audit keys whose MACs are accepted (more than one
	// after a key rotation). With none, MACs are not checked and a forged
	// record that follows the format goes unnoticed.
	Keys [][]byte
	// Anchors are heads recorded earlier (AuditReport.Heads): each must
	// still be in its chain, with the same hash.
	Anchors []AuditHead
	// SkipVerdicts leaves out the cross-check of the verdict store: by
	// default every stored verdict (of Tenant, when set) must name, as its
	// audit_seq, its own verdict.decided record. The check reads the
	// bucket once and costs memory for each verdict.decided record read
	// (see VerdictCheck).
	SkipVerdicts bool
	// MaxVerdictProblems bounds how many problems of stored verdicts are
	// listed in the report; the rest are counted. Default
	// DefaultMaxVerdictProblems.
	MaxVerdictProblems int
}

// Verify reads the audit stream up to its last record and checks every
// tenant's chain: each record's hash against its body, its MAC when keys
// are given, and its link to the tenant's record before it. Then, unless
// opts.SkipVerdicts, it reads the verdict store and checks that every
// stored verdict's audit_seq holds that verdict's verdict.decided record.
// It returns the report; an error means the stream or the bucket could not
// be read (ErrNoAuditStream, NATS errors), not that problems were found.
//
// The chain alone cannot show records cut from the end of a tenant's
// chain, nor a stream replaced whole; the stored verdicts show it for
// verdict records they name. Keep the report's heads elsewhere and pass
// them back as Anchors to see the rest.
func Verify(ctx context.Context, js jetstream.JetStream, opts VerifyOptions) (*AuditReport, error) {
	stream, err := js.Stream(ctx, AuditStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoAuditStream
	}
	if err != nil {
		return nil, fmt.Errorf("opening stream %s: %w", AuditStream, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", AuditStream, err)
	}
	v := newAuditVerifier(opts)
	cfg := info.Config
	v.mayExpire = cfg.MaxAge > 0 || cfg.MaxMsgs > 0 || cfg.MaxBytes > 0 || cfg.MaxMsgsPerSubject > 0
	v.expired = info.State.FirstSeq > 1
	if opts.Tenant == "" {
		v.nextSeq = max(info.State.FirstSeq, 1)
		if v.expired && !v.mayExpire {
			v.problem(0, "", ProblemRemoved, fmt.Sprintf("stream sequences 1-%d are gone, yet the stream has no limit that expires records", info.State.FirstSeq-1))
		}
	}
	var idx *verdictIndex
	if !opts.SkipVerdicts {
		idx = &verdictIndex{}
	}
	err = readAudit(ctx, stream, AuditQuery{Tenant: opts.Tenant}, func(e AuditEntry) error {
		v.add(e)
		if idx != nil {
			idx.add(e)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if opts.Tenant == "" && v.report.Messages > 0 && info.State.LastSeq > v.report.LastSeq {
		// The stream counts its last sequence even once that message is
		// deleted; the read, from before which it was taken, ended earlier.
		// Limits expire the oldest records, never the newest alone.
		v.problem(v.report.LastSeq+1, "", ProblemRemoved, fmt.Sprintf("stream sequences %d-%d are missing at the end of the stream: deleted from it", v.report.LastSeq+1, info.State.LastSeq))
	}
	rep := v.finish()
	if idx != nil {
		if err := checkVerdicts(ctx, js, stream, idx, opts, v.mayExpire, rep); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// auditVerifier checks records fed to it in stream order.
type auditVerifier struct {
	keys   map[string][]byte
	report AuditReport
	chains map[string]*chainState
	// mayExpire is true when the stream's limits remove old records, and
	// expired when some have gone: a chain may then start past 1.
	mayExpire, expired bool
	// nextSeq is the stream sequence expected next; 0 when not checked
	// (one tenant's records are not contiguous).
	nextSeq uint64
	anchors map[string][]AuditHead
}

// chainState is what the verifier knows of one tenant's chain.
type chainState struct {
	// started is set by the tenant's first valid record; n, hash and seq
	// are the chain's head: the valid record with the highest n so far.
	started bool
	n       uint64
	hash    string
	seq     uint64
	// last is the tenant's last message of any kind, valid or not, and
	// lastValid says which; a writer that finds an invalid message at the
	// end of a chain restarts the chain at 1, linked to it.
	last      string
	lastValid bool
	// pending maps links that pointed to no known record to the problems
	// reported for them; a record stored later with that hash turns them
	// into reorderings.
	pending map[string][]int
}

func newAuditVerifier(opts VerifyOptions) *auditVerifier {
	v := &auditVerifier{chains: make(map[string]*chainState), report: AuditReport{Problems: []AuditProblem{}, Heads: []AuditHead{}}}
	if len(opts.Keys) > 0 {
		v.keys = make(map[string][]byte, len(opts.Keys))
		for _, k := range opts.Keys {
			id := AuditKeyID(k)
			v.keys[id] = k
			v.report.KeyIDs = append(v.report.KeyIDs, id)
		}
		v.report.MACsChecked = true
	}
	for _, a := range opts.Anchors {
		if v.anchors == nil {
			v.anchors = make(map[string][]AuditHead)
		}
		v.anchors[a.Tenant] = append(v.anchors[a.Tenant], a)
	}
	return v
}

func (v *auditVerifier) problem(seq uint64, tenant string, kind ProblemKind, detail string) int {
	v.report.Problems = append(v.report.Problems, AuditProblem{Seq: seq, Tenant: tenant, Kind: kind, Detail: detail})
	return len(v.report.Problems) - 1
}

func (v *auditVerifier) chain(tenant string) *chainState {
	c := v.chains[tenant]
	if c == nil {
		c = &chainState{}
		v.chains[tenant] = c
	}
	return c
}

// add checks one message; messages come in stream order.
func (v *auditVerifier) add(e AuditEntry) {
	rep := &v.report
	rep.Messages++
	if rep.FirstSeq == 0 {
		rep.FirstSeq = e.Seq
	}
	rep.LastSeq = e.Seq
	if v.nextSeq != 0 {
		if e.Seq > v.nextSeq {
			v.problem(e.Seq, "", ProblemRemoved, fmt.Sprintf("stream sequences %d-%d are missing: deleted from the stream", v.nextSeq, e.Seq-1))
		}
		v.nextSeq = e.Seq + 1
	}
	sum := sha256.Sum256(e.Data)
	digest := hex.EncodeToString(sum[:])
	tenant := e.Tenant()
	c := v.chain(tenant)
	if e.Record == nil {
		v.problem(e.Seq, tenant, ProblemForged, e.Err.Error())
		c.last, c.lastValid = digest, false
		return
	}
	rep.Records++
	r := e.Record
	if r.Hash != digest {
		v.problem(e.Seq, tenant, ProblemModified, "the body does not match its "+wire.AuditHashHeader+" header")
	}
	v.checkMAC(e.Seq, tenant, r)
	v.link(e.Seq, tenant, c, r, digest)
	c.last, c.lastValid = digest, true
	v.checkAnchor(e.Seq, tenant, r.Chain.N, digest)
}

func (v *auditVerifier) checkMAC(seq uint64, tenant string, r *AuditRecord) {
	if v.keys == nil {
		return
	}
	if r.MAC == "" {
		v.problem(seq, tenant, ProblemForged, "no MAC, yet records are MACed")
		return
	}
	key, ok := v.keys[r.KeyID]
	if !ok {
		v.problem(seq, tenant, ProblemForged, fmt.Sprintf("MACed with unknown key %s", r.KeyID))
		return
	}
	var digest [sha256.Size]byte
	raw, err := hex.DecodeString(r.Hash)
	if err == nil {
		copy(digest[:], raw)
	}
	if err != nil || !hmac.Equal([]byte(auditMAC(key, digest)), []byte(strings.ToLower(r.MAC))) {
		v.problem(seq, tenant, ProblemForged, fmt.Sprintf("the MAC does not match under key %s", r.KeyID))
	}
}

// link checks r's place in its tenant's chain and moves the head.
func (v *auditVerifier) link(seq uint64, tenant string, c *chainState, r *AuditRecord, digest string) {
	n, prev := r.Chain.N, r.Chain.Prev
	// A link to this record resolves problems reported before it: they
	// pointed forward in the stream.
	if idx, ok := c.pending[digest]; ok {
		for _, i := range idx {
			p := &v.report.Problems[i]
			p.Kind = ProblemReordered
			p.Detail += fmt.Sprintf("; the record it links to is stored later, at seq %d", seq)
		}
		delete(c.pending, digest)
	}
	advance := func() { c.started, c.n, c.hash, c.seq = true, n, digest, seq }
	overInvalid := prev != "" && prev == c.last && !c.lastValid
	switch {
	case overInvalid:
		// A writer found an invalid message at the end of the chain (it is
		// reported as forged) and linked past it.
		advance()
	case !c.started && n == 1 && prev == "":
		advance()
	case !c.started && v.mayExpire && v.expired:
		v.report.Notes = append(v.report.Notes, fmt.Sprintf("tenant %s: the chain starts at n=%d (seq %d): earlier records expired", tenant, n, seq))
		advance()
	case !c.started:
		v.pend(c, prev, v.problem(seq, tenant, ProblemRemoved, fmt.Sprintf("the tenant's first record is n=%d: records before it are missing", n)))
		advance()
	case n == c.n+1 && prev == c.hash:
		advance()
	case n <= c.n:
		v.problem(seq, tenant, ProblemReordered, fmt.Sprintf("n=%d comes after n=%d (seq %d)", n, c.n, c.seq))
	case n > c.n+1:
		v.pend(c, prev, v.problem(seq, tenant, ProblemRemoved, fmt.Sprintf("n jumps from %d (seq %d) to %d: %d record(s) missing", c.n, c.seq, n, n-c.n-1)))
		advance()
	default:
		v.pend(c, prev, v.problem(seq, tenant, ProblemModified, fmt.Sprintf("the link does not match record n=%d (seq %d): one of the two was altered", c.n, c.seq)))
		advance()
	}
}

func (v *auditVerifier) pend(c *chainState, prev string, problem int) {
	if prev == "" {
		return
	}
	if c.pending == nil {
		c.pending = make(map[string][]int)
	}
	c.pending[prev] = append(c.pending[prev], problem)
}

func (v *auditVerifier) checkAnchor(seq uint64, tenant string, n uint64, digest string) {
	for i, a := range v.anchors[tenant] {
		if a.N != n {
			continue
		}
		if a.Hash != digest {
			v.problem(seq, tenant, ProblemModified, fmt.Sprintf("record n=%d does not match its anchor (hash %s)", n, a.Hash))
		}
		v.anchors[tenant][i].N = 0 // found
	}
}

func (v *auditVerifier) finish() *AuditReport {
	rep := &v.report
	tenants := make([]string, 0, len(v.chains))
	for t, c := range v.chains {
		if c.started {
			tenants = append(tenants, t)
		}
	}
	sort.Strings(tenants)
	for _, t := range tenants {
		c := v.chains[t]
		rep.Heads = append(rep.Heads, AuditHead{Tenant: t, N: c.n, Hash: c.hash, Seq: c.seq})
	}
	anchored := make([]string, 0, len(v.anchors))
	for t := range v.anchors {
		anchored = append(anchored, t)
	}
	sort.Strings(anchored)
	for _, t := range anchored {
		for _, a := range v.anchors[t] {
			if a.N != 0 {
				v.problem(0, t, ProblemRemoved, fmt.Sprintf("anchored record n=%d (hash %s) is not in the chain: the chain was cut short or rewritten", a.N, a.Hash))
			}
		}
	}
	return rep
}

// subjectTenant is the tenant token of an audit subject, or "" when the
// subject has none.
func subjectTenant(subject string) string {
	rest, ok := strings.CutPrefix(subject, wire.AuditSubjectPrefix)
	if !ok {
		return ""
	}
	tenant, _, _ := strings.Cut(rest, ".")
	return tenant
}

// ParseAuditHeads reads anchors: JSON lines (or one JSON array) of
// AuditHead, as `gated audit verify --json` prints them.
func ParseAuditHeads(data []byte) ([]AuditHead, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, nil
	}
	if data[0] == '[' {
		var heads []AuditHead
		if err := json.Unmarshal(data, &heads); err != nil {
			return nil, fmt.Errorf("reading anchors: %w", err)
		}
		return checkHeads(heads)
	}
	var heads []AuditHead
	dec := json.NewDecoder(bytes.NewReader(data))
	// Decode until EOF, not while dec.More(): More reports false at a
	// stray ']' or '}', which would end the anchors there silently, and an
	// anchors file that reads as fewer anchors than it holds defeats them.
	for line := 1; ; line++ {
		var h struct {
			AuditHead
			Type string `json:"type"`
		}
		err := dec.Decode(&h)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading anchors: item %d: %w", line, err)
		}
		if h.Type == "" || h.Type == "head" {
			heads = append(heads, h.AuditHead)
		}
	}
	return checkHeads(heads)
}

func checkHeads(heads []AuditHead) ([]AuditHead, error) {
	for i, h := range heads {
		if !validAuditTenant(h.Tenant) || h.N == 0 || !digest.ValidSHA256(h.Hash) {
			return nil, fmt.Errorf("reading anchors: item %d: want a tenant, n ≥ 1 and a hex SHA-256 hash", i+1)
		}
	}
	return heads, nil
}
