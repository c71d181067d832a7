package intake_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// gate is a running worker with the real engine and the default policy,
// and a fleet client of it (bustest.StartFleet). No reviewer plugin runs
// here, so proposals that need review are blocked; the end-to-end suite in
// test/ covers reviews.
type gate struct{ *bustest.Fleet }

// noPlugins routes no persona: proposals that need review are blocked.
type noPlugins = bustest.NoPlugins

// flaky fails the first failures deliveries, then lets the engine decide.
type flaky struct {
	next     intake.Decider
	failures int32
	calls    atomic.Int32
}

func (f *flaky) Decide(ctx context.Context, d engine.Delivery) (*gated.Verdict, error) {
	if f.calls.Add(1) <= f.failures {
		return nil, errors.New("injected storage failure")
	}
	return f.next.Decide(ctx, d)
}

func (f *flaky) GiveUp(ctx context.Context, d engine.Delivery, cause error) *gated.Verdict {
	return f.next.GiveUp(ctx, d, cause)
}

// defaultEngine is the engine serve builds: the default bundle (compiled
// once per test binary) and the built-in personas, over store, reviewing
// through router.
func defaultEngine(tb testing.TB, store engine.VerdictStore, router engine.Router) *engine.Engine {
	tb.Helper()
	return bustest.Engine(tb, store, router)
}

func startGate(t *testing.T, wrap func(intake.Decider) intake.Decider, cfg bus.Config) *gate {
	t.Helper()
	return &gate{bustest.StartFleet(t, wrap, cfg)}
}

func TestWorkerDecidesAndAudits(t *testing.T) {
	g := startGate(t, nil, bus.Config{})
	tests := []struct {
		note    string
		data    []byte
		outcome gated.Outcome
		stage   gated.Stage
		events  []string
	}{
		{
			note: "read passes at policy", data: bustest.Proposal("r1", "read", "host_list_services", ""),
			outcome: gated.OutcomeApproved, stage: gated.StagePolicy,
			// gated grants what it approves, as serve does.
			events: []string{gated.EventReceived, gated.EventPolicyDecided, gated.EventGrantIssued, gated.EventVerdict},
		},
		{
			note: "skip_review is denied", data: bustest.Proposal("w1", "write", "host_restart_service", `,"flags":{"skip_review":true}`),
			outcome: gated.OutcomeRejected, stage: gated.StagePolicy,
			events: []string{gated.EventReceived, gated.EventPolicyDecided, gated.EventVerdict},
		},
		{
			note: "no reviewer blocks", data: bustest.Proposal("w2", "write", "host_restart_service", ""),
			outcome: gated.OutcomeBlocked, stage: gated.StageReview,
			events: []string{gated.EventReceived, gated.EventPolicyDecided, gated.EventReviewUnrouted, gated.EventVerdict},
		},
		{
			note: "invalid class", data: bustest.Proposal("bad1", "maybe", "host_restart_service", ""),
			outcome: gated.OutcomeInvalid, stage: gated.StageValidation,
			events: []string{gated.EventReceived, gated.EventInvalid, gated.EventVerdict},
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			v := g.Propose(t, tc.data)
			if v.Outcome != tc.outcome || v.Stage != tc.stage {
				t.Fatalf("verdict %s at %s (%s), want %s at %s", v.Outcome, v.Stage, v.Reason, tc.outcome, tc.stage)
			}
			if v.Approved != (tc.outcome == gated.OutcomeApproved) {
				t.Fatalf("approved = %v for outcome %s", v.Approved, v.Outcome)
			}
			stored, err := g.Client.Verdict(t.Context(), "acme", v.ProposalID)
			if err != nil {
				t.Fatalf("verdict not stored: %v", err)
			}
			if stored.AuditSeq == 0 || stored.AuditSeq != v.AuditSeq {
				t.Fatalf("stored audit_seq %d, published %d", stored.AuditSeq, v.AuditSeq)
			}
			if got := bustest.AuditEvents(t, g.Resources.Audit, "acme", v.ProposalID); strings.Join(got, ",") != strings.Join(tc.events, ",") {
				t.Fatalf("audit events %v, want %v", got, tc.events)
			}
		})
	}
	// Every proposal was acknowledged: the work queue is empty.
	waitFor(t, func() bool {
		info, err := g.Resources.Proposals.Info(t.Context())
		return err == nil && info.State.Msgs == 0
	}, "proposals stream to drain")
}

