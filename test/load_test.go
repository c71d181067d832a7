package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// This file is the load generator and the accounting of the scale and
// fault suites. The generator plays a fleet: it publishes a mix of
// proposals with Nats-Msg-Id, retries a publish until JetStream
// acknowledges it (with the same id, so a retry can never become a second
// proposal), and listens for verdicts. The accounting then holds the
// verdicts on the wire, the stored verdicts and the audit stream against
// what was sent.

const loadTenant = "acme"

// proposalKind is what a generated proposal is meant to test, and so
// which verdict it must get.
type proposalKind int

const (
	// kindRead is a read: approved by the policy, no review.
	kindRead proposalKind = iota
	// kindDenied asks to skip review: rejected by the policy.
	kindDenied
	// kindApprove is a restart the SOP covers, on its own device:
	// approved by the sop reviewer.
	kindApprove
	// kindReject drops a table no SOP covers: rejected by the reviewer.
	kindReject
	// kindInvalid has an unknown class: invalid.
	kindInvalid
)

func (k proposalKind) String() string {
	return [...]string{"read", "denied", "approve", "reject", "invalid"}[k]
}

// reviewed says whether the kind goes to the reviewer plugin.
func (k proposalKind) reviewed() bool { return k == kindApprove || k == kindReject }

// expected is the verdict a kind gets when nothing fails.
func (k proposalKind) expected() (engine.Outcome, engine.Stage) {
	switch k {
	case kindRead:
		return engine.OutcomeApproved, engine.StagePolicy
	case kindDenied:
		return engine.OutcomeRejected, engine.StagePolicy
	case kindApprove:
		return engine.OutcomeApproved, engine.StageReview
	case kindReject:
		return engine.OutcomeRejected, engine.StageReview
	default:
		return engine.OutcomeInvalid, engine.StageValidation
	}
}

// loadMix is the share of each kind, over ten proposals: four reviewed
// approvals, two reviewed rejections, two reads, one policy denial, one
// invalid proposal.
var loadMix = [10]proposalKind{kindRead, kindDenied, kindApprove, kindReject, kindApprove,
	kindRead, kindApprove, kindReject, kindApprove, kindInvalid}

// proposalBody is proposal i of a run. Every mutating proposal has its
// own target, so the parallel-operation and cooldown rules and dedupe
// (which would answer a repeated rejection at stage dedupe) stay out of
// the way; the reasons differ for the same purpose.
func proposalBody(id string, i int, k proposalKind) []byte {
	device := 100000 + i
	common := fmt.Sprintf(`"v":1,"id":%q,"tenant":%q,"operator":{"id":"alice","roles":["sre"]},"requested_by":{"agent":"load-agent","session":"s-%d"}`,
		id, loadTenant, i)
	var body string
	switch k {
	case kindRead:
		body = fmt.Sprintf(`{%s,"action":"host_list_services","class":"read","target":{"device_id":%d},"reason":"looking at device %d"}`,
			common, device, device)
	case kindDenied:
		body = fmt.Sprintf(`{%s,"action":"host_restart_service","class":"write","target":{"device_id":%d,"service":"nginx","tags":["production"]},
"reason":"admin says no review needed for device %d","blast_radius":"single_device","flags":{"skip_review":true}}`, common, device, device)
	case kindApprove:
		body = fmt.Sprintf(`{%s,"action":"host_restart_service","class":"write","target":{"device_id":%d,"service":"nginx","tags":["production"]},
"reason":"nginx on device %d stopped answering health checks","blast_radius":"single_device","incident_id":"INC-%d"}`, common, device, device, i)
	case kindReject:
		body = fmt.Sprintf(`{%s,"action":"db_drop_table","class":"destructive","target":{"database":"orders","table":"archive_%d","tags":["production"]},
"reason":"archive table %d is unused","blast_radius":"cluster"}`, common, i, i)
	default:
		body = fmt.Sprintf(`{%s,"action":"host_restart_service","class":"maybe","target":{"device_id":%d},"reason":"class %d is not a class","blast_radius":"single_device"}`,
			common, device, i)
	}
	return []byte(strings.ReplaceAll(body, "\n", ""))
}

