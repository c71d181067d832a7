package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
)

// defaultMaxVerdictProblems is how many problems of stored verdicts Verify
// lists when VerifyOptions.MaxVerdictProblems is 0; the rest are counted.
const defaultMaxVerdictProblems = 100

// expirySlack is how much later than its max age a record may still be
// in the stream, or how far the clocks of gated's hosts and of the host
// that verifies may disagree, before a missing record is judged removed
// rather than expired.
const expirySlack = 5 * time.Minute

// VerdictCheck is what Verify found comparing the verdict store
// (GATED_VERDICTS) with the audit stream: every stored verdict's
// audit_seq must hold that verdict's verdict.decided record.
type VerdictCheck struct {
	// Verdicts is how many stored verdicts were read.
	Verdicts uint64 `json:"verdicts"`
	// Matched is how many of them name their own verdict.decided record.
	Matched uint64 `json:"matched"`
	// Expired is how many name a record that the stream's limits expired:
	// not checked, and not a problem.
	Expired uint64 `json:"expired"`
	// Problems is how many are wrong. The first ones are in
	// Report.Problems (kind removed, modified or reordered, with the
	// proposal id); Unlisted is how many more there are.
	Problems uint64 `json:"problems"`
	Unlisted uint64 `json:"unlisted"`
}

// verdictPrint is a digest of a verdict without its audit_seq: the stored
// verdict and the verdict its verdict.decided record holds have the same.
type verdictPrint [16]byte

// printVerdict is v's verdictPrint: the SHA-256 of its JSON with
// audit_seq 0, which the engine recorded before the stream gave the
// sequence, and its grant's token reduced to the grant's id (a
// version-2 record keeps the id, not the token, which is signed on its
// own). It encodes every other member, so a stored verdict that differs
// from its record in anything, a review's text included, differs here.
func printVerdict(v *gated.Verdict) verdictPrint {
	c := comparable(v)
	doc, err := json.Marshal(&c)
	if err != nil {
		// A decoded verdict always encodes; were it not to, it matches no
		// record.
		return verdictPrint{}
	}
	sum := sha256.Sum256(doc)
	var p verdictPrint
	copy(p[:], sum[:])
	return p
}

// gidMark starts a verdict's Grant that holds a grant's id rather than its
// token.
const gidMark = "gid:"

// comparable is a copy of v as a stored verdict and its record compare:
// audit_seq 0, and the grant as its id.
func comparable(v *gated.Verdict) gated.Verdict {
	c := *v
	c.AuditSeq = 0
	if c.Grant != "" && !strings.HasPrefix(c.Grant, gidMark) {
		c.Grant = gidMark + grantGID(c.Grant)
	}
	return c
}

// grantGID reads the gid claim of a grant token without verifying it
// (the token is signed; the check here is that the verdict and its record
// name the same grant). A token that does not read gives itself, which
// matches no id.
func grantGID(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return token
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return token
	}
	var c struct {
		GID string `json:"gid"`
	}
	if json.Unmarshal(payload, &c) != nil || c.GID == "" {
		return token
	}
	return c.GID
}

// decodeBucketVerdict decodes the value stored under key, a verdict key
// <tenant>.<id>, and checks that the verdict is the key's and names an
// audit record.
func decodeBucketVerdict(key string, value []byte) (*gated.Verdict, error) {
	var v gated.Verdict
	if err := json.Unmarshal(value, &v); err != nil {
		return nil, fmt.Errorf("the stored value is not a verdict: %w", err)
	}
	switch {
	case wire.VerdictKey(v.Tenant, v.ProposalID) != key:
		return &v, fmt.Errorf("the verdict stored under it is %s.%s's", v.Tenant, v.ProposalID)
	case v.AuditSeq == 0:
		return &v, errors.New("the stored verdict names no audit_seq")
	}
	return &v, nil
}

