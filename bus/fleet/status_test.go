package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/engine/wire"
	"github.com/nats-io/nats.go"
)

// TestProposeWithStatus proposes through real gated on a real server and
// follows each proposal's status: every stage its audit trail records, in
// order, and a decided status that carries the verdict the fleet got.
func TestProposeWithStatus(t *testing.T) {
	g := bustest.StartFleet(t, nil, bus.Config{})
	skip := typed("s-skip", "host_restart_service", gated.ClassWrite)
	skip.Flags.SkipReview = true
	tests := []struct {
		note    string
		p       *gated.Proposal
		outcome gated.Outcome
		stages  []gated.StatusStage
	}{
		{note: "read approved by the policy", p: typed("s-read", "host_list_services", gated.ClassRead), outcome: gated.OutcomeApproved,
			stages: []gated.StatusStage{gated.StatusReceived, gated.StatusPolicyDecided, gated.StatusDecided}},
		{note: "skip_review denied by the policy", p: skip, outcome: gated.OutcomeRejected,
			stages: []gated.StatusStage{gated.StatusReceived, gated.StatusPolicyDecided, gated.StatusDecided}},
		{note: "write with no reviewer to route to", p: typed("s-write", "host_restart_service", gated.ClassWrite), outcome: gated.OutcomeBlocked,
			stages: []gated.StatusStage{gated.StatusReceived, gated.StatusPolicyDecided, gated.StatusDecided}},
		{note: "invalid proposal decided on arrival", p: typed("s-invalid", "host_restart_service", "maybe"), outcome: gated.OutcomeInvalid,
			stages: []gated.StatusStage{gated.StatusReceived, gated.StatusDecided}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var got []*gated.Status
			v, err := g.Client.ProposeWith(ctx, tc.p, fleet.WithStatus(func(u fleet.StatusUpdate) {
				if u.Err != nil {
					t.Errorf("status error: %v", u.Err)
					return
				}
				got = append(got, u.Status)
			}))
			if v == nil || v.Outcome != tc.outcome {
				t.Fatalf("verdict %+v, %v; want outcome %s", v, err, tc.outcome)
			}
			var stages []gated.StatusStage
			for _, st := range got {
				stages = append(stages, st.Stage)
				if st.Tenant != "acme" || st.ID != tc.p.ID || st.At.IsZero() {
					t.Errorf("status %+v does not name acme.%s and its time", st, tc.p.ID)
				}
			}
			if !slices.Equal(stages, tc.stages) {
				t.Fatalf("stages %v, want %v", stages, tc.stages)
			}
			decided := got[len(got)-1].Verdict
			if decided == nil || decided.Outcome != v.Outcome || decided.AuditSeq == 0 || decided.AuditSeq != v.AuditSeq ||
				decided.ProposalSHA256 != v.ProposalSHA256 || decided.Reason != v.Reason {
				t.Fatalf("decided status carries %+v, the fleet got %+v", decided, v)
			}
		})
	}
}

