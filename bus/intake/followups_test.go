package intake_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/engine/wire"
)

func TestFollowUpIsSentOnce(t *testing.T) {
	store, res, _, js := runStore(t)
	ctx := t.Context()
	fu := intake.NewFollowUps(js, store)
	contSubject := wire.ContinuationSubject("acme", "run1")

	v := bustest.RunVerdict("p1", "run1", 1, gated.NextContinuation)
	mustCreate(t, store, v)
	for i := range 3 {
		if err := fu.Send(ctx, v); err != nil {
			t.Fatalf("Send %d: %v", i+1, err)
		}
	}
	msgs := streamed(t, res, contSubject)
	if len(msgs) != 1 {
		t.Fatalf("%d continuations after three sends, want 1", len(msgs))
	}
	subject, msgID, body, _ := gated.FollowUp(v)
	if msgs[0].Subject != subject || msgs[0].Header.Get(jetstream.MsgIDHeader) != msgID || string(msgs[0].Data) != string(body) {
		t.Fatalf("stored %s (msg id %q): %s\nwant     %s (msg id %q): %s", msgs[0].Subject, msgs[0].Header.Get(jetstream.MsgIDHeader), msgs[0].Data, subject, msgID, body)
	}
	if got := rounds(record(t, store, "run1")); !slices.Equal(got, []string{"1:p1:continuation:sent"}) {
		t.Fatalf("rounds %v, want round 1 marked sent", got)
	}

	// Another proposal of round 1 (a retry the fleet sent under a new id)
	// was rejected too: the round has its follow-up already.
	other := bustest.RunVerdict("p1b", "run1", 1, gated.NextContinuation)
	other.AuditSeq = 999
	mustCreate(t, store, other)
	if err := fu.Send(ctx, other); err != nil {
		t.Fatal(err)
	}
	if n := len(streamed(t, res, contSubject)); n != 1 {
		t.Fatalf("%d continuations after another proposal of round 1, want 1", n)
	}

	// A verdict that sends nothing publishes nothing.
	approved := bustest.RunVerdict("p2", "run1", 2, "")
	mustCreate(t, store, approved)
	if err := fu.Send(ctx, approved); err != nil {
		t.Fatal(err)
	}
	info, err := res.Runs.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("run stream holds %d follow-ups after an approval, want 1", info.State.Msgs)
	}
	if err := fu.Send(ctx, &gated.Verdict{V: 1, ProposalID: "act1", Tenant: "acme", Outcome: gated.OutcomeRejected}); err != nil {
		t.Fatalf("Send of an action verdict: %v", err)
	}
}

