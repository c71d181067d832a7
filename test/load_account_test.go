package test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine/wire"
)

// auditRec is one record of GATED_AUDIT, decoded leniently: only the
// members the accounting needs, whatever else the record carries.
type auditRec struct {
	seq        uint64
	Event      string          `json:"event"`
	Tenant     string          `json:"tenant"`
	ProposalID string          `json:"proposal_id"`
	At         time.Time       `json:"at"`
	Instance   string          `json:"instance"`
	Data       json.RawMessage `json:"data"`
}

// auditData is the part of an event's data the accounting reads.
type auditData struct {
	Delivery  int       `json:"delivery"`
	Decision  string    `json:"decision"`
	Outcome   string    `json:"outcome"`
	Stage     string    `json:"stage"`
	DecidedAt time.Time `json:"decided_at"`
	Approved  bool      `json:"approved"`
	// AuditSeq and SupersededSeq are a verdict.replayed's: the stored
	// verdict it answered with, and the delivery's own verdict record that
	// lost to it.
	AuditSeq      uint64 `json:"audit_seq"`
	SupersededSeq uint64 `json:"superseded_seq"`
}

func (r auditRec) data() auditData {
	var d auditData
	_ = json.Unmarshal(r.Data, &d)
	return d
}

// readAuditStream reads every event of the load's tenant from GATED_AUDIT
// with an ordered consumer, keyed by proposal id, and counts the records
// it could not decode.
func (l *fleetLoad) readAuditStream(t *testing.T) (map[string][]auditRec, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stream jetstream.Stream
	var err error
	for {
		stream, err = l.js.Stream(ctx, audit.Stream)
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("opening GATED_AUDIT: %v", err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.AuditSubjectPrefix + loadTenant + ".>"},
	})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	out := map[string][]auditRec{}
	bad := 0
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			t.Fatalf("reading GATED_AUDIT: %v", err)
		}
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		rec, err := audit.DecodeRecord(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			bad++
		} else if strings.HasPrefix(rec.ProposalID, l.prefix) {
			for _, ev := range rec.Events() {
				r := auditRec{seq: md.Sequence.Stream, Event: ev.Event, Tenant: ev.Tenant, ProposalID: ev.ProposalID, At: ev.At, Instance: ev.Instance, Data: ev.Data}
				out[r.ProposalID] = append(out[r.ProposalID], r)
			}
		}
		if md.NumPending == 0 {
			return out, bad
		}
	}
}

// tally is the accounting of one test.
type tally struct {
	Sent, Unsent, Decided, Lost int
	// Duplicated proposals were decided twice: two different verdicts on
	// the wire, a wire verdict unlike the stored one, or more than one
	// verdict.decided event besides the orphans below.
	Duplicated, DupWire, DupAudit int
	// Orphaned counts verdict.decided records no verdict points to, left
	// by a delivery that died after sealing its trail and before storing
	// its verdict; a later delivery decided and stored the proposal. The
	// audit documentation allows them (docs/AUDIT.md).
	Orphaned int
	// NoReview counts approvals that needed a review without an approving
	// review.finished event on the delivery that decided them.
	NoReview int
	// WrongApprovals are approvals of proposals that must never be
	// approved (policy denials, uncovered drops, invalid proposals).
	WrongApprovals int
	// Unexpected counts verdicts other than the kind's expected one.
	Unexpected map[string]int
	Outcomes   map[string]int
	Replays    int
	// Redelivered counts proposals JetStream delivered more than once,
	// as their audit events' delivery counts tell.
	Redelivered  int
	PublishTries int
	PubErrors    int
	BadAudit     int
	Recovery     []string

	lostIDs, dupIDs, noReviewIDs, wrongIDs, unexpectedIDs []string
}

