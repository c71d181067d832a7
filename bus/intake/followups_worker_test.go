package intake_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/personas"
)

// runDecider decides every proposal as make says, storing the verdict as
// the engine does (the first stored wins) and replaying it afterwards.
type runDecider struct {
	store   engine.VerdictStore
	make    func(id string) *gated.Verdict
	decided atomic.Int32
}

func (r *runDecider) Decide(ctx context.Context, d engine.Delivery) (*gated.Verdict, error) {
	a, err := fleet.AddressOf(d.Data)
	if err != nil {
		return nil, err
	}
	if stored, err := r.store.Get(ctx, a.Tenant, a.ID); err == nil {
		return stored, nil
	}
	r.decided.Add(1)
	stored, err := r.store.Create(ctx, r.make(a.ID))
	if errors.Is(err, gated.ErrExists) {
		return stored, nil
	}
	return stored, err
}

func (r *runDecider) GiveUp(ctx context.Context, d engine.Delivery, cause error) *gated.Verdict {
	a, _ := fleet.AddressOf(d.Data)
	if stored, err := r.store.Get(ctx, a.Tenant, a.ID); err == nil {
		return stored
	}
	return &gated.Verdict{V: 1, ProposalID: a.ID, Tenant: a.Tenant, Outcome: gated.OutcomeError, Reason: cause.Error()}
}

// runIntake is a rig whose worker decides every proposal id as round
// 1 of run "run-<id>", rejected with a continuation.
func runIntake(t *testing.T, cfg bus.Config) (*rig, *runDecider) {
	t.Helper()
	in := newIntake(t, cfg)
	rd := &runDecider{store: store.New(in.res.Verdicts), make: func(id string) *gated.Verdict {
		return bustest.RunVerdict(id, "run-"+id, 1, gated.NextContinuation)
	}}
	return in, rd
}

func TestWorkerStoresTheFollowUpBeforeAnswering(t *testing.T) {
	in, rd := runIntake(t, bus.Config{})
	workerNC, _ := bustest.Connect(t, in.srv)
	store := store.New(in.res.Verdicts)
	var publishes atomic.Int32
	publish := func(subject string, data []byte) error {
		// When the verdict goes out, its continuation is in the run
		// stream, its round is marked sent, and the proposal is still
		// unacknowledged.
		var v gated.Verdict
		if err := json.Unmarshal(data, &v); err != nil {
			t.Errorf("publishing a verdict that is not JSON: %v", err)
		}
		if n := len(streamed(t, in.res, wire.ContinuationSubject("acme", "run-"+v.ProposalID))); n != 1 {
			t.Errorf("verdict published with %d continuations stored, want 1", n)
		}
		if rec, err := store.RunRecord(context.Background(), "acme", "run-"+v.ProposalID); err != nil || !slices.Equal(rounds(rec), []string{"1:" + v.ProposalID + ":continuation:sent"}) {
			t.Errorf("verdict published with the round recorded as %v (%v)", rounds(rec), err)
		}
		if info, err := in.res.Proposals.Info(context.Background()); err != nil || info.State.Msgs != 1 {
			t.Errorf("the proposal left the stream before its verdict was published (%v)", err)
		}
		if publishes.Add(1) == 1 {
			return errors.New("injected publish failure")
		}
		return workerNC.Publish(subject, data)
	}
	seen := &deliveries{Decider: rd}
	in.startWorker(t, workerOptions{nc: workerNC, publish: publish, wrap: func(intake.Decider) intake.Decider { return seen }})
	verdicts := in.verdicts(t, "w1")
	in.publish(t, bustest.Proposal("w1", "read", "host_list_services", ""), "acme.w1")

	// The failed publish left the proposal unacknowledged; the redelivery
	// replays the verdict and sends no second continuation.
	v := receive(t, verdicts, "the verdict")
	if v.Run == nil || v.Run.Next != gated.NextContinuation {
		t.Fatalf("verdict %+v", v)
	}
	in.drained(t)
	if got := seen.seen(); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("deliveries %v, want [1 2]", got)
	}
	if n := len(streamed(t, in.res, wire.ContinuationSubject("acme", "run-w1"))); n != 1 || rd.decided.Load() != 1 {
		t.Fatalf("%d continuations from %d decisions, want 1 from 1", n, rd.decided.Load())
	}
}

