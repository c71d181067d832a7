package intake_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/grant"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/policies"
)

// The target race tests send two different proposals on one target at
// once, from two agents, through the real engine, store, policy and SOP
// reviewer plugin on an in-process server. Each review is held until both
// have begun, so that both proposals read the target's history before
// either is decided. parallel_operation must still let only one through:
// the other is rejected at stage policy, naming the approved proposal.

// heldReviews routes every persona as next does, and holds each review
// until want reviews have begun.
type heldReviews struct {
	next engine.Router
	want int

	mu    sync.Mutex
	begun int
	all   chan struct{}
}

func newHeldReviews(next engine.Router, want int) *heldReviews {
	return &heldReviews{next: next, want: want, all: make(chan struct{})}
}

func (h *heldReviews) Route(p *engine.Persona) (engine.Reviewer, error) {
	r, err := h.next.Route(p)
	if err != nil {
		return nil, err
	}
	return heldReviewer{h: h, next: r}, nil
}

type heldReviewer struct {
	h    *heldReviews
	next engine.Reviewer
}

func (r heldReviewer) Review(ctx context.Context, req engine.ReviewRequest) (engine.ReviewResult, error) {
	r.h.mu.Lock()
	r.h.begun++
	if r.h.begun == r.h.want {
		close(r.h.all)
	}
	r.h.mu.Unlock()
	select {
	case <-r.h.all:
	case <-ctx.Done():
		return engine.ReviewResult{}, ctx.Err()
	}
	return r.next.Review(ctx, req)
}

// raceProposal is a restart of nginx on target service, asked by agent.
func raceProposal(id, agent, service string) []byte {
	return fmt.Appendf(nil, `{"v":1,"id":%q,"tenant":"acme","action":"host_restart_service","class":"write",`+
		`"blast_radius":"single_device","target":{"service":%q},"reason":"restart","requested_by":{"agent":%q}}`, id, service, agent)
}

// checkOneApproved checks that of the verdicts of a race on one target
// exactly one approves, and the other is rejected at stage policy by
// parallel_operation, naming the approved proposal, with no grant.
func checkOneApproved(t *testing.T, verdicts []*gated.Verdict) {
	t.Helper()
	var approved, rejected []*gated.Verdict
	for _, v := range verdicts {
		if v.Approved {
			approved = append(approved, v)
		} else {
			rejected = append(rejected, v)
		}
	}
	if len(approved) != 1 || len(rejected) != 1 {
		for _, v := range verdicts {
			t.Logf("%s: %s at %s: %s", v.ProposalID, v.Outcome, v.Stage, v.Reason)
		}
		t.Fatalf("%d of %d proposals on one target approved at once; want exactly 1", len(approved), len(verdicts))
	}
	win, lose := approved[0], rejected[0]
	if lose.Outcome != gated.OutcomeRejected || lose.Stage != gated.StagePolicy {
		t.Errorf("the other proposal is %s at %s (%s), want rejected at policy", lose.Outcome, lose.Stage, lose.Reason)
	}
	if lose.Grant != "" {
		t.Errorf("the rejected proposal carries a grant")
	}
	found := false
	if lose.Policy != nil {
		for _, d := range lose.Policy.Denies {
			if d.Rule == "parallel_operation" && strings.Contains(d.Message, win.ProposalID) {
				found = true
			}
		}
	}
	if !found || !strings.Contains(lose.Reason, win.ProposalID) {
		t.Errorf("the rejection does not name parallel_operation and the approved proposal %s: reason %q, policy %+v", win.ProposalID, lose.Reason, lose.Policy)
	}
}

// raceEngine is one engine deciding with policy over a store and audit
// trail on a server of its own, the SOP reviewer holding its reviews
// until two have begun, so that two proposals on one target read its
// history before either joins it. decide decides data, delivered the
// attempt-th time as stream message seq.
type raceEngine struct {
	res    *bus.Resources
	st     *store.Verdicts
	decide func(data []byte, seq uint64, attempt int) (*gated.Verdict, error)
}