func TestFollowUpReplayAfterACrash(t *testing.T) {
	store, res, _, js := runStore(t)
	ctx := t.Context()
	fu := intake.NewFollowUps(js, store)

	// A gated published the continuation and died before marking the
	// round sent.
	v := bustest.RunVerdict("p1", "run1", 1, gated.NextContinuation)
	mustCreate(t, store, v)
	subject, msgID, body, _ := gated.FollowUp(v)
	msg := nats.NewMsg(subject)
	msg.Data, msg.Header = body, nats.Header{jetstream.MsgIDHeader: []string{msgID}}
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if got := rounds(record(t, store, "run1")); !slices.Equal(got, []string{"1:p1:continuation"}) {
		t.Fatalf("rounds %v", got)
	}
	// The replay publishes again; the stream drops the copy by its
	// Nats-Msg-Id, and the round is marked sent.
	if err := fu.Send(ctx, v); err != nil {
		t.Fatal(err)
	}
	if n := len(streamed(t, res, subject)); n != 1 {
		t.Fatalf("%d continuations after the replay, want 1", n)
	}
	if got := rounds(record(t, store, "run1")); !slices.Equal(got, []string{"1:p1:continuation:sent"}) {
		t.Fatalf("rounds %v, want round 1 marked sent", got)
	}

	// A gated stored the verdict and died before recording its round: the
	// replay records the round and sends the escalation.
	esc := bustest.RunVerdict("p3", "run9", 3, gated.NextEscalation)
	data, err := json.Marshal(esc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := res.Verdicts.Create(ctx, "acme.p3", data); err != nil {
		t.Fatal(err)
	}
	if rec := record(t, store, "run9"); rec != nil {
		t.Fatalf("record %v before the replay", rounds(rec))
	}
	if err := fu.Send(ctx, esc); err != nil {
		t.Fatal(err)
	}
	if n := len(streamed(t, res, wire.EscalationSubject("acme"))); n != 1 {
		t.Fatalf("%d escalations, want 1", n)
	}
	if rec := record(t, store, "run9"); rec.Closed != gated.RunEscalated || !slices.Equal(rounds(rec), []string{"3:p3:escalation:sent"}) {
		t.Fatalf("record after the replay: %v closed %q", rounds(rec), rec.Closed)
	}
}

func TestFollowUpFeeds(t *testing.T) {
	store, _, nc, js := runStore(t)
	ctx := t.Context()
	fu := intake.NewFollowUps(js, store)
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	conts, err := client.Continuations(ctx, "acme", "run1")
	if err != nil {
		t.Fatal(err)
	}
	defer conts.Stop()
	escs, err := client.Escalations(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	defer escs.Stop()

	send := func(v *gated.Verdict) {
		t.Helper()
		mustCreate(t, store, v)
		if err := fu.Send(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	next := func(ctx context.Context, read func(context.Context) error) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return read(ctx)
	}
	send(bustest.RunVerdict("p1", "run1", 1, gated.NextContinuation))
	send(bustest.RunVerdict("q1", "run2", 1, gated.NextContinuation)) // another run: not in run1's feed
	// Something that is not a continuation lands on run1's subject.
	if _, err := js.Publish(ctx, wire.ContinuationSubject("acme", "run1"), []byte(`{"v":1,"tenant":"acme","run_id":"run1","round":2,"surprise":true}`)); err != nil {
		t.Fatal(err)
	}
	send(bustest.RunVerdict("p2", "run1", 2, gated.NextContinuation))
	send(bustest.RunVerdict("p3", "run1", 3, gated.NextEscalation))

	var got []*gated.Continuation
	var malformed int
	for len(got) < 2 {
		err := next(ctx, func(ctx context.Context) error {
			c, err := conts.Next(ctx)
			if err == nil {
				got = append(got, c)
			}
			return err
		})
		switch {
		case errors.Is(err, fleet.ErrMalformedFollowUp):
			malformed++
		case err != nil:
			t.Fatalf("continuation %d: %v", len(got)+1, err)
		}
	}
	if malformed != 1 {
		t.Fatalf("%d malformed continuations reported, want 1", malformed)
	}
	for i, c := range got {
		round := i + 2
		if c.Tenant != "acme" || c.RunID != "run1" || c.Round != round || c.Review.Round != round-1 ||
			c.Review.ProposalID != fmt.Sprintf("p%d", round-1) || c.Worker != "coder-1" || c.MaxRounds != 3 {
			t.Fatalf("continuation %d: %+v", i+1, c)
		}
		if len(c.Findings) != 1 || c.Findings[0].ID != fmt.Sprintf("r%d-f1", round-1) || len(c.Criteria) != 1 || c.Criteria[0].ID != "tests" {
			t.Fatalf("continuation %d carries findings %+v and failed criteria %+v", i+1, c.Findings, c.Criteria)
		}
	}

	var esc *gated.Escalation
	if err := next(ctx, func(ctx context.Context) (err error) { esc, err = escs.Next(ctx); return err }); err != nil {
		t.Fatal(err)
	}
	if esc.RunID != "run1" || esc.Rounds != 3 || esc.Review.ProposalID != "p3" || esc.Reason == "" {
		t.Fatalf("escalation %+v", esc)
	}

	// Nothing more: Next waits until its context ends.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if c, err := conts.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next past the last continuation: %+v, %v; want DeadlineExceeded", c, err)
	}

	for _, bad := range []struct{ tenant, run string }{{"ACME", "run1"}, {"acme", "run.1"}, {"acme", ""}} {
		if _, err := client.Continuations(ctx, bad.tenant, bad.run); !errors.Is(err, fleet.ErrBadProposal) {
			t.Errorf("Continuations(%q, %q): err = %v, want ErrBadProposal", bad.tenant, bad.run, err)
		}
	}
	if _, err := client.Escalations(ctx, "a.b"); !errors.Is(err, fleet.ErrBadProposal) {
		t.Errorf("Escalations(a.b): err = %v, want ErrBadProposal", err)
	}
}