// decodeVerdictRecord returns the verdict a record's verdict.decided
// event holds. The event's data is the verdict (with audit_seq 0) beside
// the members every event of a proposal carries, which a verdict does not
// have. When the verdict's grant token is not in the record (a version-2
// record keeps the grant.issued event's id instead), its Grant holds
// gidMark and that id.
func decodeVerdictRecord(r *Record) (*gated.Verdict, error) {
	ev, ok := r.Find(gated.EventVerdict)
	if !ok {
		return nil, fmt.Errorf("the record is a %s, not a %s", r.Last().Event, gated.EventVerdict)
	}
	var v gated.Verdict
	if err := json.Unmarshal(ev.Data, &v); err != nil {
		return nil, fmt.Errorf("the record's data is not a verdict: %w", err)
	}
	if v.Tenant != r.Tenant || v.ProposalID != r.ProposalID {
		return nil, fmt.Errorf("the record of %s.%s holds the verdict of %s.%s", r.Tenant, r.ProposalID, v.Tenant, v.ProposalID)
	}
	if v.Grant == "" {
		if gid, ok := foldedGID(r); ok {
			v.Grant = gidMark + gid
		}
	}
	return &v, nil
}

// foldedGID is the id of the grant whose grant.issued a record of version
// 2 or 3 holds beside its verdict (a version-2 record folded it into the
// verdict), when it does.
func foldedGID(r *Record) (string, bool) {
	if r.V == 1 {
		return "", false
	}
	g, ok := r.Find(gated.EventGrantIssued)
	if !ok {
		return "", false
	}
	return grantEventGID(g)
}

// grantEventGID is the gid of a grant.issued event.
func grantEventGID(g gated.AuditEvent) (string, bool) {
	d, err := gated.DecodeAuditData[gated.GrantIssuedData](g)
	if err != nil || d.GID == "" {
		return "", false
	}
	return d.GID, true
}

// The verdict check holds a bounded window of each side, so that its
// memory does not grow with the stream: the quick prints of the last
// recentVerdicts verdict.decided records read, and at most
// waitingVerdicts stored verdicts whose records the read has not reached.
// The bucket and the stream are read side by side, and a stored verdict
// is written just after its record, so the two come in nearly the same
// order; a stored verdict whose record has left the window is read from
// the stream by its sequence.
var (
	recentVerdicts  = 1 << 16
	waitingVerdicts = 1 << 11
)

// verdictRecord is what the verdict check keeps of a verdict.decided
// record read: its sequence and quick print (printable is false when it
// has none; the check then reads the record again to compare it).
type verdictRecord struct {
	seq       uint64
	print     quickPrint
	printable bool
	// byGID says print is a gid print (recordCheck.byGID).
	byGID bool
	// full is the verdict's own print, when fullOK (recordCheck.full).
	full   verdictPrint
	fullOK bool
}

// verdictRing holds the last verdict records read, by ascending sequence.
type verdictRing struct {
	buf   []verdictRecord
	start int // index of the oldest
	n     int
	// evicted is the highest sequence that left the ring: records at or
	// before it may have been read and forgotten.
	evicted uint64
}

func (r *verdictRing) push(e verdictRecord) {
	if r.buf == nil {
		r.buf = make([]verdictRecord, recentVerdicts)
	}
	if r.n == len(r.buf) {
		r.evicted = r.buf[r.start].seq
		r.buf[r.start] = e
		r.start = (r.start + 1) % len(r.buf)
		return
	}
	r.buf[(r.start+r.n)%len(r.buf)] = e
	r.n++
}

func (r *verdictRing) at(i int) verdictRecord { return r.buf[(r.start+i)%len(r.buf)] }

// find returns the verdict record at seq, when the ring holds it.
func (r *verdictRing) find(seq uint64) (verdictRecord, bool) {
	i := sort.Search(r.n, func(i int) bool { return r.at(i).seq >= seq })
	if i < r.n && r.at(i).seq == seq {
		return r.at(i), true
	}
	return verdictRecord{}, false
}