// account settles the load and counts everything; it logs one summary
// line and returns the tally for the test's own assertions. The caller
// asserts; assertClean asserts what every suite requires.
func (l *fleetLoad) account(t *testing.T, deadline time.Duration) (*tally, map[string]*gated.Verdict) {
	t.Helper()
	stored := l.settle(t, deadline)
	audit, bad := l.readAuditStream(t)

	l.mu.Lock()
	defer l.mu.Unlock()
	tl := &tally{Unexpected: map[string]int{}, Outcomes: map[string]int{}, PubErrors: l.pubErrors, BadAudit: bad}
	for _, p := range l.order {
		tl.PublishTries += p.tries
		v, decided := stored[p.id]
		if p.acked.IsZero() {
			tl.Unsent++
		} else {
			tl.Sent++
			if decided {
				tl.Decided++
			} else {
				tl.Lost++
				tl.lostIDs = append(tl.lostIDs, p.id)
			}
		}
		recs := audit[p.id]
		maxDelivery := 0
		for _, r := range recs {
			maxDelivery = max(maxDelivery, r.data().Delivery)
			if r.Event == gated.EventReplayed {
				tl.Replays++
			}
		}
		verdictEvents, orphans := countVerdictRecords(recs, v)
		tl.Orphaned += orphans
		if maxDelivery > 1 {
			tl.Redelivered++
		}
		dupWire := false
		seen := map[string]bool{}
		for _, w := range l.wire[p.id] {
			key := fmt.Sprintf("%s/%s/%d", w.v.Outcome, w.v.DecidedAt.Format(time.RFC3339Nano), w.v.AuditSeq)
			seen[key] = true
			if decided && (w.v.Outcome != v.Outcome || !w.v.DecidedAt.Equal(v.DecidedAt)) {
				dupWire = true
			}
		}
		dupWire = dupWire || len(seen) > 1
		if dupWire {
			tl.DupWire++
		}
		if verdictEvents > 1 {
			tl.DupAudit++
		}
		if dupWire || verdictEvents > 1 {
			tl.Duplicated++
			tl.dupIDs = append(tl.dupIDs, p.id)
		}
		if !decided {
			continue
		}
		tl.Outcomes[string(v.Outcome)]++
		wantOutcome, wantStage := p.kind.expected()
		if v.Outcome != wantOutcome || v.Stage != wantStage {
			tl.Unexpected[fmt.Sprintf("%s→%s@%s", p.kind, v.Outcome, v.Stage)]++
			tl.unexpectedIDs = append(tl.unexpectedIDs, p.id)
		}
		if !v.Approved {
			continue
		}
		switch p.kind {
		case kindRead:
			// Approved by the policy, no review needed.
		case kindApprove:
			if v.Stage != gated.StageReview || !approvedByReview(recs, v) {
				tl.NoReview++
				tl.noReviewIDs = append(tl.noReviewIDs, p.id)
			}
		default:
			tl.WrongApprovals++
			tl.wrongIDs = append(tl.wrongIDs, p.id)
		}
	}
	tl.Recovery = l.recovery(stored)
	t.Logf("%s: sent=%d decided=%d lost=%d duplicated=%d (wire %d, audit %d) orphaned_verdict_records=%d approvals_without_review=%d wrong_approvals=%d unsent=%d outcomes=%s unexpected=%s replays=%d redelivered=%d publish_tries=%d publish_errors=%d undecodable_audit=%d recovery=[%s]",
		t.Name(), tl.Sent, tl.Decided, tl.Lost, tl.Duplicated, tl.DupWire, tl.DupAudit, tl.Orphaned, tl.NoReview, tl.WrongApprovals,
		tl.Unsent, countsString(tl.Outcomes), countsString(tl.Unexpected), tl.Replays, tl.Redelivered, tl.PublishTries, tl.PubErrors, tl.BadAudit,
		strings.Join(tl.Recovery, "; "))
	if tl.Duplicated > 0 {
		for _, id := range tl.dupIDs[:min(5, len(tl.dupIDs))] {
			t.Logf("decided twice: %s\n%s", id, l.describe(id, audit[id], stored[id]))
		}
	}
	for _, id := range tl.unexpectedIDs[:min(3, len(tl.unexpectedIDs))] {
		t.Logf("unexpected verdict: %s: %s\n%s", id, stored[id].Reason, l.describe(id, audit[id], stored[id]))
	}
	for _, id := range tl.noReviewIDs[:min(5, len(tl.noReviewIDs))] {
		t.Logf("approved without review: %s\n%s", id, l.describe(id, audit[id], stored[id]))
	}
	if tl.Lost > 0 {
		t.Logf("lost: %v (last publish error: %s)", tl.lostIDs[:min(20, len(tl.lostIDs))], l.lastPubErr)
	}
	return tl, stored
}

