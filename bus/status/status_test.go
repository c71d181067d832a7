package status_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
	return eventOf("p1", name, data)
}

func eventOf(id, name string, data any) gated.AuditEvent {
	b, _ := json.Marshal(data)
	return gated.AuditEvent{V: 1, Event: name, Tenant: "acme", ProposalID: id, At: time.Now(), Data: b}
}

// follow has tr publish every status, as a proposal with the status
// header does.
func follow(tr engine.AuditTrail) {
	tr.(interface{ Follow() }).Follow()
}

// memTrail is an audit trail that stores nothing: the only messages of
// its publisher's connection are then the statuses.
type memTrail struct{ seq uint64 }

func (m *memTrail) Record(context.Context, gated.AuditEvent) error { return nil }

func (m *memTrail) Flush(context.Context) error { return nil }

func (m *memTrail) Seal(context.Context, gated.AuditEvent) (uint64, error) {
	m.seq++
	return m.seq, nil
}

// decide records a policy-decided proposal's stages for id on a trail of
// p's, told to follow them when followed.
func decide(t *testing.T, p *status.Publisher, id string, followed bool) {
	t.Helper()
	tr := p.Trails(func() engine.AuditTrail { return &memTrail{} })()
	if followed {
		follow(tr)
	}
	for _, ev := range []gated.AuditEvent{
		eventOf(id, gated.EventReceived, map[string]any{"bytes": 2}),
		eventOf(id, gated.EventPolicyDecided, map[string]any{"denies": []any{}}),
	} {
		if err := tr.Record(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	v := verdictData()
	v.ProposalID = id
	if _, err := tr.Seal(t.Context(), eventOf(id, gated.EventVerdict, v)); err != nil {
		t.Fatal(err)
	}
}

// sentBy is how many messages the server has taken in from nc.
func sentBy(t *testing.T, s *server.Server, nc *nats.Conn) int64 {
	t.Helper()
	if err := nc.Flush(); err != nil { // the server has read all nc sent
		t.Fatal(err)
	}
	cid, err := nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	cz, err := s.Connz(&server.ConnzOptions{CID: cid})
	if err != nil || len(cz.Conns) != 1 {
		t.Fatalf("connz of %d: %+v, %v", cid, cz, err)
	}
	return cz.Conns[0].InMsgs
}

// TestStatusOnlyWhenListened: a proposal nobody listens to sends the
// server no status, counted at the server on the publisher's connection:
// not on an external server (no interest known), not on the embedded one
// (asked of its account). A proposal whose trail follows, one a fleet
// asked for on gated.watch.<tenant>.<id>, and on the embedded server one
// with a subscriber, send every stage.
func TestStatusOnlyWhenListened(t *testing.T) {
	for _, mode := range []string{"external", "embedded"} {
		t.Run(mode, func(t *testing.T) {
			s := bustest.Server(t)
			nc, _ := bustest.Connect(t, s)
			p := status.NewPublisher(nc, nil)
			if mode == "embedded" {
				p.SetInterest(s.GlobalAccount().SubscriptionInterest)
			}
			if err := p.Serve(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Stop)
			fleet, _ := bustest.Connect(t, s)
			before := sentBy(t, s, nc)
			decide(t, p, "quiet", false)
			if n := sentBy(t, s, nc) - before; n != 0 || p.Published() != 0 {
				t.Fatalf("a proposal nobody listens to sent %d messages (%d published), want none", n, p.Published())
			}
			decide(t, p, "followed", true)
			if n := sentBy(t, s, nc) - before; n != 3 || p.Published() != 3 {
				t.Fatalf("a followed proposal: %d messages (%d published), want its 3 stages", n, p.Published())
			}
			// A fleet's ask: gated answers, then publishes the proposal's
			// statuses.
			if m, err := fleet.Request(wire.StatusWatchSubject("acme", "asked"), nil, 5*time.Second); err != nil || string(m.Data) != `{"ok":true}` {
				t.Fatalf("the ask: %v %v", m, err)
			}
			decide(t, p, "asked", false)
			if n := sentBy(t, s, nc) - before; n != 3+1+3 { // the answer, then the stages
				t.Fatalf("an asked-for proposal: %d messages in all, want 7", n)
			}
			// A subscriber alone: the embedded server's account says so;
			// another server's cannot, and nothing is sent.
			sub, err := fleet.SubscribeSync(wire.StatusSubject("acme", "heard"))
			if err != nil {
				t.Fatal(err)
			}
			if err := fleet.Flush(); err != nil {
				t.Fatal(err)
			}
			decide(t, p, "heard", false)
			want := map[string]int64{"external": 7, "embedded": 10}[mode]
			if n := sentBy(t, s, nc) - before; n != want {
				t.Fatalf("a proposal with a subscriber: %d messages in all, want %d", n, want)
			}
			if mode == "embedded" {
				for i := range 3 {
					if _, err := sub.NextMsg(5 * time.Second); err != nil {
						t.Fatalf("the subscriber's status %d: %v", i, err)
					}
				}
			}
		})
	}
}

// TestStatusWatchRefusesBadSubjects: an ask on a subject that names no
// valid tenant and id is refused, and publishes nothing.
func TestStatusWatchRefusesBadSubjects(t *testing.T) {
	s := bustest.Server(t)
	nc, _ := bustest.Connect(t, s)
	p := status.NewPublisher(nc, nil)
	if err := p.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	m, err := nc.Request("gated.watch.ACME.p1", nil, 5*time.Second)
	if err != nil || string(m.Data) == `{"ok":true}` {
		t.Fatalf("an ask for tenant ACME: %v %v", m, err)
	}
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
	follow(tr)
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
	follow(tr)
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
	follow(tr)
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