func actionOf(k proposalKind) string {
	switch k {
	case kindRead:
		return "host_list_services"
	case kindReject:
		return "db_drop_table"
	default:
		return "host_restart_service"
	}
}

// sentProposal is one proposal of the load.
type sentProposal struct {
	id    string
	i     int
	kind  proposalKind
	first time.Time // first publish attempt
	acked time.Time // zero until JetStream acknowledged it
	tries int
}

// wireVerdict is a verdict as it arrived on gated.verdicts.>.
type wireVerdict struct {
	v  engine.Verdict
	at time.Time
}

// faultMark is a moment the test broke something, for the recovery figures.
type faultMark struct {
	what string
	at   time.Time
}

// fleetLoad is a running load generator.
type fleetLoad struct {
	t      *testing.T
	prefix string
	nc     *nats.Conn
	js     jetstream.JetStream
	sub    *nats.Subscription

	mu         sync.Mutex
	props      map[string]*sentProposal
	order      []*sentProposal
	wire       map[string][]wireVerdict
	faults     []faultMark
	pubErrors  int
	lastPubErr string
	started    time.Time

	done chan struct{} // closed when every proposal is acknowledged or given up
	stop chan struct{} // closed when the test ends: publishers give up
}

// newLoad connects a fleet to natsURL (comma-separated URLs) and
// subscribes to the verdicts. Proposal ids start with prefix.
func newLoad(t *testing.T, natsURL, prefix string) *fleetLoad {
	t.Helper()
	nc, err := nats.Connect(natsURL, nats.Name("load-"+prefix), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l := &fleetLoad{t: t, prefix: prefix, nc: nc, js: js, props: map[string]*sentProposal{},
		wire: map[string][]wireVerdict{}, done: make(chan struct{}), stop: make(chan struct{})}
	t.Cleanup(func() { close(l.stop) })
	l.sub, err = nc.Subscribe(wire.VerdictSubjectPrefix+loadTenant+".>", l.onVerdict)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return l
}

func (l *fleetLoad) onVerdict(m *nats.Msg) {
	var v engine.Verdict
	if err := json.Unmarshal(m.Data, &v); err != nil {
		l.t.Errorf("verdict on %s is not JSON: %v", m.Subject, err)
		return
	}
	if !strings.HasPrefix(v.ProposalID, l.prefix) {
		return
	}
	l.mu.Lock()
	l.wire[v.ProposalID] = append(l.wire[v.ProposalID], wireVerdict{v: v, at: time.Now()})
	l.mu.Unlock()
}

// start publishes n proposals, one every interval, from a few publishers
// that retry until JetStream acknowledges each (or a minute passes). It
// returns at once; wait for the end with published.
func (l *fleetLoad) start(n int, every time.Duration) {
	jobs := make(chan *sentProposal, n)
	l.mu.Lock()
	l.started = time.Now()
	for i := range n {
		p := &sentProposal{id: fmt.Sprintf("%s-%04d", l.prefix, i), i: i, kind: loadMix[i%len(loadMix)]}
		l.props[p.id] = p
		l.order = append(l.order, p)
	}
	order := slices.Clone(l.order)
	l.mu.Unlock()
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		defer close(jobs)
		for _, p := range order {
			jobs <- p
			select {
			case <-tick.C:
			case <-l.stop:
				return
			}
		}
	}()
	const publishers = 8
	var wg sync.WaitGroup
	for range publishers {
		wg.Go(func() {
			for p := range jobs {
				l.publish(p)
			}
		})
	}
	go func() { wg.Wait(); close(l.done) }()
}

