package intake_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/plugins"
)

// The same-id tests send two proposals with different content under one
// id at the same moment through the real stack: an in-process NATS
// server, two gated workers with the real engine and the bundled policy,
// and the bundled SOP reviewer in a plugin process. Whichever proposal's
// verdict is stored first owns the id; the other proposal is answered
// invalid, never with the first one's verdict.

// sameIDRounds is how many ids each case races on.
const sameIDRounds = 100

// sopPlugins runs the bundled SOP reviewer out of process: this test
// binary, relaunched as the plugin (see TestMain).
func sopPlugins(t *testing.T) *plugins.Host { return bustest.SOPHost(t, pluginEnv) }

func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// answerLog keeps what gated answered each delivery, by the digest of
// the delivery's bytes.
type answerLog struct {
	mu sync.Mutex
	by map[string][]*gated.Verdict
}

func (l *answerLog) note(data []byte, v *gated.Verdict) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.by[digestOf(data)] = append(l.by[digestOf(data)], v)
}

func (l *answerLog) of(data []byte) []*gated.Verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*gated.Verdict(nil), l.by[digestOf(data)]...)
}

// watched notes in log what the engine it wraps answered. It only
// watches: every delivery is decided by that engine.
type watched struct {
	next intake.Decider
	log  *answerLog
}

func (w watched) Decide(ctx context.Context, d engine.Delivery) (*gated.Verdict, error) {
	v, err := w.next.Decide(ctx, d)
	if err == nil {
		w.log.note(d.Data, v)
	}
	return v, err
}

func (w watched) GiveUp(ctx context.Context, d engine.Delivery, cause error) *gated.Verdict {
	v := w.next.GiveUp(ctx, d, cause)
	w.log.note(d.Data, v)
	return v
}