func newRaceEngine(t *testing.T, policy engine.Policy) *raceEngine {
	t.Helper()
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ring, err := grant.NewRing(time.Now().Add(-time.Minute), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(res.Verdicts)
	eng := bustest.EngineWith(t, engine.Config{
		Policy: policy, Router: newHeldReviews(sopPlugins(t), 2), Store: st,
		Grants: engine.GrantIssuer{Ring: func() *grant.Ring { return ring }, TTL: time.Minute},
	})
	tr := trails(t, js)
	return &raceEngine{res: res, st: st, decide: func(data []byte, seq uint64, attempt int) (*gated.Verdict, error) {
		a, err := fleet.AddressOf(data)
		if err != nil {
			return nil, err
		}
		return eng.Decide(t.Context(), engine.Delivery{
			Subject: wire.ProposalSubject(a.Tenant, a.Action), Data: data, MsgID: a.Tenant + "." + a.ID,
			Attempt: attempt, StreamSeq: seq, Trail: tr(),
		})
	}}
}

// TestTargetRaceOneEngine decides two proposals on one target at once in
// one engine, as one gated with several workers does.
func TestTargetRaceOneEngine(t *testing.T) {
	re := newRaceEngine(t, bustest.Policy(t))
	props := [][]byte{raceProposal("race-a", "agent-a", "nginx"), raceProposal("race-b", "agent-b", "nginx")}
	verdicts := make([]*gated.Verdict, len(props))
	errs := make([]error, len(props))
	var wg sync.WaitGroup
	for i, data := range props {
		wg.Go(func() { verdicts[i], errs[i] = re.decide(data, uint64(i+1), 1) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("deciding proposal %d: %v", i, err)
		}
	}
	checkOneApproved(t, verdicts)
	for _, v := range verdicts {
		stored, err := re.st.Get(t.Context(), v.Tenant, v.ProposalID)
		if err != nil {
			t.Fatalf("verdict %s not stored: %v", v.ProposalID, err)
		}
		if stored.Outcome != v.Outcome || stored.AuditSeq != v.AuditSeq {
			t.Errorf("stored verdict of %s is %s (seq %d), answered %s (seq %d)", v.ProposalID, stored.Outcome, stored.AuditSeq, v.Outcome, v.AuditSeq)
		}
	}
	// Redelivered, each proposal gets its stored verdict, the approved one
	// included: its own entry in the target's history does not deny it.
	for i, data := range props {
		a, _ := fleet.AddressOf(data)
		again, err := re.decide(data, uint64(i+1), 2)
		if err != nil {
			t.Fatalf("redelivering %s: %v", a.ID, err)
		}
		if again.Outcome != verdicts[i].Outcome || again.AuditSeq != verdicts[i].AuditSeq {
			t.Errorf("redelivered %s got %s (seq %d), want its stored %s (seq %d)", a.ID, again.Outcome, again.AuditSeq, verdicts[i].Outcome, verdicts[i].AuditSeq)
		}
	}
}

// TestTargetRaceTwoGated sends two proposals on one target at once to
// two gated processes sharing the durable consumer on one server.
func TestTargetRaceTwoGated(t *testing.T) {
	s := bustest.Server(t)
	nc, js := bustest.Connect(t, s)
	cfg := bus.Config{}
	if _, err := bus.Setup(t.Context(), js, cfg); err != nil {
		t.Fatal(err)
	}
	held := newHeldReviews(sopPlugins(t), 2)
	for range 2 {
		wnc, wjs := bustest.Connect(t, s)
		wres, err := bus.Setup(t.Context(), wjs, cfg)
		if err != nil {
			t.Fatal(err)
		}
		eng := defaultEngine(t, store.New(wres.Verdicts), held)
		w, err := intake.NewWorker(wnc, wjs, wres, eng, trails(t, wjs), cfg, zaptest.NewLogger(t))
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
	props := [][]byte{raceProposal("race2-a", "agent-a", "nginx"), raceProposal("race2-b", "agent-b", "nginx")}
	verdicts := make([]*gated.Verdict, len(props))
	errs := make([]error, len(props))
	var wg sync.WaitGroup
	for i, data := range props {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			verdicts[i], errs[i] = client.ProposeRaw(ctx, data)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("proposing %d: %v", i, err)
		}
	}
	checkOneApproved(t, verdicts)
}

// recentChangeHold is a policy author's bundle: the default one without
// parallel_operation and target_cooldown, so approvals on one target may
// overlap, that instead holds for an operator a change to a target another
// proposal was approved on within the hour.
func recentChangeHold(t *testing.T) engine.Policy {
	t.Helper()
	b, err := policies.Default()
	if err != nil {
		t.Fatal(err)
	}
	ops := b.Modules["operations.rego"]
	from := strings.Index(ops, `deny contains {"rule": "parallel_operation"`)
	to := strings.Index(ops, "same_agent(h) if {")
	if from < 0 || to < from {
		t.Fatal("operations.rego no longer has parallel_operation and target_cooldown before same_agent: update recentChangeHold")
	}
	b.Modules["operations.rego"] = ops[:from] + ops[to:]
	b.Modules["author.rego"] = `package gated

hold contains {"rule": "hold_recent_change", "why": "the target changed within the hour"} if {
	some h in input.history
	h.outcome == "approved"
	h.proposal_id != input.proposal.id
	now_ns - h.decided_at_ns < time.parse_duration_ns("1h")
}
`
	pol, err := policies.Compile(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// TestTargetRaceRecheckHolds decides two proposals on one target at once
// in one engine, on real JetStream with the SOP reviewer plugin, under a
// policy that lets approvals on one target overlap but holds for an
// operator a change to a target changed within the hour. Both reviews
// approve; the approval that joins the target second is decided again on
// the history as it then stands, where the policy holds it, so it does not
// stand: it is rejected at stage policy by target_changed, audited, with
// no grant. Sent again, the proposal is held for an operator.
func TestTargetRaceRecheckHolds(t *testing.T) {
	re := newRaceEngine(t, recentChangeHold(t))
	res, st, decide := re.res, re.st, re.decide
	props := [][]byte{raceProposal("hold-a", "agent-a", "nginx"), raceProposal("hold-b", "agent-b", "nginx")}
	verdicts := make([]*gated.Verdict, len(props))
	errs := make([]error, len(props))
	var wg sync.WaitGroup
	for i, data := range props {
		wg.Go(func() { verdicts[i], errs[i] = decide(data, uint64(i+1), 1) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("deciding proposal %d: %v", i, err)
		}
	}
	var win, lose *gated.Verdict
	for _, v := range verdicts {
		if v.Approved {
			win = v
		} else {
			lose = v
		}
	}
	if win == nil || lose == nil {
		for _, v := range verdicts {
			t.Logf("%s: %s at %s: %s", v.ProposalID, v.Outcome, v.Stage, v.Reason)
		}
		t.Fatal("want exactly one approval")
	}
	if lose.Outcome != gated.OutcomeRejected || lose.Stage != gated.StagePolicy || lose.Grant != "" || lose.Policy == nil ||
		!slices.Equal(lose.Policy.Rules, []string{engine.RuleTargetChanged}) ||
		!strings.Contains(lose.Reason, win.ProposalID) || !strings.Contains(lose.Reason, "holds it for an operator") {
		t.Errorf("the other proposal: %s at %s (%s), policy %+v, grant %t: want rejected at policy by %s naming %s and the hold, no grant",
			lose.Outcome, lose.Stage, lose.Reason, lose.Policy, lose.Grant != "", engine.RuleTargetChanged, win.ProposalID)
	}
	var changed []string
	for _, ev := range bustest.AuditRecords(t, res.Audit, "acme", lose.ProposalID) {
		if ev.Event == gated.EventGrantIssued {
			t.Errorf("the rejected proposal has a %s record", ev.Event)
		}
		if ev.Event == gated.EventPolicyRechecked {
			var d struct {
				Changed []string `json:"changed"`
			}
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			changed = d.Changed
		}
	}
	if len(changed) == 0 {
		t.Errorf("no %s record says what the policy now asks", gated.EventPolicyRechecked)
	}
	stored, err := st.Get(t.Context(), "acme", lose.ProposalID)
	if err != nil || stored.Outcome != gated.OutcomeRejected || stored.AuditSeq != lose.AuditSeq {
		t.Errorf("stored verdict of %s: %+v, %v", lose.ProposalID, stored, err)
	}

	// Sent again under a new id, it is decided on the history as it
	// stands: held for an operator, not answered by the race's rejection.
	again, err := decide(raceProposal("hold-c", lose.Agent, "nginx"), 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if again.Outcome != gated.OutcomeBlocked || again.AwaitingOperator == nil || again.AwaitingOperator.Rule != "hold_recent_change" {
		t.Errorf("sent again: %s at %s (%s), awaiting %+v; want held by hold_recent_change", again.Outcome, again.Stage, again.Reason, again.AwaitingOperator)
	}
}
