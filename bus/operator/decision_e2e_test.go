package operator_test

import (
	"context"
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
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// TestDecisionEndToEnd sends signed decisions through the real
// service, engine, verdict store and audit stream: a held run verdict is
// replaced, stored, published and audited, and a second decision on it
// is refused.
func TestDecisionEndToEnd(t *testing.T) {
	s := bustest.Server(t)
	nc, js := bustest.Connect(t, s)
	ctx := t.Context()
	res, err := bus.Setup(ctx, js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store := store.New(res.Verdicts)
	eng := bustest.Engine(t, store, bustest.NoPlugins{})
	alice, root := newOperatorKey(t), newOperatorKey(t)
	var (
		mu        sync.Mutex
		followUps []*gated.Verdict
	)
	followUp := func(_ context.Context, v *gated.Verdict) error {
		mu.Lock()
		defer mu.Unlock()
		followUps = append(followUps, v)
		return nil
	}
	publish := func(_ context.Context, v *gated.Verdict) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return nc.Publish(wire.VerdictSubject(v.Tenant, v.ProposalID), data)
	}
	ep, err := operator.NewEndpoint(operators(t, alice, root), eng, bustest.AuditWriter(t, js, audit.Config{}).Trail, followUp, publish, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := intake.StartService(nc, intake.ServiceConfig{Operators: ep}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop(0) })

	hold := func(id string) *gated.Verdict {
		t.Helper()
		v := &gated.Verdict{
			V: 1, ProposalID: id, Tenant: "acme", Action: "run_review", Kind: gated.KindRun, Outcome: gated.OutcomeBlocked,
			Stage: gated.StageReview, Reason: "awaiting an operator decision on ux-check", ProposalSHA256: heldDigest,
			AuditSeq: 7, DecidedAt: time.Now().UTC().Add(-time.Minute), Agent: "worker-1",
			Run: &gated.RunVerdict{
				RunID: "run-" + id, Worker: "worker-1", Round: 1, MaxRounds: 5, AwaitingOperator: []string{"ux-check"},
				Criteria: []gated.CriterionEval{{ID: "tests", Pass: true, Kind: gated.CriterionCommandResult, Required: true, JudgedBy: gated.JudgedByPolicy}},
			},
		}
		if _, err := store.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	send := func(m operator.Message) *nats.Msg {
		t.Helper()
		body, hdr := sign(t, alice, m)
		return sendOperator(t, s.ClientURL(), wire.OperatorSubject(m.Tenant, m.ProposalID), body, hdr)
	}
	wantRefusal := func(m *nats.Msg, code string) {
		t.Helper()
		if got := m.Header.Get(micro.ErrorCodeHeader); got != code {
			t.Fatalf("reply %q %q, want %s", got, m.Header.Get(micro.ErrorHeader), code)
		}
	}

	hold("held-1")
	verdicts, err := nc.SubscribeSync(wire.VerdictSubject("acme", "held-1"))
	if err != nil {
		t.Fatal(err)
	}
	m := decision()
	m.ProposalID = "held-1"
	reply := send(m)
	v := replyVerdict(t, reply)
	if v.Outcome != gated.OutcomeApproved || !v.Approved || v.Stage != gated.StageOperator || v.ProposalSHA256 != heldDigest {
		t.Fatalf("verdict %s/%s approved=%v: %s", v.Outcome, v.Stage, v.Approved, v.Reason)
	}
	var judged bool
	for _, c := range v.Run.Criteria {
		judged = judged || (c.ID == "ux-check" && c.Pass && c.JudgedBy == gated.JudgedByOperator+"alice")
	}
	if !judged || len(v.Run.AwaitingOperator) != 0 {
		t.Fatalf("run criteria %+v awaiting %v: want ux-check passed by operator:alice and nothing awaited", v.Run.Criteria, v.Run.AwaitingOperator)
	}
	stored, err := store.Get(ctx, "acme", "held-1")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Stage != gated.StageOperator || stored.AuditSeq != v.AuditSeq || stored.AuditSeq == 7 {
		t.Fatalf("stored verdict %s/%s seq %d, replied seq %d", stored.Outcome, stored.Stage, stored.AuditSeq, v.AuditSeq)
	}
	pub, err := verdicts.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no verdict published: %v", err)
	}
	var published gated.Verdict
	if err := json.Unmarshal(pub.Data, &published); err != nil || published.AuditSeq != v.AuditSeq {
		t.Fatalf("published %s (%v)", pub.Data, err)
	}
	var events []string
	err = audit.Read(ctx, js, audit.Query{Tenant: "acme"}, func(e audit.Entry) error {
		if e.Record != nil && e.Record.ProposalID == "held-1" {
			for _, ev := range e.Record.Events() {
				events = append(events, ev.Event)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(events, " "); !strings.Contains(got, gated.EventOperatorDecided) || !strings.HasSuffix(got, gated.EventVerdict) {
		t.Fatalf("audit events %q, want %s and then %s", got, gated.EventOperatorDecided, gated.EventVerdict)
	}

	// Decided once: the same decision again, or another, is refused, and
	// has the stored verdict's follow-up published again (the hook
	// publishes nothing twice).
	wantRefusal(send(m), "409")
	m.Criteria[0].Pass = false
	wantRefusal(send(m), "409")
	mu.Lock()
	n := len(followUps)
	mu.Unlock()
	if n != 3 {
		t.Fatalf("follow-up hook called %d times, want 3: the decision, then each refused one again", n)
	}

	// A failed manual criterion rejects the run at stage operator.
	hold("held-2")
	m = decision()
	m.ProposalID = "held-2"
	m.Criteria[0] = engine.OperatorFinding{ID: "ux-check", Pass: false, Reason: "the dialog overflows on mobile"}
	v = replyVerdict(t, send(m))
	if v.Outcome != gated.OutcomeRejected || v.Stage != gated.StageOperator {
		t.Fatalf("verdict %s/%s: %s", v.Outcome, v.Stage, v.Reason)
	}
	mu.Lock()
	n = len(followUps)
	last := followUps[n-1]
	mu.Unlock()
	if n != 4 || last.ProposalID != "held-2" || last.AuditSeq != v.AuditSeq || last.Run.Next != gated.NextContinuation {
		t.Fatalf("follow-up hook got %d verdicts, last %s", n, last.ProposalID)
	}

	// Not matching the held verdict: another digest, another criterion.
	hold("held-3")
	m = decision()
	m.ProposalID = "held-3"
	m.ProposalSHA256 = strings.Repeat("cd", 32)
	wantRefusal(send(m), "409")
	m = decision()
	m.ProposalID = "held-3"
	m.Criteria[0].ID = "docs-check"
	wantRefusal(send(m), "409")
	if still, err := store.Get(ctx, "acme", "held-3"); err != nil || still.Outcome != gated.OutcomeBlocked || still.AuditSeq != 7 {
		t.Fatalf("held verdict changed by refused decisions: %+v, %v", still, err)
	}

	// Nothing stored.
	m = decision()
	m.ProposalID = "never-decided"
	wantRefusal(send(m), "404")

	// The verdicts operators decided name their own records; held-3, held
	// by hand with a made-up audit_seq, does not.
	rep, err := audit.Verify(ctx, js, audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wrong []string
	for _, p := range rep.Problems {
		wrong = append(wrong, p.ProposalID)
	}
	if fmt.Sprint(wrong) != "[held-3]" || rep.Verdicts.Matched != 2 {
		t.Fatalf("verify: %+v\nproblems %+v", *rep.Verdicts, rep.Problems)
	}
}