// TestWatchSkipsMalformedEvents: a message on the status subject that is
// not a status event comes as an error naming the member at fault, and
// the watch goes on to the proposal's real stages.
func TestWatchSkipsMalformedEvents(t *testing.T) {
	g := bustest.StartFleet(t, nil, bus.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	p := typed("w-read", "host_list_services", gated.ClassRead)
	updates, err := g.Client.Watch(ctx, "acme", p.ID)
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := json.Marshal(map[string]any{"v": 1, "tenant": "acme", "id": p.ID, "stage": "decided", "at": time.Now()})
	for _, data := range [][]byte{[]byte("not json"), forged} {
		if err := g.Gated.NC.Publish(wire.StatusSubject("acme", p.ID), data); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Client.Propose(ctx, p); err != nil {
		t.Fatal(err)
	}
	var fields []string
	var stages []gated.StatusStage
	for len(stages) == 0 || stages[len(stages)-1] != gated.StatusDecided {
		select {
		case u, ok := <-updates:
			if !ok {
				t.Fatalf("watch closed after %v %v", fields, stages)
			}
			var se *gated.StatusError
			switch {
			case errors.As(u.Err, &se):
				fields = append(fields, se.Field)
			case u.Err != nil:
				t.Fatalf("error %v is not a *gated.StatusError", u.Err)
			default:
				stages = append(stages, u.Status.Stage)
			}
		case <-ctx.Done():
			t.Fatalf("no decided stage: %v %v", fields, stages)
		}
	}
	if !slices.Equal(fields, []string{"", "verdict"}) {
		t.Errorf("errors name fields %q, want the message as a whole, then the missing verdict", fields)
	}
	if want := []gated.StatusStage{gated.StatusReceived, gated.StatusPolicyDecided, gated.StatusDecided}; !slices.Equal(stages, want) {
		t.Errorf("stages %v, want %v", stages, want)
	}
	cancel()
	for range updates { // the channel closes once the watch's context ends
	}
}

func TestWatchRefusesBadTokens(t *testing.T) {
	g := bustest.StartFleet(t, nil, bus.Config{})
	for _, tc := range []struct{ note, tenant, id string }{
		{"tenant wildcard", "*", "p1"},
		{"tenant of all", ">", "p1"},
		{"id with a dot", "acme", "p.1"},
		{"empty id", "acme", ""},
	} {
		t.Run(tc.note, func(t *testing.T) {
			if _, err := g.Client.Watch(t.Context(), tc.tenant, tc.id); !errors.Is(err, fleet.ErrBadProposal) {
				t.Fatalf("got %v, want ErrBadProposal", err)
			}
		})
	}
}

// TestStatusOnAnotherServer: with gated on a server it does not run,
// which cannot tell it who subscribes, a proposal nobody follows sends no
// status, a proposal proposed with a status callback gets every stage,
// and a watch, whose ask gated answers before it returns, sees every
// stage of a proposal another client proposes after it. The test's own
// listener on gated.status.> counts what gated sent: gated's statuses
// come in the order it published them, so once the followed proposal's
// decided status is in, a status of the quiet one would have been too.
func TestStatusOnAnotherServer(t *testing.T) {
	s := bustest.Server(t)
	g := bustest.StartGatedOn(t, s.ClientURL())
	proposer, err := fleet.NewClient(g.NC)
	if err != nil {
		t.Fatal(err)
	}
	nc, _ := bustest.Connect(t, s)
	heard := make(chan *nats.Msg, 64)
	if _, err := nc.ChanSubscribe("gated.status.>", heard); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := proposer.Propose(ctx, typed("s-quiet", "host_list_services", gated.ClassRead)); err != nil {
		t.Fatal(err)
	}
	var stages []gated.StatusStage
	if _, err := proposer.ProposeWith(ctx, typed("s-followed", "host_list_services", gated.ClassRead), fleet.WithStatus(func(u fleet.StatusUpdate) {
		if u.Status != nil {
			stages = append(stages, u.Status.Stage)
		}
	})); err != nil {
		t.Fatal(err)
	}
	want := []gated.StatusStage{gated.StatusReceived, gated.StatusPolicyDecided, gated.StatusDecided}
	if !slices.Equal(stages, want) {
		t.Fatalf("the status callback got %v, want %v", stages, want)
	}
	var subjects []string
	for len(subjects) < len(want) {
		select {
		case m := <-heard:
			subjects = append(subjects, m.Subject)
		case <-ctx.Done():
			t.Fatalf("the listener heard %v", subjects)
		}
	}
	for _, subject := range subjects {
		if subject != wire.StatusSubject("acme", "s-followed") {
			t.Fatalf("the listener heard %v: a status of a proposal nobody followed was sent", subjects)
		}
	}

	watcher, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	updates, err := watcher.Watch(ctx, "acme", "s-watched")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proposer.Propose(ctx, typed("s-watched", "host_list_services", gated.ClassRead)); err != nil {
		t.Fatal(err)
	}
	stages = nil
	for len(stages) < len(want) {
		select {
		case u := <-updates:
			if u.Err != nil {
				t.Fatal(u.Err)
			}
			stages = append(stages, u.Status.Stage)
		case <-ctx.Done():
			t.Fatalf("the watch saw %v", stages)
		}
	}
	if !slices.Equal(stages, want) {
		t.Fatalf("the watch saw %v, want %v", stages, want)
	}
}
