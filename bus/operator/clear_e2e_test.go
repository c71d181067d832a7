package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/flow"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/natstest"
)

// TestFlowClearEndToEnd sends clears through the real service, flow
// bucket and audit stream: unsigned, forged, another tenant's, stale and
// replayed clears are refused and the state stays; a signed clear is
// audited as flow.cleared and then clears the state, and the audit
// stream verifies.
func TestFlowClearEndToEnd(t *testing.T) {
	s := natstest.Server(t)
	nc, js := natstest.Connect(t, s)
	ctx := t.Context()
	if _, err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	kv, err := flow.Setup(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	flows := flow.New(kv)
	alice, root, stranger := newOperatorKey(t), newOperatorKey(t), newOperatorKey(t)
	writer := natstest.AuditWriter(t, js, audit.Config{})
	c, err := operator.NewFlowClearer(operators(t, alice, root), flows, writer.Trail, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := intake.StartService(nc, intake.ServiceConfig{FlowClear: c}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop(0) })

	at := time.Now().UTC().Truncate(time.Second)
	record := func(tenant, agent, id string) {
		t.Helper()
		a := gated.ExecutedAction{ProposalID: id, Action: "read_secret", Labels: []string{"secret"}, At: at}
		if err := flows.Record(ctx, tenant, agent, a, time.Hour, 32); err != nil {
			t.Fatal(err)
		}
	}
	actions := func(tenant, agent string) int {
		t.Helper()
		st, err := flows.Session(ctx, tenant, agent)
		if err != nil {
			t.Fatal(err)
		}
		return len(st.Recent)
	}
	revision := func(tenant, agent string) uint64 {
		t.Helper()
		snap, err := flows.Snapshot(ctx, tenant, agent)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Revision
	}
	clearMsg := func(tenant string) operator.ClearMessage {
		return operator.ClearMessage{Tenant: tenant, Agent: "mailer", Revision: revision(tenant, "mailer"), Operator: "alice", Reason: "the read was reviewed"}
	}
	signClear := func(k operatorKey, m operator.ClearMessage) ([]byte, nats.Header) {
		t.Helper()
		body, hdr, err := operator.SignClear(k.seed, m)
		if err != nil {
			t.Fatal(err)
		}
		return body, hdr
	}
	wantCode := func(body []byte, hdr nats.Header, code int) {
		t.Helper()
		_, err := operator.SendClear(ctx, nc, body, hdr)
		var r *operator.Refusal
		if !errors.As(err, &r) || r.Code != code {
			t.Fatalf("clear = %v, want a refusal %d", err, code)
		}
	}
	cleared := func() int {
		t.Helper()
		stream, err := js.Stream(ctx, audit.Stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(wire.AuditSubjectPrefix+"*."+gated.EventFlowCleared))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range info.State.Subjects {
			n += int(c)
		}
		return n
	}

	record("acme", "mailer", "p-17")
	record("globex", "mailer", "p-18")

	// Unsigned.
	body, _ := signClear(alice, clearMsg("acme"))
	wantCode(body, nats.Header{}, 401)
	// Forged: the body changed after signing, or a key not listed signed.
	body, hdr := signClear(alice, clearMsg("acme"))
	var forged map[string]any
	if err := json.Unmarshal(body, &forged); err != nil {
		t.Fatal(err)
	}
	forged["agent"] = "mailer"
	forged["reason"] = "changed after signing"
	forgedBody, _ := json.Marshal(forged)
	wantCode(forgedBody, hdr, 401)
	body, hdr = signClear(stranger, clearMsg("acme"))
	wantCode(body, hdr, 401)
	// Another tenant's: alice acts for acme only.
	body, hdr = signClear(alice, clearMsg("globex"))
	wantCode(body, hdr, 403)
	// Signed long ago.
	stale := clearMsg("acme")
	stale.SignedAt = time.Now().Add(-time.Hour)
	body, hdr = signClear(alice, stale)
	wantCode(body, hdr, 401)
	if actions("acme", "mailer") != 1 || actions("globex", "mailer") != 1 || cleared() != 0 {
		t.Fatal("a refused clear changed the state or was audited as a clear")
	}

	// Signed, by alice for acme: audited, then cleared.
	body, hdr = signClear(alice, clearMsg("acme"))
	got, err := operator.SendClear(ctx, nc, body, hdr)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tenant != "acme" || got.Agent != "mailer" || got.Actions != 1 || got.AuditSeq == 0 {
		t.Fatalf("cleared %+v", got)
	}
	if actions("acme", "mailer") != 0 || actions("globex", "mailer") != 1 {
		t.Fatal("the clear did not clear acme's mailer alone")
	}
	stream, err := js.Stream(ctx, audit.Stream)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := stream.GetMsg(ctx, got.AuditSeq)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := audit.DecodeRecord(raw.Subject, raw.Header, raw.Data)
	if err != nil {
		t.Fatal(err)
	}
	evs := rec.Events()
	ev := evs[len(evs)-1]
	data, err := gated.DecodeAuditData[gated.FlowClearedData](ev)
	if err != nil || ev.Event != gated.EventFlowCleared || data.Operator != "alice" || data.Key != alice.pub ||
		data.Agent != "mailer" || len(data.Recent) != 1 || data.Recent[0].ProposalID != "p-17" {
		t.Fatalf("audit event %s %+v, %v", ev.Event, data, err)
	}

	// Replayed: at once (nothing to clear), and after the agent acted
	// again (the record is at another revision): the new state stays.
	wantCode(body, hdr, 404)
	record("acme", "mailer", "p-19")
	wantCode(body, hdr, 409)
	if actions("acme", "mailer") != 1 || cleared() != 1 {
		t.Fatal("a replayed clear cleared the state again")
	}

	rep, err := audit.Verify(ctx, js, audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 0 {
		t.Fatalf("audit verify: %+v", rep.Problems)
	}
}

// failingTrail refuses every event.
type failingTrail struct{}

func (failingTrail) Record(context.Context, gated.AuditEvent) error { return errors.New("audit down") }
func (failingTrail) Flush(context.Context) error                    { return nil }
func (failingTrail) Seal(context.Context, gated.AuditEvent) (uint64, error) {
	return 0, errors.New("audit down")
}

// TestFlowClearThatCannotBeAuditedClearsNothing: with the audit trail
// down, a signed clear is refused with 503 and the state stays.
func TestFlowClearThatCannotBeAuditedClearsNothing(t *testing.T) {
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
	ctx := t.Context()
	kv, err := flow.Setup(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	flows := flow.New(kv)
	alice, root := newOperatorKey(t), newOperatorKey(t)
	c, err := operator.NewFlowClearer(operators(t, alice, root), flows, func() engine.AuditTrail { return failingTrail{} }, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	a := gated.ExecutedAction{ProposalID: "p-1", Action: "read_secret", Labels: []string{"secret"}, At: time.Now().UTC()}
	if err := flows.Record(ctx, "acme", "mailer", a, time.Hour, 32); err != nil {
		t.Fatal(err)
	}
	snap, err := flows.Snapshot(ctx, "acme", "mailer")
	if err != nil {
		t.Fatal(err)
	}
	body, hdr, err := operator.SignClear(alice.seed, operator.ClearMessage{Tenant: "acme", Agent: "mailer", Revision: snap.Revision, Operator: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if got, r := c.Clear(ctx, wire.FlowClearSubject("acme"), hdr, body); r == nil || r.Code != 503 {
		t.Fatalf("Clear with the audit down = %+v, %v; want a 503", got, r)
	}
	if st, err := flows.Session(ctx, "acme", "mailer"); err != nil || len(st.Recent) != 1 {
		t.Fatalf("the state after an unaudited clear: %+v, %v", st, err)
	}
}