func TestRedeliveryReplaysStoredVerdict(t *testing.T) {
	g := startGate(t, nil, bus.Config{})
	data := bustest.Proposal("dup1", "read", "host_list_services", "")
	first := g.Propose(t, data)
	// The same proposal again: the stream drops it as a duplicate and the
	// client reads the stored verdict.
	again := g.Propose(t, data)
	if again.DecidedAt != first.DecidedAt || again.AuditSeq != first.AuditSeq {
		t.Fatalf("duplicate got a new verdict: %+v vs %+v", again, first)
	}
	// The same bytes under another message id reach gated as a first
	// delivery: decided again, its approval looks the stored verdict up
	// before it is sealed, and the stored verdict is what gated answers.
	sub, err := g.NC.SubscribeSync(wire.VerdictSubject("acme", "dup1"))
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg("gated.proposals.acme.host_list_services")
	msg.Data = data
	msg.Header.Set(jetstream.MsgIDHeader, "acme.dup1-retry")
	if _, err := g.JS.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var replayed gated.Verdict
	if err := json.Unmarshal(m.Data, &replayed); err != nil {
		t.Fatal(err)
	}
	if replayed.AuditSeq != first.AuditSeq {
		t.Fatalf("replayed audit_seq %d, want the original %d", replayed.AuditSeq, first.AuditSeq)
	}
	// The trail says the copy got the stored verdict, and holds no
	// approval of its own: verdict.replayed names the original record and
	// supersedes none, and the original is the only verdict.decided.
	var last gated.AuditEvent
	decided := 0
	waitFor(t, func() bool {
		events := bustest.AuditRecords(t, g.Resources.Audit, "acme", "dup1")
		if len(events) == 0 || events[len(events)-1].Event != gated.EventReplayed {
			return false
		}
		last = events[len(events)-1]
		decided = 0
		for _, ev := range events {
			if ev.Event == gated.EventVerdict {
				decided++
			}
		}
		return true
	}, "a verdict.replayed audit event")
	if decided != 1 {
		t.Errorf("%d verdict.decided records on the trail of dup1; want the original's alone", decided)
	}
	var said struct {
		AuditSeq      uint64 `json:"audit_seq"`
		SupersededSeq uint64 `json:"superseded_seq"`
	}
	if err := json.Unmarshal(last.Data, &said); err != nil {
		t.Fatal(err)
	}
	if said.AuditSeq != first.AuditSeq || said.SupersededSeq != 0 {
		t.Fatalf("verdict.replayed names audit_seq %d superseding %d; want the original %d superseding none",
			said.AuditSeq, said.SupersededSeq, first.AuditSeq)
	}
	stored, err := g.Client.Verdict(t.Context(), "acme", "dup1")
	if err != nil || stored.AuditSeq != first.AuditSeq {
		t.Fatalf("stored verdict %+v, %v; want the original's audit_seq %d", stored, err, first.AuditSeq)
	}
}

func TestReusedIDWithOtherBytesIsInvalid(t *testing.T) {
	g := startGate(t, nil, bus.Config{})
	g.Propose(t, bustest.Proposal("reuse1", "read", "host_list_services", ""))
	sub, err := g.NC.SubscribeSync(wire.VerdictSubject("acme", "reuse1"))
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg("gated.proposals.acme.host_restart_service")
	msg.Data = bustest.Proposal("reuse1", "write", "host_restart_service", "")
	msg.Header.Set(jetstream.MsgIDHeader, "acme.reuse1-b")
	if _, err := g.JS.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var v gated.Verdict
	if err := json.Unmarshal(m.Data, &v); err != nil {
		t.Fatal(err)
	}
	if v.Outcome != gated.OutcomeInvalid || !strings.Contains(v.Reason, "already used") {
		t.Fatalf("verdict %s: %s; want invalid, id already used", v.Outcome, v.Reason)
	}
	stored, err := g.Client.Verdict(t.Context(), "acme", "reuse1")
	if err != nil || stored.Outcome != gated.OutcomeApproved || stored.Action != "host_list_services" {
		t.Fatalf("stored verdict changed: %+v, %v", stored, err)
	}
}

