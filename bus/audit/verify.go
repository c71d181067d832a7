package audit

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sort"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/engine/wire"
)

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

// Problem is one thing Verify found wrong.
type Problem struct {
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

// Report is the outcome of Verify.
type Report struct {
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
	Problems []Problem `json:"problems"`
	// Verdicts sums up the cross-check of the verdict store; nil when it
	// was skipped or there is no verdict bucket.
	Verdicts *VerdictCheck `json:"verdicts,omitempty"`
	// Heads are the last record of every tenant's chain, by tenant.
	Heads []Head `json:"heads"`
	// Notes say what was accepted but is worth knowing, e.g. a chain
	// that starts after records expired.
	Notes []string `json:"notes,omitempty"`
}

// Clean reports whether Verify found no problem, listed or not.
func (r *Report) Clean() bool {
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
	// Anchors are heads recorded earlier (Report.Heads): each must
	// still be in its chain, with the same hash.
	Anchors []Head
	// SkipVerdicts leaves out the cross-check of the verdict store: by
	// default every stored verdict (of Tenant, when set) must name, as its
	// audit_seq, its own verdict.decided record. The check reads the
	// bucket once, beside the stream, and keeps a bounded window of each
	// (docs/AUDIT.md, what the verdict check costs).
	SkipVerdicts bool
	// MaxVerdictProblems bounds how many problems of stored verdicts are
	// listed in the report; the rest are counted. Default
	// defaultMaxVerdictProblems.
	MaxVerdictProblems int
}

// Verify reads the audit stream up to its last record and checks every
// tenant's chain: each record's hash against its body, its MAC when keys
// are given, and its link to the tenant's record before it. Then, unless
// opts.SkipVerdicts, it reads the verdict store and checks that every
// stored verdict's audit_seq holds that verdict's verdict.decided record.
// It returns the report; an error means the stream or the bucket could not
// be read (ErrNoStream, NATS errors), not that problems were found.
//
// The chain alone cannot show records cut from the end of a tenant's
// chain, nor a stream replaced whole; the stored verdicts show it for
// verdict records they name. Keep the report's heads elsewhere and pass
// them back as Anchors to see the rest.
func Verify(ctx context.Context, js jetstream.JetStream, opts VerifyOptions) (*Report, error) {
	stream, err := js.Stream(ctx, Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoStream
	}
	if err != nil {
		return nil, fmt.Errorf("opening stream %s: %w", Stream, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", Stream, err)
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
	var m *verdictMerge
	if !opts.SkipVerdicts {
		if m, err = startVerdictMerge(ctx, js, stream, opts, v.mayExpire, &v.report); err != nil {
			return nil, err
		}
	}
	if m != nil {
		defer m.stop()
	}
	q := Query{Tenant: opts.Tenant}
	err = readChecked(ctx, stream, q, v.keys, m != nil, func(rc recordCheck) error {
		v.apply(rc)
		if m != nil {
			return m.advance(ctx, rc)
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
	if m != nil {
		if err := m.finish(ctx, q, rep); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// verifyBatch is how many messages the read hands to a checking
// goroutine at once.
const verifyBatch = 256

// readChecked reads the messages q selects, as readStream does, checks
// each on its own on every core (recordChecker), and calls fn with the
// checks in stream order. prints says whether the checks carry the
// prints of the verdicts, which only the verdict check reads.
func readChecked(ctx context.Context, stream jetstream.Stream, q Query, keys map[string][]byte, prints bool, fn func(recordCheck) error) error {
	type item struct {
		e  Entry
		rc recordCheck
	}
	q.Undecoded = true
	checkers := make([]*recordChecker, runtime.GOMAXPROCS(0))
	for i := range checkers {
		checkers[i] = newRecordChecker(keys, prints)
	}
	return inOrder(ctx, len(checkers), func(emit func([]item) error) error {
		batch := make([]item, 0, verifyBatch)
		err := readStream(ctx, stream, q, func(e Entry) error {
			batch = append(batch, item{e: e})
			if len(batch) < verifyBatch {
				return nil
			}
			full := batch
			batch = make([]item, 0, verifyBatch)
			return emit(full)
		})
		if err == nil && len(batch) > 0 {
			err = emit(batch)
		}
		return err
	}, func(w int, items []item) {
		for i := range items {
			items[i].rc = checkers[w].check(items[i].e)
			items[i].e = Entry{} // the message is no longer needed
		}
	}, func(items []item) error {
		for _, it := range items {
			if err := fn(it.rc); err != nil {
				return err
			}
		}
		return nil
	})
}

// auditVerifier checks records fed to it in stream order.
type auditVerifier struct {
	keys   map[string][]byte
	report Report
	chains map[string]*chainState
	// mayExpire is true when the stream's limits remove old records, and
	// expired when some have gone: a chain may then start past 1.
	mayExpire, expired bool
	// nextSeq is the stream sequence expected next; 0 when not checked
	// (one tenant's records are not contiguous).
	nextSeq uint64
	anchors map[string][]Head
	// anchored counts the anchors whose record was read.
	anchored int
	// single checks the messages given to add, one at a time.
	single *recordChecker
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
	// first is the n of the tenant's first valid record read.
	first uint64
}

func newAuditVerifier(opts VerifyOptions) *auditVerifier {
	v := &auditVerifier{chains: make(map[string]*chainState), report: Report{Problems: []Problem{}, Heads: []Head{}}}
	if len(opts.Keys) > 0 {
		v.keys = make(map[string][]byte, len(opts.Keys))
		for _, k := range opts.Keys {
			id := KeyID(k)
			v.keys[id] = k
			v.report.KeyIDs = append(v.report.KeyIDs, id)
		}
		v.report.MACsChecked = true
	}
	for _, a := range opts.Anchors {
		if v.anchors == nil {
			v.anchors = make(map[string][]Head)
		}
		v.anchors[a.Tenant] = append(v.anchors[a.Tenant], a)
	}
	return v
}

func (v *auditVerifier) problem(seq uint64, tenant string, kind ProblemKind, detail string) int {
	v.report.Problems = append(v.report.Problems, Problem{Seq: seq, Tenant: tenant, Kind: kind, Detail: detail})
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
func (v *auditVerifier) add(e Entry) {
	if v.single == nil {
		v.single = newRecordChecker(v.keys, false)
	}
	v.apply(v.single.check(e))
}

// apply takes the checks of the next message in stream order into the
// report and moves its tenant's chain.
func (v *auditVerifier) apply(rc recordCheck) {
	rep := &v.report
	rep.Messages++
	if rep.FirstSeq == 0 {
		rep.FirstSeq = rc.seq
	}
	rep.LastSeq = rc.seq
	if v.nextSeq != 0 {
		if rc.seq > v.nextSeq {
			v.problem(rc.seq, "", ProblemRemoved, fmt.Sprintf("stream sequences %d-%d are missing: deleted from the stream", v.nextSeq, rc.seq-1))
		}
		v.nextSeq = rc.seq + 1
	}
	tenant := rc.tenant
	c := v.chain(tenant)
	if rc.invalid != "" {
		v.problem(rc.seq, tenant, ProblemForged, rc.invalid)
		c.last, c.lastValid = rc.digest, false
		return
	}
	rep.Records++
	if rc.hashBad {
		v.problem(rc.seq, tenant, ProblemModified, "the body does not match its "+wire.AuditHashHeader+" header")
	}
	if rc.macProblem != "" {
		v.problem(rc.seq, tenant, cmp.Or(rc.macKind, ProblemForged), rc.macProblem)
	}
	v.link(rc.seq, tenant, c, rc.chain, rc.digest)
	c.last, c.lastValid = rc.digest, true
	v.checkAnchor(rc.seq, tenant, rc.chain.N, rc.digest)
}

// link checks r's place in its tenant's chain and moves the head.
func (v *auditVerifier) link(seq uint64, tenant string, c *chainState, link Chain, digest string) {
	n, prev := link.N, link.Prev
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
	advance := func() {
		if !c.started {
			c.first = n
		}
		c.started, c.n, c.hash, c.seq = true, n, digest, seq
	}
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
		v.anchored++
		v.anchors[tenant][i].N = 0 // found
	}
}

func (v *auditVerifier) finish() *Report {
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
		rep.Heads = append(rep.Heads, Head{Tenant: t, N: c.n, Hash: c.hash, Seq: c.seq})
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

// Checker checks the records of a range of the audit stream as a reader
// reads them, with Verify's checks of each record and of every tenant's
// chain, for a reader that needs the range whole (a replay). The range may
// start past the stream's first record: a tenant's chain may then start
// past n=1, which is noted, not reported. Records missing inside the
// range, altered or forged are reported.
type Checker struct {
	v *auditVerifier
	// seqs is true when the range holds every tenant's records, so that
	// stream sequences must be contiguous.
	seqs bool
}

// NewChecker returns a Checker with opts' keys, for the records of
// opts.Tenant or, when it is empty, of every tenant.
func NewChecker(opts VerifyOptions) *Checker {
	v := newAuditVerifier(opts)
	v.mayExpire, v.expired = true, true
	return &Checker{v: v, seqs: opts.Tenant == ""}
}

// Add checks the next entry of the range, in stream order.
func (c *Checker) Add(e Entry) {
	if c.seqs && c.v.nextSeq == 0 {
		c.v.nextSeq = e.Seq
	}
	c.v.add(e)
}

// Report is what the checker found in the entries added so far.
func (c *Checker) Report() *Report { return c.v.finish() }

// CheckEntry checks what can be checked of one message of the audit
// stream on its own, without the records around it: that it is a gated
// record, that its body matches its hash, and, when key is not empty,
// that it carries a MAC under key that verifies. It returns the first
// problem found, or nil. Verify checks all this and the chains besides;
// CheckEntry is for a reader that sees messages one at a time, such as
// gated's notifier.
func CheckEntry(e Entry, key []byte) *Problem {
	tenant := e.Tenant()
	problem := func(kind ProblemKind, detail string) *Problem {
		return &Problem{Seq: e.Seq, Tenant: tenant, Kind: kind, Detail: detail}
	}
	if e.Record == nil {
		detail := "not a gated record"
		if e.Err != nil {
			detail = e.Err.Error()
		}
		return problem(ProblemForged, detail)
	}
	r := e.Record
	sum := sha256.Sum256(e.Data)
	if r.V == 1 && r.Hash != hex.EncodeToString(sum[:]) {
		return problem(ProblemModified, "the body does not match its "+wire.AuditHashHeader+" header")
	}
	if len(key) == 0 {
		return nil
	}
	switch {
	case r.MAC == "":
		return problem(ProblemForged, "no MAC, yet records are MACed")
	case r.KeyID != KeyID(key):
		return problem(ProblemForged, fmt.Sprintf("MACed with key %s, not gated's key %s", r.KeyID, KeyID(key)))
	case !r.macValid(key):
		return problem(macProblem(r), fmt.Sprintf("the MAC does not match under key %s", r.KeyID)+macMeaning(r))
	}
	return nil
}