// verdictChecker cross-checks stored verdicts against the stream.
type verdictChecker struct {
	stream    jetstream.Stream
	check     *VerdictCheck
	max       int
	maxAge    time.Duration
	mayExpire bool
	now       time.Time
	// first and last bound the stream's sequences, read before the
	// stream and again after it.
	first, last uint64
	// problems are the problems listed, in the order found; byPrint has
	// those whose record may be elsewhere in the stream, by the print of
	// their verdict, as indexes in problems.
	problems []Problem
	listed   int
	byPrint  map[verdictPrint][]int
	// later counts the stored verdicts whose audit_seq was past the read.
	later int
}

// storedVerdict is what the checker keeps of a stored verdict.
type storedVerdict struct {
	tenant, id string
	seq        uint64
	decidedAt  time.Time
	// quick is the verdict's quick print, ok when it has one; gid its gid
	// print, when it holds a grant and gidOK.
	quick   quickPrint
	quickOK bool
	gid     quickPrint
	gidOK   bool
	// v is the verdict, for its print and to say how it differs from its
	// record.
	v *gated.Verdict
}

// print is sv's verdictPrint.
func (sv *storedVerdict) print() verdictPrint {
	if sv.v == nil {
		return verdictPrint{}
	}
	return printVerdict(sv.v)
}

// refresh reads the stream's bounds again: a verdict's record is stored
// before the verdict, so every record of a verdict read is at or before
// the stream's end now.
func (c *verdictChecker) refresh(ctx context.Context) error {
	info, err := c.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", Stream, err)
	}
	c.first, c.last = info.State.FirstSeq, info.State.LastSeq
	return nil
}

// mismatch reports a stored verdict whose audit_seq does not hold its
// record, once it is sure the record is not simply expired.
func (c *verdictChecker) mismatch(ctx context.Context, sv storedVerdict) error {
	if sv.seq < c.first && c.expired(sv) {
		c.check.Expired++
		return nil
	}
	if c.listed >= c.max {
		c.check.Problems++
		c.check.Unlisted++
		return nil
	}
	kind, detail, err := c.explain(ctx, sv)
	if err != nil {
		return err
	}
	c.problem(sv, kind, detail, true)
	return nil
}

// expired reports whether sv's record may have expired under the stream's
// limits: the stream has them, and, when its limit is an age, sv is old
// enough.
func (c *verdictChecker) expired(sv storedVerdict) bool {
	if !c.mayExpire {
		return false
	}
	if c.maxAge > 0 && !sv.decidedAt.IsZero() {
		return sv.decidedAt.Add(c.maxAge).Before(c.now.Add(expirySlack))
	}
	return true
}

// explain reads the stream at sv's audit_seq and says what is there
// instead of sv's record.
func (c *verdictChecker) explain(ctx context.Context, sv storedVerdict) (ProblemKind, string, error) {
	head := fmt.Sprintf("stored verdict %s.%s names audit_seq %d", sv.tenant, sv.id, sv.seq)
	if sv.seq > c.last {
		return ProblemRemoved, fmt.Sprintf("%s, past the stream's last sequence %d: the stream was cut short or replaced", head, c.last), nil
	}
	m, err := c.stream.GetMsg(ctx, sv.seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		if sv.seq < c.first {
			return ProblemRemoved, fmt.Sprintf("%s, before the stream's first sequence %d, yet the stream's limits cannot have expired it: removed", head, c.first), nil
		}
		return ProblemRemoved, head + ", which is not in the stream: removed", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("reading audit seq %d: %w", sv.seq, err)
	}
	r, err := DecodeRecord(m.Subject, m.Header, m.Data)
	if err != nil {
		return ProblemModified, fmt.Sprintf("%s, which holds no valid record (%v)", head, err), nil
	}
	if _, ok := r.Find(gated.EventVerdict); !ok || r.Tenant != sv.tenant || r.ProposalID != sv.id {
		return ProblemModified, fmt.Sprintf("%s, which holds the %s record of %s.%s", head, r.Last().Event, r.Tenant, orNone(r.ProposalID)), nil
	}
	rv, err := decodeVerdictRecord(r)
	if err != nil {
		return ProblemModified, fmt.Sprintf("%s, whose record is not readable: %v", head, err), nil
	}
	differ := "its members"
	if sv.v != nil {
		if d := diffMembers(rv, sv.v); len(d) > 0 {
			differ = strings.Join(d, ", ")
		}
	}
	return ProblemModified, fmt.Sprintf("%s, whose record differs from it in %s: the verdict or the record was altered", head, differ), nil
}