// countVerdictRecords counts a proposal's verdict.decided records,
// leaving out the orphans: records no stored verdict points to, sealed by
// a delivery earlier than the one whose record the stored verdict names.
// Such a delivery died between its seal and its store, and the proposal
// was decided again on redelivery, as docs/AUDIT.md describes; and
// records a verdict.replayed of the stored verdict names as superseded: a
// delivery's own verdict that lost to the stored one. With no stored
// verdict every record counts.
func countVerdictRecords(recs []auditRec, stored *gated.Verdict) (counted, orphans int) {
	storedDelivery := 0
	superseded := map[uint64]bool{}
	if stored != nil {
		for _, r := range recs {
			switch d := r.data(); {
			case r.Event == gated.EventVerdict && r.seq == stored.AuditSeq:
				storedDelivery = d.Delivery
			case r.Event == gated.EventReplayed && d.AuditSeq == stored.AuditSeq && d.SupersededSeq != 0:
				superseded[d.SupersededSeq] = true
			}
		}
	}
	for _, r := range recs {
		if r.Event != gated.EventVerdict {
			continue
		}
		if superseded[r.seq] && r.seq != stored.AuditSeq {
			orphans++
			continue
		}
		if storedDelivery > 0 && r.seq != stored.AuditSeq && r.data().Delivery < storedDelivery {
			orphans++
			continue
		}
		counted++
	}
	return counted, orphans
}

// approvedByReview reports whether the audit trail holds an approving
// review.finished event recorded on the delivery whose verdict.decided
// event the stored verdict names, before it: in an earlier record, or
// earlier in the verdict's own record (recs are in stream order, a
// record's events in theirs).
func approvedByReview(recs []auditRec, v *gated.Verdict) bool {
	delivery := 0
	at := -1
	for i, r := range recs {
		if r.seq == v.AuditSeq && r.Event == gated.EventVerdict {
			delivery, at = r.data().Delivery, i
		}
	}
	if at < 0 {
		return false
	}
	for _, r := range recs[:at] {
		if r.Event != gated.EventReviewDone {
			continue
		}
		d := r.data()
		if d.Decision == string(gated.DecisionApprove) && (delivery == 0 || d.Delivery == 0 || d.Delivery == delivery) {
			return true
		}
	}
	return false
}

// describe renders what the test saw of one proposal, for a failure
// report.
func (l *fleetLoad) describe(id string, recs []auditRec, stored *gated.Verdict) string {
	var b strings.Builder
	if p := l.props[id]; p != nil {
		fmt.Fprintf(&b, "  kind %s, first publish %s, acked %s, %d tries\n", p.kind, clockOf(p.first), clockOf(p.acked), p.tries)
	}
	if stored != nil {
		fmt.Fprintf(&b, "  stored: %s at %s, decided %s, audit_seq %d\n", stored.Outcome, stored.Stage, clockOf(stored.DecidedAt), stored.AuditSeq)
	}
	for _, w := range l.wire[id] {
		fmt.Fprintf(&b, "  wire %s: %s at %s, decided %s, audit_seq %d\n", clockOf(w.at), w.v.Outcome, w.v.Stage, clockOf(w.v.DecidedAt), w.v.AuditSeq)
	}
	for _, r := range recs {
		fmt.Fprintf(&b, "  audit %d %s %s instance=%s %s\n", r.seq, clockOf(r.At), r.Event, r.Instance, r.Data)
	}
	return b.String()
}

// recovery measures each fault: from the fault to the first verdict
// decided after it, to the first approval a review granted after it
// (reviews work again), and to the moment every proposal acknowledged
// before it was decided (the backlog it found drained).
func (l *fleetLoad) recovery(stored map[string]*gated.Verdict) []string {
	var out []string
	for _, f := range l.faults {
		var first, firstApproval, drained time.Time
		for _, p := range l.order {
			v := stored[p.id]
			if v == nil {
				continue
			}
			if v.DecidedAt.After(f.at) && (first.IsZero() || v.DecidedAt.Before(first)) {
				first = v.DecidedAt
			}
			if v.Approved && v.Stage == gated.StageReview && v.DecidedAt.After(f.at) &&
				(firstApproval.IsZero() || v.DecidedAt.Before(firstApproval)) {
				firstApproval = v.DecidedAt
			}
			if !p.acked.IsZero() && p.acked.Before(f.at) && v.DecidedAt.After(drained) {
				drained = v.DecidedAt
			}
		}
		s := fmt.Sprintf("%s at +%.1fs: first verdict after it +%s", f.what, f.at.Sub(l.started).Seconds(), sinceFault(f.at, first))
		s += ", first reviewed approval +" + sinceFault(f.at, firstApproval)
		s += ", backlog drained +" + sinceFault(f.at, drained)
		out = append(out, s)
	}
	return out
}