// startSameIDGate starts two gated workers on one server, each with its
// own connection, engine and auditor as a gated process of its own would
// have, reviewing through one SOP plugin host. It returns the gate and
// the log of what the workers answered.
func startSameIDGate(t *testing.T) (*gate, *answerLog) {
	t.Helper()
	s := bustest.Server(t)
	nc, js := bustest.Connect(t, s)
	cfg := bus.Config{}
	res, err := bus.Setup(t.Context(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	host := sopPlugins(t)
	log := &answerLog{by: map[string][]*gated.Verdict{}}
	for range 2 {
		wnc, wjs := bustest.Connect(t, s)
		wres, err := bus.Setup(t.Context(), wjs, cfg)
		if err != nil {
			t.Fatal(err)
		}
		eng := defaultEngine(t, store.New(wres.Verdicts), host)
		w, err := intake.NewWorker(wnc, wjs, wres, watched{next: eng, log: log}, trails(t, wjs), cfg, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Stop(5 * time.Second) })
	}
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &gate{&bustest.Fleet{Gated: &bustest.Gated{NC: nc, JS: js, Resources: res}, Client: client}}, log
}

// sameIDPair is two proposals with different content under one id: the
// destructive one must never be approved.
type sameIDPair struct {
	destructive, other []byte
}

// sameIDCases are the races: a reviewed destructive proposal beside a
// read the policy approves alone; a destructive proposal the policy
// denies beside the read (neither is reviewed); and two proposals that
// both go to review, where one waits on the other's review claim.
var sameIDCases = []struct {
	note string
	pair func(id string) sameIDPair
}{
	{note: "reviewed destructive beside a policy-approved read", pair: func(id string) sameIDPair {
		return sameIDPair{bustest.Proposal(id, "destructive", "db_drop_table", ""), bustest.Proposal(id, "read", "host_list_services", "")}
	}},
	{note: "policy only: denied destructive beside a policy-approved read", pair: func(id string) sameIDPair {
		return sameIDPair{bustest.Proposal(id, "destructive", "db_drop_table", `,"flags":{"skip_review":true}`), bustest.Proposal(id, "read", "host_list_services", "")}
	}},
	{note: "both reviewed: destructive beside a write", pair: func(id string) sameIDPair {
		return sameIDPair{bustest.Proposal(id, "destructive", "db_drop_table", ""), bustest.Proposal(id, "write", "host_restart_service", `,"reason":"restart"`)}
	}},
}

// TestSameIDDifferentContentAtOnce publishes the two proposals of a pair
// at the same moment, as two agents that chose the same id would, for
// many ids, and checks what gated answered each delivery and stored.
func TestSameIDDifferentContentAtOnce(t *testing.T) {
	for ci, tc := range sameIDCases {
		t.Run(tc.note, func(t *testing.T) {
			g, log := startSameIDGate(t)
			pairs := make([]sameIDPair, sameIDRounds)
			var wg sync.WaitGroup
			start := make(chan struct{})
			errs := make(chan error, 2*sameIDRounds)
			for i := range pairs {
				pairs[i] = tc.pair(fmt.Sprintf("same-%d-%d", ci, i))
				for _, data := range [][]byte{pairs[i].destructive, pairs[i].other} {
					wg.Go(func() {
						<-start
						// No shared Nats-Msg-Id: the stream would drop the
						// second message, and the fleet client would refuse
						// the first one's verdict itself. Both reach gated.
						a, err := fleet.AddressOf(data)
						if err != nil {
							errs <- err
							return
						}
						msg := nats.NewMsg(wire.ProposalSubject(a.Tenant, a.Action))
						msg.Data = data
						if _, err := g.JS.PublishMsg(t.Context(), msg); err != nil {
							errs <- err
						}
					})
				}
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("publishing: %v", err)
			}
			// A bound, not a speed check: a hundred plugin reviews under the
			// race detector, beside other test packages on two cores, can
			// take far longer than the few seconds they take alone.
			deadline := time.Now().Add(2 * time.Minute)
			for {
				unanswered := 0
				for _, p := range pairs {
					for _, data := range [][]byte{p.destructive, p.other} {
						if len(log.of(data)) == 0 {
							unanswered++
						}
					}
				}
				if unanswered == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d deliveries unanswered after 2m", unanswered, 2*len(pairs))
				}
				time.Sleep(50 * time.Millisecond)
			}

			var approvedDestructive, othersVerdict, notInvalid, notAudited, storedOther, ownerNotStored int
			for _, p := range pairs {
				a, err := fleet.AddressOf(p.destructive)
				if err != nil {
					t.Fatal(err)
				}
				stored, err := g.Client.Verdict(t.Context(), a.Tenant, a.ID)
				if err != nil {
					t.Fatalf("verdict %s not stored: %v", a.ID, err)
				}
				owner := ""
				for _, data := range [][]byte{p.destructive, p.other} {
					if stored.ProposalSHA256 == digestOf(data) {
						owner = digestOf(data)
					}
				}
				if owner == "" {
					storedOther++
				}
				for _, data := range [][]byte{p.destructive, p.other} {
					mine := digestOf(data)
					for _, v := range log.of(data) {
						switch {
						case v.Approved && mine == digestOf(p.destructive):
							approvedDestructive++
						}
						switch {
						case v.ProposalSHA256 != mine:
							othersVerdict++
						case mine == owner && v.AuditSeq != stored.AuditSeq:
							ownerNotStored++
						case mine != owner && (v.Outcome != gated.OutcomeInvalid || !strings.Contains(v.Reason, "already used")):
							notInvalid++
						case mine != owner && !g.auditedVerdict(t, v):
							notAudited++
						}
					}
				}
			}
			outcomes := map[string]int{}
			for _, p := range pairs {
				for _, v := range log.of(p.destructive) {
					outcomes[string(v.Outcome)+" at "+string(v.Stage)]++
				}
			}
			t.Logf("the destructive proposals' answers: %v", outcomes)
			n := sameIDRounds
			if approvedDestructive > 0 {
				t.Errorf("%d answers approved a destructive proposal over %d ids", approvedDestructive, n)
			}
			if othersVerdict > 0 {
				t.Errorf("%d answers handed a delivery the verdict of the other proposal under its id, over %d ids", othersVerdict, n)
			}
			if notInvalid > 0 {
				t.Errorf("%d answers to the proposal that lost the id were not invalid (id already used), over %d ids", notInvalid, n)
			}
			if notAudited > 0 {
				t.Errorf("%d invalid answers to the proposal that lost the id have no verdict.decided record at their audit_seq", notAudited)
			}
			if storedOther > 0 {
				t.Errorf("%d of %d ids store a verdict whose digest matches neither proposal", storedOther, n)
			}
			if ownerNotStored > 0 {
				t.Errorf("%d answers to the proposal that owns the id are not its stored verdict, over %d ids", ownerNotStored, n)
			}
			g.checkDrained(t)
		})
	}
}

