package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
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
func (k proposalKind) expected() (gated.Outcome, gated.Stage) {
	switch k {
	case kindRead:
		return gated.OutcomeApproved, gated.StagePolicy
	case kindDenied:
		return gated.OutcomeRejected, gated.StagePolicy
	case kindApprove:
		return gated.OutcomeApproved, gated.StageReview
	case kindReject:
		return gated.OutcomeRejected, gated.StageReview
	default:
		return gated.OutcomeInvalid, gated.StageValidation
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
	v  gated.Verdict
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
	var v gated.Verdict
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
func storedVerdict(ctx context.Context, kv jetstream.KeyValue, id string) (v *gated.Verdict, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	e, err := kv.Get(ctx, loadTenant+"."+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v = &gated.Verdict{}
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
func (l *fleetLoad) settle(t *testing.T, deadline time.Duration) map[string]*gated.Verdict {
	t.Helper()
	kv := l.verdictBucket(t)
	stored := map[string]*gated.Verdict{}
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