// problem lists a problem of a stored verdict; find is set when its
// record may be elsewhere in the stream.
func (c *verdictChecker) problem(sv storedVerdict, kind ProblemKind, detail string, find bool) {
	c.check.Problems++
	if c.listed >= c.max {
		c.check.Unlisted++
		return
	}
	c.listed++
	c.problems = append(c.problems, Problem{Seq: sv.seq, Tenant: sv.tenant, ProposalID: sv.id, Kind: kind, Detail: detail})
	if find {
		p := sv.print()
		c.byPrint[p] = append(c.byPrint[p], len(c.problems)-1)
	}
}

// findElsewhere looks for the records of the problems listed elsewhere in
// the stream, up to through: a stored verdict whose audit_seq does not hold
// its record, but whose record is in the stream, names the wrong sequence.
// It reads the stream again, which it does only when there are such
// problems, so that the check keeps no index of the records.
func (c *verdictChecker) findElsewhere(ctx context.Context, q Query, through uint64) error {
	if len(c.byPrint) == 0 || through == 0 {
		return nil
	}
	return readStream(ctx, c.stream, q, func(e Entry) error {
		if e.Seq > through {
			return errStopReading
		}
		r := e.Record
		if r == nil || r.ProposalID == "" || r.Tenant == gated.UnknownTenant {
			return nil
		}
		if _, ok := r.Find(gated.EventVerdict); !ok {
			return nil
		}
		var p verdictPrint // a record that holds no verdict matches none
		if v, err := decodeVerdictRecord(r); err == nil {
			p = printVerdict(v)
		}
		for _, i := range c.byPrint[p] {
			pr := &c.problems[i]
			if pr.Seq == e.Seq {
				continue
			}
			pr.Kind = ProblemReordered
			pr.Detail += fmt.Sprintf("; its verdict.decided record is at seq %d: the record was moved or published again, or the stored audit_seq was changed", e.Seq)
		}
		return nil
	})
}

// matchAt reports whether the stream holds sv's record at sv's audit_seq.
func (c *verdictChecker) matchAt(ctx context.Context, sv storedVerdict) (bool, error) {
	m, err := c.stream.GetMsg(ctx, sv.seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading audit seq %d: %w", sv.seq, err)
	}
	r, err := DecodeRecord(m.Subject, m.Header, m.Data)
	if err != nil {
		return false, nil
	}
	v, err := decodeVerdictRecord(r)
	return err == nil && printVerdict(v) == sv.print(), nil
}

// diffMembers names the top-level members in which a and b differ,
// audit_seq aside, in sorted order.
func diffMembers(a, b *gated.Verdict) []string {
	ca, cb := comparable(a), comparable(b)
	ma, mb := members(&ca), members(&cb)
	var out []string
	for k, va := range ma {
		if k == "audit_seq" {
			continue
		}
		if vb, ok := mb[k]; !ok || !bytes.Equal(va, vb) {
			out = append(out, k)
		}
	}
	for k := range mb {
		if _, ok := ma[k]; !ok && k != "audit_seq" {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func members(v *gated.Verdict) map[string]json.RawMessage {
	doc, _ := json.Marshal(v)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(doc, &m)
	return m
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