// auditedVerdict reports whether the audit record at v's audit_seq is the
// verdict.decided record of v: same outcome, proposal and digest.
func (g *gate) auditedVerdict(t *testing.T, v *gated.Verdict) bool {
	t.Helper()
	if v.AuditSeq == 0 {
		return false
	}
	msg, err := g.Resources.Audit.GetMsg(t.Context(), v.AuditSeq)
	if err != nil {
		t.Fatalf("reading audit record %d: %v", v.AuditSeq, err)
	}
	rec, err := audit.DecodeRecord(msg.Subject, msg.Header, msg.Data)
	if err != nil {
		t.Fatalf("audit record %d: %v", v.AuditSeq, err)
	}
	ev, ok := rec.Find(gated.EventVerdict)
	if !ok {
		return false
	}
	var audited gated.Verdict
	if err := json.Unmarshal(ev.Data, &audited); err != nil {
		t.Fatalf("audit record %d: data is not a verdict: %v", v.AuditSeq, err)
	}
	return ev.Event == gated.EventVerdict && ev.ProposalID == v.ProposalID && audited.Outcome == v.Outcome &&
		audited.ProposalSHA256 == v.ProposalSHA256
}

// checkDrained waits until every proposal is acknowledged.
func (g *gate) checkDrained(t *testing.T) {
	t.Helper()
	waitFor(t, func() bool {
		info, err := g.Resources.Proposals.Info(t.Context())
		return err == nil && info.State.Msgs == 0
	}, "the proposal stream to drain")
}

// TestSameIDDifferentContentOnTheReviewService sends the two proposals of
// a pair to gated.review at the same moment, for many ids: each
// requester gets its own proposal's verdict or a 409 (id taken), and the
// destructive proposal is never approved.
func TestSameIDDifferentContentOnTheReviewService(t *testing.T) {
	g, _ := startSameIDGate(t)
	startService(t, g, intake.ServiceConfig{})
	pair := sameIDCases[0].pair
	type reply struct {
		data []byte
		msg  *nats.Msg
		err  error
	}
	replies := make(chan reply, 2*sameIDRounds)
	var wg sync.WaitGroup
	start := make(chan struct{})
	pairs := make([]sameIDPair, sameIDRounds)
	for i := range pairs {
		pairs[i] = pair(fmt.Sprintf("svc-same-%d", i))
		for _, data := range [][]byte{pairs[i].destructive, pairs[i].other} {
			wg.Go(func() {
				// Many connections open at once: on a loaded machine the
				// default two seconds for the server's INFO can pass.
				nc, err := nats.Connect(g.NC.ConnectedUrl(), nats.Timeout(30*time.Second))
				if err != nil {
					replies <- reply{data: data, err: err}
					return
				}
				defer nc.Close()
				<-start
				ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
				defer cancel()
				m, err := nc.RequestWithContext(ctx, wire.ReviewSubject, data)
				replies <- reply{data: data, msg: m, err: err}
			})
		}
	}
	close(start)
	wg.Wait()
	close(replies)
	destructive := map[string]bool{}
	for _, p := range pairs {
		destructive[digestOf(p.destructive)] = true
	}
	var approvedDestructive, othersVerdict, refused, own int
	for r := range replies {
		if r.err != nil {
			t.Fatalf("request: %v", r.err)
		}
		if code := r.msg.Header.Get(micro.ErrorCodeHeader); code != "" {
			if code != "409" {
				t.Errorf("error reply %s: %s", code, r.msg.Header.Get(micro.ErrorHeader))
			}
			refused++
			continue
		}
		var v gated.Verdict
		if err := json.Unmarshal(r.msg.Data, &v); err != nil {
			t.Fatalf("reply is not a verdict: %v", err)
		}
		if v.Approved && destructive[digestOf(r.data)] {
			approvedDestructive++
		}
		if v.ProposalSHA256 != digestOf(r.data) {
			othersVerdict++
			continue
		}
		own++
	}
	if approvedDestructive > 0 {
		t.Errorf("%d replies approved a destructive proposal over %d ids", approvedDestructive, sameIDRounds)
	}
	if othersVerdict > 0 {
		t.Errorf("%d replies carried the verdict of the other proposal under the id, over %d ids", othersVerdict, sameIDRounds)
	}
	// Each id has one owner, whose requester gets its own verdict.
	if own != sameIDRounds || refused != sameIDRounds {
		t.Errorf("%d replies with the requester's own verdict and %d refused with 409; want %d of each", own, refused, sameIDRounds)
	}
}
