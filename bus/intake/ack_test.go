package intake_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
)

// holdFor keeps a review going for d.
func holdFor(d time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func TestLongReviewIsNotRedelivered(t *testing.T) {
	bustest.SkipShort(t)
	in := newIntake(t, bus.Config{AckWait: 3 * time.Second})
	// 2.5 times the ack wait: only in-progress acks keep the proposal.
	in.reviewer.hold = func(ctx context.Context) error {
		select {
		case <-time.After(7500 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	seen := &deliveries{}
	wrap := func(d intake.Decider) intake.Decider { seen.Decider = d; return seen }
	// A second gated would take a redelivery.
	in.startWorker(t, workerOptions{wrap: wrap})
	in.startWorker(t, workerOptions{wrap: wrap})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	v, err := in.client.ProposeRaw(ctx, bustest.Proposal("long1", "write", "host_restart_service", ""))
	if err != nil {
		t.Fatal(err)
	}
	if v.Outcome != gated.OutcomeApproved {
		t.Fatalf("verdict %s: %s", v.Outcome, v.Reason)
	}
	in.drained(t)
	ci, err := in.res.Consumer.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := seen.seen(); !slices.Equal(got, []int{1}) || ci.Delivered.Consumer != 1 {
		t.Fatalf("deliveries %v (consumer delivered %d), want one", got, ci.Delivered.Consumer)
	}
	if n := in.reviewer.calls.Load(); n != 1 {
		t.Fatalf("%d reviews, want 1", n)
	}
}

func TestProposalWaitingForASlotIsNotRedelivered(t *testing.T) {
	bustest.SkipShort(t)
	// One proposal at a time: the second waits for the first's review,
	// well past the ack wait; in-progress acks must keep it meanwhile, or
	// it is redelivered and its stale copy decided as well.
	in := newIntake(t, bus.Config{AckWait: 3 * time.Second, MaxInFlight: 1})
	in.reviewer.hold = holdFor(7500 * time.Millisecond)
	seen := &deliveries{}
	in.startWorker(t, workerOptions{wrap: func(d intake.Decider) intake.Decider { seen.Decider = d; return seen }})
	first, second := in.verdicts(t, "slot1"), in.verdicts(t, "slot2")
	in.publish(t, bustest.Proposal("slot1", "write", "host_restart_service", ""), "acme.slot1")
	in.publish(t, bustest.Proposal("slot2", "write", "host_restart_service", ""), "acme.slot2")
	if v := receive(t, first, "the first verdict"); v.Outcome != gated.OutcomeApproved {
		t.Fatalf("verdict %s: %s", v.Outcome, v.Reason)
	}
	// The second is on the same target: whatever the policy makes of it,
	// it must have waited for the slot and been decided once.
	if v := receive(t, second, "the second verdict"); v.Outcome == gated.OutcomeError {
		t.Fatalf("verdict %s: %s", v.Outcome, v.Reason)
	}
	in.drained(t)
	ci, err := in.res.Consumer.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := seen.seen(); !slices.Equal(got, []int{1, 1}) || ci.Delivered.Consumer != 2 {
		t.Fatalf("deliveries %v (consumer delivered %d), want one of each proposal", got, ci.Delivered.Consumer)
	}
}

func TestWorkerKeepsTheConsumersAckWait(t *testing.T) {
	bustest.SkipShort(t)
	// This gated was told a 30 s ack wait, but another gated, started
	// later, set the shared consumer's to 3 s: in-progress acks must
	// follow the consumer's, or a long review is redelivered.
	in := newIntake(t, bus.Config{AckWait: 30 * time.Second})
	in.reviewer.hold = holdFor(7500 * time.Millisecond)
	nc, _ := natstest.Connect(t, in.srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	res, err := bus.Setup(t.Context(), js, bus.Config{AckWait: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	seen := &deliveries{Decider: in.engine(t, store.New(res.Verdicts))}
	w, err := intake.NewWorker(nc, js, res, seen, trails(t, js), in.cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(5 * time.Second) })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	v, err := in.client.ProposeRaw(ctx, bustest.Proposal("wait1", "write", "host_restart_service", ""))
	if err != nil {
		t.Fatal(err)
	}
	if v.Outcome != gated.OutcomeApproved {
		t.Fatalf("verdict %s: %s", v.Outcome, v.Reason)
	}
	in.drained(t)
	if got := seen.seen(); !slices.Equal(got, []int{1}) {
		t.Fatalf("deliveries %v, want [1]", got)
	}
}

func TestAbandonedProposalIsAnswered(t *testing.T) {
	bustest.SkipShort(t)
	tests := []struct {
		note string
		// decide has the first delivery decided (verdict stored and
		// audited) before the gated that holds it dies.
		decide bool
		// failPublish has the worker's first publish of the answer fail.
		failPublish bool
		data        []byte
		outcome     gated.Outcome
	}{
		{note: "never decided", data: bustest.Proposal("gone1", "write", "host_restart_service", ""), outcome: gated.OutcomeError},
		{note: "decided, never acknowledged", decide: true, data: bustest.Proposal("gone1", "read", "host_list_services", ""), outcome: gated.OutcomeApproved},
		{note: "never decided, first answer lost", failPublish: true, data: bustest.Proposal("gone1", "write", "host_restart_service", ""),
			outcome: gated.OutcomeError},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			in := newIntake(t, bus.Config{AckWait: time.Second, MaxDeliver: 2})
			verdicts := in.verdicts(t, "gone1")
			in.publish(t, tc.data, "acme.gone1")

			// The test is a gated that dies on every delivery: it takes
			// each and never answers.
			for attempt := 1; attempt <= 2; attempt++ {
				m := in.fetch(t)
				md, err := m.Metadata()
				if err != nil {
					t.Fatal(err)
				}
				if int(md.NumDelivered) != attempt {
					t.Fatalf("delivery %d, want %d", md.NumDelivered, attempt)
				}
				if tc.decide && attempt == 1 {
					eng := in.engine(t, store.New(in.res.Verdicts))
					d := engine.Delivery{Subject: m.Subject(), Data: m.Data(), MsgID: "acme.gone1", Attempt: attempt,
						StreamSeq: md.Sequence.Stream, Trail: trails(t, in.js)()}
					if _, err := eng.Decide(t.Context(), d); err != nil {
						t.Fatal(err)
					}
				}
			}

			// A gated that comes up gets a delivery past its budget of 2
			// and answers it without deciding it again.
			seen := &deliveries{}
			o := workerOptions{wrap: func(d intake.Decider) intake.Decider { seen.Decider = d; return seen }}
			var publishes atomic.Int32
			if tc.failPublish {
				o.nc, _ = natstest.Connect(t, in.srv)
				o.publish = func(subject string, data []byte) error {
					if publishes.Add(1) == 1 {
						return errors.New("injected publish failure")
					}
					return o.nc.Publish(subject, data)
				}
			}
			in.startWorker(t, o)
			v := receive(t, verdicts, "the abandoned proposal's verdict")
			if v.Outcome != tc.outcome || (v.Outcome == gated.OutcomeError && v.Approved) {
				t.Fatalf("verdict %s: %s; want %s", v.Outcome, v.Reason, tc.outcome)
			}
			if v.Outcome == gated.OutcomeError && !strings.Contains(v.Reason, "2 deliveries") {
				t.Errorf("reason %q does not say how many deliveries there were", v.Reason)
			}
			sameVerdict(t, in.stored(t, "gone1"), v)
			in.drained(t)
			if got := seen.seen(); len(got) != 0 {
				t.Fatalf("the abandoned proposal was delivered again (%v)", got)
			}
			if n := in.reviewer.calls.Load(); n != 0 {
				t.Fatalf("%d reviews of an abandoned proposal, want none", n)
			}
			if tc.failPublish && publishes.Load() < 2 {
				t.Fatalf("%d publishes, want the failed one and its retry", publishes.Load())
			}
		})
	}
}

func TestAckComesAfterStoreAuditAndPublish(t *testing.T) {
	in := newIntake(t, bus.Config{})
	workerNC, _ := natstest.Connect(t, in.srv)
	var publishes atomic.Int32
	var firstSeq atomic.Uint64
	publish := func(subject string, data []byte) error {
		if publishes.Add(1) > 1 {
			return workerNC.Publish(subject, data)
		}
		// Before the verdict goes out it is stored, its audit trail is
		// stored, and the proposal is not acknowledged yet.
		ctx := context.Background()
		var v gated.Verdict
		if err := json.Unmarshal(data, &v); err != nil {
			t.Errorf("publishing a verdict that is not JSON: %v", err)
		}
		firstSeq.Store(v.AuditSeq)
		if stored, err := in.client.Verdict(ctx, "acme", v.ProposalID); err != nil || stored.AuditSeq != v.AuditSeq {
			t.Errorf("publishing before the verdict is stored: %+v, %v", stored, err)
		}
		if _, err := in.res.Audit.GetMsg(ctx, v.AuditSeq); err != nil {
			t.Errorf("publishing before the audit trail is stored: event %d: %v", v.AuditSeq, err)
		}
		if info, err := in.res.Proposals.Info(ctx); err != nil || info.State.Msgs != 1 {
			t.Errorf("the proposal left the stream before its verdict was published (%v)", err)
		}
		return errors.New("injected publish failure")
	}
	seen := &deliveries{}
	in.startWorker(t, workerOptions{nc: workerNC, publish: publish, wrap: func(d intake.Decider) intake.Decider { seen.Decider = d; return seen }})
	verdicts := in.verdicts(t, "pub1")
	in.publish(t, bustest.Proposal("pub1", "write", "host_restart_service", ""), "acme.pub1")

	// The failed publish left the proposal unacknowledged: it is
	// redelivered, and the redelivery publishes the same verdict.
	v := receive(t, verdicts, "the verdict")
	if v.AuditSeq != firstSeq.Load() || v.Outcome != gated.OutcomeApproved {
		t.Fatalf("verdict %s with audit_seq %d, want the first attempt's approval (audit_seq %d)", v.Outcome, v.AuditSeq, firstSeq.Load())
	}
	in.drained(t)
	if got := seen.seen(); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("deliveries %v, want [1 2]", got)
	}
	if n := in.reviewer.calls.Load(); n != 1 {
		t.Fatalf("%d reviews, want 1", n)
	}
}

// TestWorkerStopsTwice: a second Stop, at once or after the first, is a
// no-op, not a panic on channels closed already.
func TestWorkerStopsTwice(t *testing.T) {
	in := newIntake(t, bus.Config{})
	nc, _ := natstest.Connect(t, in.srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := intake.NewWorker(nc, js, res, in.engine(t, store.New(res.Verdicts)), trails(t, js), in.cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { w.Stop(time.Second) })
	}
	wg.Wait()
	w.Stop(time.Second)
}