func TestWorkerRetriesAFailedFollowUp(t *testing.T) {
	tests := []struct {
		note string
		// publishFirst has the failing attempt publish the follow-up, as a
		// gated that died before marking the round sent did.
		publishFirst bool
	}{
		{note: "nothing published"},
		{note: "published, not marked sent", publishFirst: true},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			in, rd := runIntake(t, bus.Config{})
			var sends atomic.Int32
			var published atomic.Bool
			followUp := func(send intake.FollowUpSender) intake.FollowUpSender {
				return func(ctx context.Context, v *gated.Verdict) error {
					if published.Load() {
						t.Errorf("follow-up sent after the verdict was published")
					}
					if sends.Add(1) > 1 {
						return send(ctx, v)
					}
					if tc.publishFirst {
						subject, msgID, body, _ := gated.FollowUp(v)
						msg := nats.NewMsg(subject)
						msg.Data, msg.Header = body, nats.Header{jetstream.MsgIDHeader: []string{msgID}}
						if _, err := in.js.PublishMsg(ctx, msg); err != nil {
							t.Error(err)
						}
					}
					return errors.New("injected follow-up failure")
				}
			}
			workerNC, _ := bustest.Connect(t, in.srv)
			publish := func(subject string, data []byte) error {
				published.Store(true)
				return workerNC.Publish(subject, data)
			}
			in.startWorker(t, workerOptions{nc: workerNC, publish: publish, followUp: followUp, wrap: func(intake.Decider) intake.Decider { return rd }})
			verdicts := in.verdicts(t, "f1")
			in.publish(t, bustest.Proposal("f1", "read", "host_list_services", ""), "acme.f1")

			if v := receive(t, verdicts, "the verdict"); v.Run == nil || v.Run.Next != gated.NextContinuation {
				t.Fatalf("verdict %+v", v)
			}
			in.drained(t)
			if n := sends.Load(); n != 2 {
				t.Fatalf("%d follow-up sends, want the failed one and its retry", n)
			}
			if n := len(streamed(t, in.res, wire.ContinuationSubject("acme", "run-f1"))); n != 1 {
				t.Fatalf("%d continuations, want 1", n)
			}
			if got := rounds(record(t, store.New(in.res.Verdicts), "run-f1")); !slices.Equal(got, []string{"1:f1:continuation:sent"}) {
				t.Fatalf("rounds %v", got)
			}
		})
	}
}