func sinceFault(from, to time.Time) string {
	if to.IsZero() {
		return "never"
	}
	if to.Before(from) {
		return "0s"
	}
	return to.Sub(from).Round(10 * time.Millisecond).String()
}

func clockOf(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("15:04:05.000")
}

func countsString(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// assertClean asserts what every scale and fault suite requires: every
// proposal sent and decided, none decided twice, no approval without its
// review, no approval of what must be refused.
func assertClean(t *testing.T, tl *tally) {
	t.Helper()
	if tl.Unsent > 0 {
		t.Errorf("%d proposals were never acknowledged by JetStream", tl.Unsent)
	}
	if tl.Lost > 0 {
		t.Errorf("%d proposals sent but never decided: %v", tl.Lost, tl.lostIDs[:min(20, len(tl.lostIDs))])
	}
	if tl.Duplicated > 0 {
		t.Errorf("%d proposals decided twice (%d on the wire, %d in the audit stream): %v", tl.Duplicated, tl.DupWire, tl.DupAudit, tl.dupIDs[:min(20, len(tl.dupIDs))])
	}
	if tl.NoReview > 0 {
		t.Errorf("%d approvals without a completed review: %v", tl.NoReview, tl.noReviewIDs)
	}
	if tl.WrongApprovals > 0 {
		t.Errorf("%d proposals approved that must be refused: %v", tl.WrongApprovals, tl.wrongIDs)
	}
	if tl.Sent == 0 {
		t.Error("nothing was sent")
	}
}

// TestCountVerdictRecords pins the accounting's rule for verdict.decided
// records: only a record sealed by an earlier delivery than the stored
// verdict's, and not the stored one, is an orphan.
func TestCountVerdictRecords(t *testing.T) {
	rec := func(seq uint64, event string, delivery int) auditRec {
		return auditRec{seq: seq, Event: event, Data: json.RawMessage(fmt.Sprintf(`{"delivery":%d}`, delivery))}
	}
	replayed := func(seq, auditSeq, superseded uint64) auditRec {
		return auditRec{seq: seq, Event: gated.EventReplayed, Data: json.RawMessage(fmt.Sprintf(`{"delivery":1,"audit_seq":%d,"superseded_seq":%d}`, auditSeq, superseded))}
	}
	stored := &gated.Verdict{AuditSeq: 9}
	for _, tc := range []struct {
		name            string
		recs            []auditRec
		stored          *gated.Verdict
		counted, orphan int
	}{
		{"one record", []auditRec{rec(8, gated.EventReceived, 1), rec(9, gated.EventVerdict, 1)}, stored, 1, 0},
		{"orphan of a dead delivery", []auditRec{rec(3, gated.EventVerdict, 1), rec(9, gated.EventVerdict, 2)}, stored, 1, 1},
		{"two of one delivery", []auditRec{rec(3, gated.EventVerdict, 2), rec(9, gated.EventVerdict, 2)}, stored, 2, 0},
		{"a later delivery decided again", []auditRec{rec(9, gated.EventVerdict, 1), rec(12, gated.EventVerdict, 2)}, stored, 2, 0},
		{"stored record missing", []auditRec{rec(3, gated.EventVerdict, 1), rec(4, gated.EventVerdict, 2)}, stored, 2, 0},
		{"nothing stored", []auditRec{rec(3, gated.EventVerdict, 1), rec(4, gated.EventVerdict, 2)}, nil, 2, 0},
		{"superseded by the stored verdict", []auditRec{rec(9, gated.EventVerdict, 1), rec(12, gated.EventVerdict, 1), replayed(13, 9, 12)}, stored, 1, 1},
		{"superseded, named by another verdict's replay", []auditRec{rec(9, gated.EventVerdict, 1), rec(12, gated.EventVerdict, 1), replayed(13, 4, 12)}, stored, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counted, orphans := countVerdictRecords(tc.recs, tc.stored)
			if counted != tc.counted || orphans != tc.orphan {
				t.Errorf("counted %d, orphans %d; want %d, %d", counted, orphans, tc.counted, tc.orphan)
			}
		})
	}
}
