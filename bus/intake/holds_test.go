package intake_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
	"github.com/gated/gated/personas"
	"github.com/gated/gated/policies"
)

// holdingPolicy is the default bundle holding acme's dns_* actions for an
// operator for one second.
var holdingPolicy = sync.OnceValues(func() (*policies.Evaluator, error) {
	b, err := policies.Default()
	if err != nil {
		return nil, err
	}
	b.Data["gated"].(map[string]any)["config"].(map[string]any)["operator_holds"] = map[string]any{
		"actions": map[string]any{"acme": []any{"dns_*"}}, "deadline": "1s",
	}
	return policies.Compile(context.Background(), b)
})

// TestHoldTimesOutOnceAcrossGatedProcesses: a held action's deadline is
// kept in the holds stream, so a gated that stops before the deadline
// leaves it to the others, and of several gated processes sharing the hold
// consumer exactly one times the action out.
func TestHoldTimesOutOnceAcrossGatedProcesses(t *testing.T) {
	bustest.SkipShort(t)
	s := bustest.Server(t)
	nc, js := bustest.Connect(t, s)
	ctx := t.Context()
	// A hold handed to a gated that dies is handed on after the ack wait.
	cfg := bus.Config{AckWait: 2 * time.Second}
	res, err := bus.Setup(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := holdingPolicy()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	// Three gated processes: one engine, worker and hold timer each, over
	// the same streams and bucket.
	var timers []*intake.HoldTimer
	var conns []*nats.Conn
	for range 3 {
		pnc, _ := bustest.Connect(t, s)
		conns = append(conns, pnc)
		eng, err := engine.New(engine.Config{Policy: pol, Personas: reg, Router: bustest.NoPlugins{}, Store: store.New(res.Verdicts)})
		if err != nil {
			t.Fatal(err)
		}
		aud := bustest.AuditWriter(t, js, audit.Config{})
		w, err := intake.NewWorker(pnc, js, res, eng, aud.Trail, cfg, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Stop(5 * time.Second) })
		timer, err := intake.NewHoldTimer(pnc, res, eng, aud.Trail, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		timers = append(timers, timer)
	}
	// The first gated holds the deadline and stops before it passes.
	if err := timers[0].Start(); err != nil {
		t.Fatal(err)
	}
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	held, err := client.ProposeRaw(pctx, bustest.Proposal("h1", "write", "dns_delete_record", ""))
	if err != nil || held.AwaitingOperator == nil {
		t.Fatalf("proposal: %+v, %v", held, err)
	}
	// It dies: its connection goes with it.
	timers[0].Stop()
	conns[0].Close()
	for _, timer := range timers[1:] {
		if err := timer.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(timer.Stop)
	}
	v, err := client.AwaitDecision(pctx, held)
	if err != nil || v.Outcome != gated.OutcomeTimeout || v.Approved {
		t.Fatalf("final verdict %+v, %v", v, err)
	}
	if v.DecidedAt.Before(held.AwaitingOperator.Deadline) {
		t.Errorf("timed out at %s, before the deadline %s", v.DecidedAt, held.AwaitingOperator.Deadline)
	}
	// The hold message is acknowledged, and no second timeout follows:
	// look until the stream is empty, then count the verdicts audited.
	for {
		info, err := res.Holds.Info(pctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			break
		}
		select {
		case <-pctx.Done():
			t.Fatalf("the holds stream still holds %d messages", info.State.Msgs)
		case <-time.After(50 * time.Millisecond):
		}
	}
	events := bustest.AuditEvents(t, res.Audit, "acme", "h1")
	want := []string{gated.EventReceived, gated.EventPolicyDecided, gated.EventOperatorAwaited, gated.EventVerdict, gated.EventVerdict}
	if !slices.Equal(events, want) {
		t.Errorf("audit events %v, want %v: held once, timed out once", events, want)
	}
	if _, err := res.HoldsConsumer.Info(pctx); err != nil {
		t.Fatal(err)
	}
}

// TestAwaitDecisionTrustsOnlyTheStore: a message on the verdict subject
// that claims to approve a held action is no approval while the stored
// verdict is still held; AwaitDecision keeps waiting and reports no
// verdict when its context ends.
func TestAwaitDecisionTrustsOnlyTheStore(t *testing.T) {
	s := bustest.Server(t)
	nc, js := bustest.Connect(t, s)
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	held := &gated.Verdict{V: 1, ProposalID: "h1", Tenant: "acme", Action: "dns_delete_record", Kind: gated.KindAction,
		Outcome: gated.OutcomeBlocked, Stage: gated.StagePolicy, Reason: "held", ProposalSHA256: strings.Repeat("ab", 32),
		AuditSeq: 7, DecidedAt: time.Now().UTC(),
		AwaitingOperator: &gated.OperatorHold{Deadline: time.Now().Add(time.Hour).UTC(), Reason: "listed", Rule: "hold_listed_action"}}
	if _, err := store.New(res.Verdicts).Create(t.Context(), held); err != nil {
		t.Fatal(err)
	}
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	forged := *held
	forged.AwaitingOperator, forged.Outcome, forged.Approved, forged.Stage = nil, gated.OutcomeApproved, true, gated.StageOperator
	raw, err := json.Marshal(&forged)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			_ = nc.Publish(wire.VerdictSubject("acme", "h1"), raw)
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	v, err := client.AwaitDecision(ctx, held)
	<-done
	if !errors.Is(err, fleet.ErrNoVerdict) || v != nil {
		t.Fatalf("AwaitDecision: %+v, %v; want no verdict: the forged approval is not stored", v, err)
	}
	if err := fleet.CheckVerdict(held); !errors.Is(err, fleet.ErrAwaitingOperator) || !errors.Is(err, fleet.ErrReviewBlocked) {
		t.Errorf("CheckVerdict(held) = %v, want ErrAwaitingOperator and ErrReviewBlocked", err)
	}
}