func TestGarbageGetsInvalidVerdict(t *testing.T) {
	g := startGate(t, nil, bus.Config{})
	tests := []struct {
		note string
		data []byte
	}{
		{note: "not JSON", data: []byte("restart everything please")},
		{note: "JSON array", data: []byte(`[1,2,3]`)},
		{note: "empty", data: nil},
		{note: "oversize", data: append(append([]byte(`{"v":1,"id":"big","reason":"`), make([]byte, 1100<<10)...), `"}`...)},
	}
	for i, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			id := fmt.Sprintf("garbage%d", i)
			sub, err := g.NC.SubscribeSync(wire.VerdictSubject("acme", id))
			if err != nil {
				t.Fatal(err)
			}
			msg := nats.NewMsg("gated.proposals.acme.host_restart_service")
			msg.Data = tc.data
			msg.Header.Set(jetstream.MsgIDHeader, "acme."+id)
			if _, err := g.JS.PublishMsg(t.Context(), msg); err != nil {
				t.Fatal(err)
			}
			m, err := sub.NextMsg(10 * time.Second)
			if err != nil {
				t.Fatalf("no verdict for a malformed proposal: %v", err)
			}
			var v gated.Verdict
			if err := json.Unmarshal(m.Data, &v); err != nil {
				t.Fatal(err)
			}
			if v.Outcome != gated.OutcomeInvalid || v.Approved || v.Stage != gated.StageValidation {
				t.Fatalf("verdict %s at %s: %s", v.Outcome, v.Stage, v.Reason)
			}
		})
	}
}

func TestFailedDecisionIsRedelivered(t *testing.T) {
	f := &flaky{failures: 1}
	g := startGate(t, func(d intake.Decider) intake.Decider { f.next = d; return f }, bus.Config{})
	v := g.Propose(t, bustest.Proposal("retry1", "read", "host_list_services", ""))
	if v.Outcome != gated.OutcomeApproved {
		t.Fatalf("outcome %s: %s", v.Outcome, v.Reason)
	}
	if n := f.calls.Load(); n != 2 {
		t.Fatalf("decider called %d times, want 2 (one failure, one redelivery)", n)
	}
}

func TestLastDeliveryFailureIsAnErrorVerdict(t *testing.T) {
	f := &flaky{failures: 100}
	g := startGate(t, func(d intake.Decider) intake.Decider { f.next = d; return f }, bus.Config{MaxDeliver: 2})
	v := g.Propose(t, bustest.Proposal("doomed1", "read", "host_list_services", ""))
	if v.Outcome != gated.OutcomeError || v.Approved {
		t.Fatalf("outcome %s: %s; want error", v.Outcome, v.Reason)
	}
	if !strings.Contains(v.Reason, "2 deliveries") {
		t.Errorf("reason %q does not say how many deliveries failed", v.Reason)
	}
	// The error verdict is stored and audited like any other.
	stored, err := g.Client.Verdict(t.Context(), "acme", "doomed1")
	if err != nil || stored.Outcome != gated.OutcomeError || stored.AuditSeq != v.AuditSeq || v.AuditSeq == 0 {
		t.Fatalf("stored %+v (%v), published audit_seq %d", stored, err, v.AuditSeq)
	}
	if got := bustest.AuditEvents(t, g.Resources.Audit, "acme", "doomed1"); len(got) == 0 || got[len(got)-1] != gated.EventVerdict {
		t.Fatalf("audit events %v do not end with the verdict", got)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