// publish sends one proposal until it is acknowledged, retrying with the
// same Nats-Msg-Id.
func (l *fleetLoad) publish(p *sentProposal) {
	body := proposalBody(p.id, p.i, p.kind)
	giveUp := time.Now().Add(time.Minute)
	l.mu.Lock()
	p.first = time.Now()
	l.mu.Unlock()
	for attempt := 1; ; attempt++ {
		msg := nats.NewMsg(wire.ProposalSubjectPrefix + loadTenant + "." + actionOf(p.kind))
		msg.Data = body
		msg.Header.Set(jetstream.MsgIDHeader, loadTenant+"."+p.id)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := l.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(bus.ProposalsStream))
		cancel()
		l.mu.Lock()
		p.tries = attempt
		if err == nil {
			p.acked = time.Now()
			l.mu.Unlock()
			return
		}
		l.pubErrors++
		l.lastPubErr = err.Error()
		l.mu.Unlock()
		if time.Now().After(giveUp) {
			return
		}
		select {
		case <-l.stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// published waits until every proposal is acknowledged or given up.
func (l *fleetLoad) published(t *testing.T) {
	t.Helper()
	select {
	case <-l.done:
	case <-time.After(3 * time.Minute):
		t.Fatal("publishers still busy after 3 minutes")
	}
}

// mark records a fault.
func (l *fleetLoad) mark(what string) {
	l.mu.Lock()
	l.faults = append(l.faults, faultMark{what: what, at: time.Now()})
	l.mu.Unlock()
}

// counts returns how many proposals are acknowledged and how many have a
// verdict on the wire.
func (l *fleetLoad) counts() (sent, answered int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.order {
		if !p.acked.IsZero() {
			sent++
		}
		if len(l.wire[p.id]) > 0 {
			answered++
		}
	}
	return sent, answered
}

// waitCounts waits until at least sent proposals are acknowledged and
// answered have a verdict on the wire.
func (l *fleetLoad) waitCounts(t *testing.T, sent, answered int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s, a := l.counts()
		if s >= sent && a >= answered {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("load stalled: %d sent (want %d), %d answered (want %d)", s, sent, a, answered)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// verdictBucket opens GATED_VERDICTS, retrying while the cluster recovers.
func (l *fleetLoad) verdictBucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		kv, err := l.js.KeyValue(ctx, wire.VerdictBucket)
		cancel()
		if err == nil {
			return kv
		}
		if time.Now().After(deadline) {
			t.Fatalf("opening GATED_VERDICTS: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// storedVerdict reads one stored verdict; found is false when there is
// none, err when the bucket could not answer.
func storedVerdict(ctx context.Context, kv jetstream.KeyValue, id string) (v *engine.Verdict, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	e, err := kv.Get(ctx, loadTenant+"."+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v = &engine.Verdict{}
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return nil, false, fmt.Errorf("stored verdict %s: %w", id, err)
	}
	return v, true, nil
}

// settle waits until every acknowledged proposal has a stored verdict,
// or the recovery deadline passes, and returns the stored verdicts.
// Proposals already answered on the wire are looked up once at the end;
// the others are polled, since a verdict published while a subscriber was
// reconnecting never reaches it.
func (l *fleetLoad) settle(t *testing.T, deadline time.Duration) map[string]*engine.Verdict {
	t.Helper()
	kv := l.verdictBucket(t)
	stored := map[string]*engine.Verdict{}
	until := time.Now().Add(deadline)
	for {
		l.mu.Lock()
		var pending []string
		for _, p := range l.order {
			if _, ok := stored[p.id]; !ok && !p.acked.IsZero() && len(l.wire[p.id]) == 0 {
				pending = append(pending, p.id)
			}
		}
		l.mu.Unlock()
		for _, id := range pending {
			v, found, err := storedVerdict(t.Context(), kv, id)
			if err == nil && found {
				stored[id] = v
			}
		}
		if len(pending) == 0 || time.Now().After(until) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Every proposal's stored verdict, for the accounting.
	l.mu.Lock()
	ids := make([]string, 0, len(l.order))
	for _, p := range l.order {
		ids = append(ids, p.id)
	}
	l.mu.Unlock()
	for _, id := range ids {
		if _, ok := stored[id]; ok {
			continue
		}
		for attempt := 0; ; attempt++ {
			v, found, err := storedVerdict(t.Context(), kv, id)
			if err == nil {
				if found {
					stored[id] = v
				}
				break
			}
			if attempt == 10 {
				t.Fatalf("reading the stored verdict of %s: %v", id, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	return stored
}

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
		var r auditRec
		if err := json.Unmarshal(m.Data(), &r); err != nil {
			bad++
		} else if strings.HasPrefix(r.ProposalID, l.prefix) {
			r.seq = md.Sequence.Stream
			out[r.ProposalID] = append(out[r.ProposalID], r)
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
func (l *fleetLoad) account(t *testing.T, deadline time.Duration) (*tally, map[string]*engine.Verdict) {
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
			if r.Event == engine.EventReplayed {
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
			if v.Stage != engine.StageReview || !approvedByReview(recs, v) {
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
// was decided again on redelivery, as docs/AUDIT.md describes. With no
// stored verdict every record counts.
func countVerdictRecords(recs []auditRec, stored *engine.Verdict) (counted, orphans int) {
	storedDelivery := 0
	if stored != nil {
		for _, r := range recs {
			if r.Event == engine.EventVerdict && r.seq == stored.AuditSeq {
				storedDelivery = r.data().Delivery
			}
		}
	}
	for _, r := range recs {
		if r.Event != engine.EventVerdict {
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
// event the stored verdict names, before it.
func approvedByReview(recs []auditRec, v *engine.Verdict) bool {
	delivery := 0
	found := false
	for _, r := range recs {
		if r.seq == v.AuditSeq && r.Event == engine.EventVerdict {
			delivery, found = r.data().Delivery, true
		}
	}
	if !found {
		return false
	}
	for _, r := range recs {
		if r.Event != engine.EventReviewDone || r.seq >= v.AuditSeq {
			continue
		}
		d := r.data()
		if d.Decision == string(engine.DecisionApprove) && (delivery == 0 || d.Delivery == 0 || d.Delivery == delivery) {
			return true
		}
	}
	return false
}

// describe renders what the test saw of one proposal, for a failure
// report.
func (l *fleetLoad) describe(id string, recs []auditRec, stored *engine.Verdict) string {
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
func (l *fleetLoad) recovery(stored map[string]*engine.Verdict) []string {
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
			if v.Approved && v.Stage == engine.StageReview && v.DecidedAt.After(f.at) &&
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
	stored := &engine.Verdict{AuditSeq: 9}
	for _, tc := range []struct {
		name            string
		recs            []auditRec
		stored          *engine.Verdict
		counted, orphan int
	}{
		{"one record", []auditRec{rec(8, engine.EventReceived, 1), rec(9, engine.EventVerdict, 1)}, stored, 1, 0},
		{"orphan of a dead delivery", []auditRec{rec(3, engine.EventVerdict, 1), rec(9, engine.EventVerdict, 2)}, stored, 1, 1},
		{"two of one delivery", []auditRec{rec(3, engine.EventVerdict, 2), rec(9, engine.EventVerdict, 2)}, stored, 2, 0},
		{"a later delivery decided again", []auditRec{rec(9, engine.EventVerdict, 1), rec(12, engine.EventVerdict, 2)}, stored, 2, 0},
		{"stored record missing", []auditRec{rec(3, engine.EventVerdict, 1), rec(4, engine.EventVerdict, 2)}, stored, 2, 0},
		{"nothing stored", []auditRec{rec(3, engine.EventVerdict, 1), rec(4, engine.EventVerdict, 2)}, nil, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counted, orphans := countVerdictRecords(tc.recs, tc.stored)
			if counted != tc.counted || orphans != tc.orphan {
				t.Errorf("counted %d, orphans %d; want %d, %d", counted, orphans, tc.counted, tc.orphan)
			}
		})
	}
}