func TestAbandonedRunVerdictSendsItsFollowUp(t *testing.T) {
	in, rd := runIntake(t, bus.Config{AckWait: time.Second, MaxDeliver: 2})
	verdicts := in.verdicts(t, "gone1")
	in.publish(t, bustest.Proposal("gone1", "read", "host_list_services", ""), "acme.gone1")
	// A gated decided the first delivery (stored the verdict) and died
	// before sending anything; the next delivery was lost as well.
	for attempt := 1; attempt <= 2; attempt++ {
		m := in.fetch(t)
		if attempt == 1 {
			if _, err := rd.Decide(t.Context(), engine.Delivery{Subject: m.Subject(), Data: m.Data()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The delivery past the budget is answered from the store, follow-up
	// first.
	seen := &deliveries{Decider: rd}
	in.startWorker(t, workerOptions{wrap: func(intake.Decider) intake.Decider { return seen }})
	if v := receive(t, verdicts, "the stored verdict"); v.Run == nil || v.Run.Next != gated.NextContinuation {
		t.Fatalf("verdict %+v", v)
	}
	in.drained(t)
	if got := seen.seen(); len(got) != 0 {
		t.Fatalf("decided again (deliveries %v)", got)
	}
	if n := len(streamed(t, in.res, wire.ContinuationSubject("acme", "run-gone1"))); n != 1 {
		t.Fatalf("%d continuations, want 1", n)
	}
}

// failingCriterion is a policy that judges every run's required
// criterion "tests" failed: a rejection about the work, which continues
// until the run's last round and then escalates.
type failingCriterion struct{}

func (failingCriterion) Revision() string { return "failing-criterion" }

func (failingCriterion) Evaluate(_ context.Context, in engine.PolicyInput) (engine.PolicyDecision, error) {
	const why = `"go test ./..." exited 1, expected 0`
	return engine.PolicyDecision{
		Denies: []gated.Deny{{Rule: "criterion_failed", Message: "required criterion tests failed: " + why}},
		Review: gated.Route{Required: true, Persona: "run-reviewer", Quorum: 1, Why: "runs are reviewed"},
		Run: &gated.RunPolicy{
			Reviewed: true, ReviewPolicy: "always", MaxRounds: 2, Continuable: true,
			Criteria:    []gated.CriterionEval{{ID: "tests", Pass: false, Reason: why}},
			MissingWork: []string{"criterion tests (command_result): " + why},
		},
		Revision: "failing-criterion",
	}, nil
}

func runProposal(id string, round int) []byte {
	return fmt.Appendf(nil, `{"v":1,"id":%q,"tenant":"acme","kind":"run","action":"run_review","class":"write","blast_radius":"single_device",
"requested_by":{"agent":"orchestrator-1"},
"criteria":[{"id":"tests","description":"the test suite passes","required":true,"kind":"command_result","params":{"exit_code":0},"evidence":{"exit_code":1}}],
"run":{"run_id":"run-e","task_id":"t-1","status":"completed","summary":"fixed the bug","round":%d,"worker":"w-3"}}`, id, round)
}

func TestEngineRunVerdictsSendTheirFollowUps(t *testing.T) {
	in := newIntake(t, bus.Config{})
	reg, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	in.startWorker(t, workerOptions{wrap: func(intake.Decider) intake.Decider {
		eng, err := engine.New(engine.Config{Policy: failingCriterion{}, Personas: reg, Router: noPlugins{},
			Store: store.New(in.res.Verdicts)})
		if err != nil {
			t.Fatal(err)
		}
		return eng
	}})
	conts, err := in.client.Continuations(t.Context(), "acme", "run-e")
	if err != nil {
		t.Fatal(err)
	}
	defer conts.Stop()
	escs, err := in.client.Escalations(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	defer escs.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	first, err := in.client.ProposeRaw(ctx, runProposal("e1", 1))
	if err != nil {
		t.Fatal(err)
	}
	if first.Outcome != gated.OutcomeRejected || first.Run == nil || first.Run.Next != gated.NextContinuation {
		t.Fatalf("round 1: %s (%s), run %+v; want a rejection that continues", first.Outcome, first.Reason, first.Run)
	}
	cont, err := conts.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cont.Round != 2 || cont.Review.ProposalID != "e1" || cont.Review.AuditSeq != first.AuditSeq || len(cont.MissingWork) == 0 {
		t.Fatalf("continuation %+v", cont)
	}

	// The same proposal under another message id is replayed: no second
	// continuation.
	verdicts := in.verdicts(t, "e1")
	in.publish(t, runProposal("e1", 1), "acme.e1-again")
	sameVerdict(t, receive(t, verdicts, "the replayed verdict"), first)

	last, err := in.client.ProposeRaw(ctx, runProposal("e2", 2))
	if err != nil {
		t.Fatal(err)
	}
	if last.Run == nil || last.Run.Next != gated.NextEscalation {
		t.Fatalf("round 2 of 2: %s (%s), run %+v; want an escalation", last.Outcome, last.Reason, last.Run)
	}
	esc, err := escs.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if esc.RunID != "run-e" || esc.Rounds != 2 || esc.Review.ProposalID != "e2" {
		t.Fatalf("escalation %+v", esc)
	}
	in.drained(t)
	if n := len(streamed(t, in.res, wire.ContinuationSubject("acme", "run-e"))); n != 1 {
		t.Fatalf("%d continuations, want 1", n)
	}
	rec := record(t, store.New(in.res.Verdicts), "run-e")
	if got := rounds(rec); !slices.Equal(got, []string{"1:e1:continuation:sent", "2:e2:escalation:sent"}) || rec.Closed != gated.RunEscalated {
		t.Fatalf("record %v closed %q", got, rec.Closed)
	}
}

func TestTenantFollowsOnlyItsOwnRuns(t *testing.T) {
	// The rights Continuations and Escalations document for tenant acme,
	// and nothing else.
	acmeRights := &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			"$JS.API.CONSUMER.CREATE.GATED_RUNS.*.gated.continuations.acme.*",
			"$JS.API.CONSUMER.CREATE.GATED_RUNS.*.gated.escalations.acme",
			"$JS.API.CONSUMER.MSG.NEXT.GATED_RUNS.*",
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_acme.>"}},
	}
	s := bustest.ServerWithOptions(t, &server.Options{JetStream: true, StoreDir: t.TempDir(), Users: []*server.User{
		{Username: "gated", Password: "gated-pw"},
		{Username: "acme", Password: "acme-pw", Permissions: acmeRights},
	}})
	gnc, err := nats.Connect(s.ClientURL(), nats.UserInfo("gated", "gated-pw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gnc.Close)
	gjs, err := jetstream.New(gnc)
	if err != nil {
		t.Fatal(err)
	}
	res, err := bus.Setup(t.Context(), gjs, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store := store.New(res.Verdicts)
	fu := intake.NewFollowUps(gjs, store)
	for _, v := range []*gated.Verdict{
		bustest.RunVerdict("p1", "run1", 1, gated.NextContinuation),
		bustest.RunVerdict("p3", "run1", 3, gated.NextEscalation),
	} {
		mustCreate(t, store, v)
		if err := fu.Send(t.Context(), v); err != nil {
			t.Fatal(err)
		}
	}
	globex := bustest.RunVerdict("g1", "run1", 3, gated.NextEscalation)
	globex.Tenant = "globex"
	mustCreate(t, store, globex)
	if err := fu.Send(t.Context(), globex); err != nil {
		t.Fatal(err)
	}

	violations := make(chan error, 8)
	anc, err := nats.Connect(s.ClientURL(), nats.UserInfo("acme", "acme-pw"), nats.CustomInboxPrefix("_INBOX_acme"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case violations <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(anc.Close)
	client, err := fleet.NewClient(anc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conts, err := client.Continuations(ctx, "acme", "run1")
	if err != nil {
		t.Fatalf("acme following its run: %v", err)
	}
	defer conts.Stop()
	if c, err := conts.Next(ctx); err != nil || c.Round != 2 {
		t.Fatalf("acme's continuation: %+v, %v", c, err)
	}
	escs, err := client.Escalations(ctx, "acme")
	if err != nil {
		t.Fatalf("acme following its escalations: %v", err)
	}
	defer escs.Stop()
	if e, err := escs.Next(ctx); err != nil || e.Tenant != "acme" {
		t.Fatalf("acme's escalation: %+v, %v", e, err)
	}
	short, cancelShort := context.WithTimeout(t.Context(), time.Second)
	defer cancelShort()
	if e, err := escs.Next(short); err == nil {
		t.Fatalf("acme's feed carried another escalation: %+v", e)
	}

	for note, follow := range map[string]func(context.Context) error{
		"globex's escalations": func(ctx context.Context) error {
			f, err := client.Escalations(ctx, "globex")
			if err == nil {
				f.Stop()
			}
			return err
		},
		"globex's run": func(ctx context.Context) error {
			f, err := client.Continuations(ctx, "globex", "run1")
			if err == nil {
				f.Stop()
			}
			return err
		},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		if err := follow(ctx); err == nil {
			t.Errorf("acme may follow %s", note)
		}
		cancel()
		if err := receive(t, violations, "the server's permissions violation"); !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("following %s: %v, want a permissions violation", note, err)
		}
	}
}
