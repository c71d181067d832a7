package status_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/status"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// trails starts a real server with gated's streams and an audit writer,
// and returns it with a connection for the status publisher.
func trails(t *testing.T) (func() engine.AuditTrail, *nats.Conn) {
	t.Helper()
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	if _, err := bus.Setup(t.Context(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	nc, _ := bustest.Connect(t, s) // the status publisher's own
	return bustest.AuditWriter(t, js, audit.Config{}).Trail, nc
}

func event(name string, data any) gated.AuditEvent {
	b, _ := json.Marshal(data)
	return gated.AuditEvent{V: 1, Event: name, Tenant: "acme", ProposalID: "p1", At: time.Now(), Data: b}
}

// verdictData is a verdict as gated records it: encoded from
// gated.Verdict with audit_seq 0.
func verdictData() *gated.Verdict {
	return &gated.Verdict{V: 1, ProposalID: "p1", Tenant: "acme", Outcome: gated.OutcomeRejected, Stage: gated.StagePolicy, Reason: "no"}
}

// TestTrailPublishesStages records a proposal's events on a wrapped trail
// and reads the statuses a fleet would, in order, the decided one with
// the audit sequence of the sealed record.
func TestTrailPublishesStages(t *testing.T) {
	inner, nc := trails(t)
	sub, err := nc.SubscribeSync(wire.StatusSubject("acme", "p1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	p := status.NewPublisher(nc, nil)
	tr := p.Trails(inner)()
	ctx := t.Context()
	for _, ev := range []gated.AuditEvent{
		event(gated.EventReceived, map[string]any{"bytes": 2}),
		event(gated.EventPolicyDecided, map[string]any{"denies": []any{}}),
		event(gated.EventToolCalled, map[string]any{"tool": "get_sop_text"}),
	} {
		if err := tr.Record(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	seq, err := tr.Seal(ctx, event(gated.EventVerdict, verdictData()))
	if err != nil {
		t.Fatal(err)
	}
	want := []gated.StatusStage{gated.StatusReceived, gated.StatusPolicyDecided, gated.StatusDecided}
	for i, stage := range want {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("status %d (%s): %v", i, stage, err)
		}
		st, err := gated.DecodeStatus(m.Data)
		if err != nil {
			t.Fatalf("status %d: %v", i, err)
		}
		if st.Stage != stage {
			t.Fatalf("status %d is %s, want %s", i, st.Stage, stage)
		}
		if stage == gated.StatusDecided && (st.Verdict == nil || st.Verdict.AuditSeq != seq || seq == 0) {
			t.Fatalf("decided carries %+v, want audit_seq %d", st.Verdict, seq)
		}
	}
	if p.Published() != 3 || p.Failed() != 0 {
		t.Errorf("published %d, failed %d; want 3, 0", p.Published(), p.Failed())
	}
}

// TestTrailFailedPublishChangesNothing: with the status connection closed
// every publish fails, and the trail records and seals as without it.
func TestTrailFailedPublishChangesNothing(t *testing.T) {
	inner, nc := trails(t)
	nc.Close()
	ctx := t.Context()
	p := status.NewPublisher(nc, nil)
	tr := p.Trails(inner)()
	if err := tr.Record(ctx, event(gated.EventReceived, map[string]any{"bytes": 2})); err != nil {
		t.Fatalf("record: %v", err)
	}
	seq, err := tr.Seal(ctx, event(gated.EventVerdict, verdictData()))
	if err != nil || seq == 0 {
		t.Fatalf("seal: %d, %v", seq, err)
	}
	if p.Published() != 0 || p.Failed() != 2 {
		t.Errorf("published %d, failed %d; want 0, 2", p.Published(), p.Failed())
	}
}

// TestTrailPublishesNothingItDidNotRecord: an event the trail refuses
// (after its seal) gets no status.
func TestTrailPublishesNothingItDidNotRecord(t *testing.T) {
	inner, nc := trails(t)
	ctx := t.Context()
	p := status.NewPublisher(nc, nil)
	tr := p.Trails(inner)()
	if _, err := tr.Seal(ctx, event(gated.EventVerdict, verdictData())); err != nil {
		t.Fatal(err)
	}
	if err := tr.Record(ctx, event(gated.EventReceived, map[string]any{})); !errors.Is(err, audit.ErrTrailSealed) {
		t.Fatalf("record after seal: %v", err)
	}
	if _, err := tr.Seal(ctx, event(gated.EventVerdict, verdictData())); !errors.Is(err, audit.ErrTrailSealed) {
		t.Fatalf("second seal: %v", err)
	}
	if p.Published() != 1 {
		t.Errorf("published %d, want only the first seal's", p.Published())
	}
}
