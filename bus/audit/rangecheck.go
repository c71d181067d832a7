package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/engine/wire"
)

// RangeEnd is what a reader of a range knows of where the stream ends,
// for Checker.Finish: the chain alone cannot show records deleted from
// the end of the stream.
type RangeEnd struct {
	// From is the first stream sequence the range asked for; 0 when it
	// starts at a time, or at the stream's first record.
	From uint64
	// StreamLast is the stream's last sequence, taken before the read
	// began (the stream keeps counting it once the messages there are
	// deleted); 0 leaves the end of the stream unchecked.
	StreamLast uint64
}

// AnchorCheck says what became of the anchors a Checker was given.
type AnchorCheck struct {
	// Given is how many anchors there were.
	Given int `json:"given"`
	// Matched is how many anchored records the range holds: their hash
	// was compared (a different one is a problem of kind modified).
	Matched int `json:"matched"`
	// Before is how many anchor records older than the range: it cannot
	// check them, and they are not a problem.
	Before int `json:"before"`
	// Missing is how many anchored records should be in the range and
	// are not: each is a problem of kind removed (the chain was cut
	// short or rewritten).
	Missing int `json:"missing"`
}

// Finish ends the check of the range and reports what it found, as
// Report does, and besides: with every tenant's records in the range
// and end.StreamLast set, the stream sequences missing after the last
// message read (deleted from the end of the stream); and each anchor
// whose record should be in the range but is not. An anchor whose
// record is older than the range (its sequence before the range's
// first, or its n before its tenant's first record in the range) is
// counted in AnchorCheck.Before, not reported. Call it once.
func (c *Checker) Finish(end RangeEnd) (*Report, AnchorCheck) {
	v := c.v
	rep := &v.report
	first := end.From
	if rep.Messages > 0 {
		first = rep.FirstSeq
	}
	if c.seqs && end.StreamLast > 0 {
		next := end.From
		if rep.Messages > 0 {
			next = rep.LastSeq + 1
		}
		if next > 0 && end.StreamLast >= next {
			v.problem(next, "", ProblemRemoved, fmt.Sprintf("stream sequences %d-%d are missing at the end of the stream: deleted from it", next, end.StreamLast))
		}
	}
	var ac AnchorCheck
	for tenant, anchors := range v.anchors {
		ch := v.chains[tenant]
		for i, a := range anchors {
			ac.Given++
			if a.N == 0 { // found
				continue
			}
			switch {
			case a.Seq != 0 && first != 0 && a.Seq < first,
				ch != nil && ch.started && a.N < ch.first,
				a.Seq == 0 && first == 0 && (ch == nil || !ch.started):
				ac.Before++
				anchors[i].N = 0
			default:
				ac.Missing++
			}
		}
	}
	ac.Matched = v.anchored
	return v.finish(), ac
}

// VerdictAnchor is the stored verdict CheckLatestVerdict checked the end
// of the stream against.
type VerdictAnchor struct {
	Tenant   string `json:"tenant"`
	ID       string `json:"id"`
	AuditSeq uint64 `json:"audit_seq"`
}

// CheckLatestVerdict checks the end of the audit stream against the
// verdict store, the anchor a deployment keeps where a reader of the
// stream can read it: the verdict stored last (of tenant, when set) names
// its verdict.decided record by audit_seq, and records cut from the end of
// the stream take that record with them. It returns the verdict checked,
// nil when there is none to check (no bucket, no verdict, a deleted one
// last, or a record the stream's limits may have expired), and the
// problem found, nil when the record is there and holds the verdict. The
// record is read where it is now, so a verdict stored after a read began
// is no problem. Errors are NATS's.
func CheckLatestVerdict(ctx context.Context, js jetstream.JetStream, tenant string) (*VerdictAnchor, *Problem, error) {
	kv, err := js.Stream(ctx, "KV_"+wire.VerdictBucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("opening bucket %s: %w", wire.VerdictBucket, err)
	}
	if tenant == "" {
		tenant = "*"
	}
	prefix := "$KV." + wire.VerdictBucket + "."
	m, err := kv.GetLastMsgForSubject(ctx, prefix+wire.VerdictKey(tenant, "*"))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the latest stored verdict: %w", err)
	}
	if m.Header.Get("KV-Operation") != "" {
		return nil, nil, nil // deleted or purged: names no record
	}
	key := strings.TrimPrefix(m.Subject, prefix)
	v, err := decodeBucketVerdict(key, m.Data)
	if err != nil {
		t, id, _ := strings.Cut(key, ".")
		return &VerdictAnchor{Tenant: t, ID: id}, &Problem{Tenant: t, ProposalID: id, Kind: ProblemModified,
			Detail: fmt.Sprintf("the latest stored verdict %s: %v", key, err)}, nil
	}
	anchor := &VerdictAnchor{Tenant: v.Tenant, ID: v.ProposalID, AuditSeq: v.AuditSeq}
	stream, err := js.Stream(ctx, Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil, ErrNoStream
	}
	if err != nil {
		return nil, nil, fmt.Errorf("opening stream %s: %w", Stream, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("reading stream %s: %w", Stream, err)
	}
	cfg := info.Config
	c := &verdictChecker{
		stream: stream, maxAge: cfg.MaxAge, now: time.Now(), first: info.State.FirstSeq, last: info.State.LastSeq,
		mayExpire: cfg.MaxAge > 0 || cfg.MaxMsgs > 0 || cfg.MaxBytes > 0 || cfg.MaxMsgsPerSubject > 0,
	}
	sv := storedVerdict{tenant: v.Tenant, id: v.ProposalID, seq: v.AuditSeq, decidedAt: v.DecidedAt, v: v}
	if sv.seq < c.first && c.expired(sv) {
		return nil, nil, nil
	}
	if sv.seq <= c.last {
		rm, err := stream.GetMsg(ctx, sv.seq)
		switch {
		case err == nil:
			if r, err := DecodeRecord(rm.Subject, rm.Header, rm.Data); err == nil {
				if rv, err := decodeVerdictRecord(r); err == nil && r.Tenant == sv.tenant && r.ProposalID == sv.id && printVerdict(rv) == sv.print() {
					return anchor, nil, nil
				}
			}
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return nil, nil, fmt.Errorf("reading audit seq %d: %w", sv.seq, err)
		}
	}
	kind, detail, err := c.explain(ctx, sv)
	if err != nil {
		return nil, nil, err
	}
	return anchor, &Problem{Seq: sv.seq, Tenant: sv.tenant, ProposalID: sv.id, Kind: kind,
		Detail: "the latest " + detail + " (records cut from the end of the stream, or the stream replaced)"}, nil
}
