package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/personas"
)

// The run tests check section 5 of the run review design: gated's record
// of a run's rounds, the replacement of a held verdict, and the follow-ups
// (continuations, escalations) that a rejected run gets exactly once.

var runEpoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// runVerdict is the verdict on round of run runID that proposal id got:
// a rejection that sends next, or an approval when next is empty.
func runVerdict(id, runID string, round int, next string) *engine.Verdict {
	v := &engine.Verdict{
		V: engine.SchemaVersion, ProposalID: id, Tenant: "acme", Action: "run_review", Kind: engine.KindRun,
		Outcome: engine.OutcomeRejected, Stage: engine.StageReview, Reason: "go test ./... fails",
		DecidedAt: runEpoch.Add(time.Duration(round) * time.Minute), AuditSeq: uint64(100 + round),
		ProposalSHA256: fmt.Sprintf("%064d", round),
		Run: &engine.RunVerdict{
			RunID: runID, TaskID: "task-7", Worker: "coder-1", Round: round, MaxRounds: 3,
			Criteria: []engine.CriterionEval{
				{ID: "tests", Pass: false, Reason: `"go test ./..." exited 1, expected 0`, Kind: engine.CriterionCommandResult, Required: true, JudgedBy: engine.JudgedByPolicy},
				{ID: "lint", Pass: true, Kind: engine.CriterionCommandResult, JudgedBy: engine.JudgedByPolicy},
			},
			MissingWork:       []string{"make go test ./... pass"},
			NextRoundGuidance: "fix the failing test first",
			Findings:          []engine.Finding{{ID: fmt.Sprintf("r%d-f1", round), Body: "make go test ./... pass", Criterion: "tests"}},
			Next:              next,
		},
	}
	switch next {
	case engine.NextContinuation:
		v.Run.FollowUpSubject = wire.ContinuationSubject("acme", runID)
	case engine.NextEscalation:
		v.Run.FollowUpSubject = wire.EscalationSubject("acme")
	case "":
		v.Outcome, v.Approved, v.Reason = engine.OutcomeApproved, true, "every criterion passes"
		v.Run.MissingWork, v.Run.Findings, v.Run.NextRoundGuidance = nil, nil, ""
	}
	return v
}

// runStore is a verdict store on a fresh server, with its resources.
func runStore(t *testing.T) (*store.Verdicts, *bus.Resources, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	s := bustest.Server(t)
	nc, js := bustest.Connect(t, s)
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return store.New(res.Verdicts), res, nc, js
}

func mustCreate(t *testing.T, store *store.Verdicts, v *engine.Verdict) {
	t.Helper()
	if _, err := store.Create(t.Context(), v); err != nil {
		t.Fatalf("storing verdict %s: %v", v.ProposalID, err)
	}
}

func record(t *testing.T, store *store.Verdicts, runID string) *engine.RunRecord {
	t.Helper()
	rec, err := store.RunRecord(t.Context(), "acme", runID)
	if err != nil {
		t.Fatalf("run record %s: %v", runID, err)
	}
	return rec
}

// rounds renders a record's rounds as "<round>:<proposal>:<next>[:sent]".
func rounds(rec *engine.RunRecord) []string {
	if rec == nil {
		return nil
	}
	var out []string
	for _, r := range rec.Rounds {
		s := fmt.Sprintf("%d:%s:%s", r.Round, r.ProposalID, r.Next)
		if r.Sent {
			s += ":sent"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func TestSetupCreatesTheRunStream(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	tests := []struct {
		note       string
		cfg        bus.Config
		maxAge     time.Duration
		duplicates time.Duration
	}{
		{note: "defaults", cfg: bus.Config{}, maxAge: 7 * 24 * time.Hour, duplicates: time.Hour},
		{note: "follow-ups live as long as verdicts", cfg: bus.Config{VerdictTTL: 48 * time.Hour}, maxAge: 48 * time.Hour, duplicates: time.Hour},
		{note: "a short TTL cuts the duplicate window", cfg: bus.Config{VerdictTTL: 30 * time.Minute}, maxAge: 30 * time.Minute, duplicates: 30 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			res, err := bus.Setup(t.Context(), js, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			info, err := res.Runs.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			c := info.Config
			if c.Name != wire.RunsStream || !slices.Equal(c.Subjects, []string{"gated.continuations.>", "gated.escalations.>"}) {
				t.Fatalf("stream %s on %v", c.Name, c.Subjects)
			}
			if c.Retention != jetstream.LimitsPolicy || c.Storage != jetstream.FileStorage || c.Replicas != 1 {
				t.Errorf("retention %v, storage %v, replicas %d; want limits on file, 1 replica", c.Retention, c.Storage, c.Replicas)
			}
			if c.MaxAge != tc.maxAge || c.Duplicates != tc.duplicates {
				t.Errorf("max age %s, duplicate window %s; want %s, %s", c.MaxAge, c.Duplicates, tc.maxAge, tc.duplicates)
			}
		})
	}
}

func TestRunRecordKeepsDecidedRounds(t *testing.T) {
	store, _, _, _ := runStore(t)
	if rec := record(t, store, "run1"); rec != nil {
		t.Fatalf("record of a run never decided: %+v, want none", rec)
	}
	blocked := runVerdict("b1", "run1", 1, "")
	blocked.Outcome, blocked.Approved = engine.OutcomeBlocked, false
	quiet := runVerdict("n1", "run1", 1, "")
	quiet.Outcome, quiet.Approved = engine.OutcomeRejected, false
	steps := []struct {
		note   string
		v      *engine.Verdict
		rounds []string
		closed string
	}{
		{note: "a blocked round is not recorded", v: blocked},
		{note: "an action verdict is not recorded", v: &engine.Verdict{V: 1, ProposalID: "a1", Tenant: "acme", Outcome: engine.OutcomeApproved, Approved: true}},
		{note: "a rejection that sends nothing is not recorded", v: quiet},
		{note: "a continuation is recorded", v: runVerdict("p1", "run1", 1, engine.NextContinuation), rounds: []string{"1:p1:continuation"}},
		{note: "another proposal of a decided round is left out", v: runVerdict("p1b", "run1", 1, engine.NextContinuation), rounds: []string{"1:p1:continuation"}},
		{note: "the next round", v: runVerdict("p2", "run1", 2, engine.NextContinuation), rounds: []string{"1:p1:continuation", "2:p2:continuation"}},
		{note: "an approval closes the run", v: runVerdict("p3", "run1", 3, ""), rounds: []string{"1:p1:continuation", "2:p2:continuation", "3:p3:"}, closed: engine.RunAccepted},
	}
	for _, st := range steps {
		t.Run(st.note, func(t *testing.T) {
			mustCreate(t, store, st.v)
			rec := record(t, store, "run1")
			if got := rounds(rec); !slices.Equal(got, st.rounds) {
				t.Fatalf("rounds %v, want %v", got, st.rounds)
			}
			if rec != nil && (rec.Tenant != "acme" || rec.RunID != "run1" || rec.TaskID != "task-7" || rec.Closed != st.closed) {
				t.Fatalf("record %s.%s task %q closed %q, want acme.run1 task-7 closed %q", rec.Tenant, rec.RunID, rec.TaskID, rec.Closed, st.closed)
			}
		})
	}

	mustCreate(t, store, runVerdict("e1", "run2", 3, engine.NextEscalation))
	if rec := record(t, store, "run2"); rec.Closed != engine.RunEscalated || !slices.Equal(rounds(rec), []string{"3:e1:escalation"}) {
		t.Fatalf("escalated run: %+v", rec)
	}

	// Run records share the bucket with verdicts, target histories and
	// claims, and collide with none, whatever the ids are called.
	for _, id := range []string{"runs", "run1", "claims", "targets"} {
		mustCreate(t, store, runVerdict(id, id, 1, engine.NextContinuation))
		if _, err := store.Claim(t.Context(), "acme", id, engine.Claim{Holder: "seq:1", Until: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if got, err := store.Get(t.Context(), "acme", id); err != nil || got.ProposalID != id || got.Run == nil {
			t.Fatalf("verdict %s beside its run record: %+v, %v", id, got, err)
		}
		if rec := record(t, store, id); id != "run1" && !slices.Equal(rounds(rec), []string{"1:" + id + ":continuation"}) {
			t.Fatalf("run record %s: %v", id, rounds(rec))
		}
	}
	if rec := record(t, store, "run1"); len(rec.Rounds) != 3 || rec.Closed != engine.RunAccepted {
		t.Fatalf("run1 changed under a verdict named run1: %v closed %q", rounds(rec), rec.Closed)
	}
}

func TestRunRecordUnderConcurrentVerdicts(t *testing.T) {
	store, _, _, _ := runStore(t)
	for i := range 10 {
		// Two gated processes decide rounds of one run at once: both
		// rounds must land, neither overwriting the other.
		runID := fmt.Sprintf("race%d", i)
		var wg sync.WaitGroup
		for round := 1; round <= 2; round++ {
			wg.Go(func() {
				if _, err := store.Create(t.Context(), runVerdict(fmt.Sprintf("%s-r%d", runID, round), runID, round, engine.NextContinuation)); err != nil {
					t.Errorf("round %d: %v", round, err)
				}
			})
		}
		wg.Wait()
		want := []string{"1:" + runID + "-r1:continuation", "2:" + runID + "-r2:continuation"}
		if got := rounds(record(t, store, runID)); !slices.Equal(got, want) {
			t.Fatalf("rounds %v, want %v", got, want)
		}

		// Two proposals of the same round at once: one holds it.
		sameID := fmt.Sprintf("same%d", i)
		for _, id := range []string{"x", "y"} {
			wg.Go(func() {
				if _, err := store.Create(t.Context(), runVerdict(sameID+id, sameID, 1, engine.NextContinuation)); err != nil {
					t.Errorf("proposal %s: %v", id, err)
				}
			})
		}
		wg.Wait()
		rec := record(t, store, sameID)
		if len(rec.Rounds) != 1 || (rec.Rounds[0].ProposalID != sameID+"x" && rec.Rounds[0].ProposalID != sameID+"y") {
			t.Fatalf("round decided twice at once: %v", rounds(rec))
		}
	}
}

// held is a verdict blocked for an operator: not recorded in its run.
func held(id, runID string) *engine.Verdict {
	v := runVerdict(id, runID, 1, "")
	v.Outcome, v.Approved, v.Reason = engine.OutcomeBlocked, false, "awaiting an operator on manual criterion ux"
	v.Run.AwaitingOperator = []string{"ux"}
	return v
}

// decided is the operator's replacement of prev.
func decided(prev *engine.Verdict, next string, seq uint64) *engine.Verdict {
	v := runVerdict(prev.ProposalID, prev.Run.RunID, prev.Run.Round, next)
	v.Stage, v.AuditSeq = engine.StageOperator, seq
	return v
}

func TestReplaceSwapsOnlyTheVerdictItRead(t *testing.T) {
	store, _, _, _ := runStore(t)
	ctx := t.Context()
	if _, err := store.Replace(ctx, held("none", "run0"), decided(held("none", "run0"), "", 200)); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("Replace of a verdict never stored: err = %v, want ErrNotFound", err)
	}

	prev := held("h1", "run1")
	mustCreate(t, store, prev)
	if rec := record(t, store, "run1"); rec != nil {
		t.Fatalf("a held verdict was recorded: %v", rounds(rec))
	}
	next := decided(prev, "", 201)
	got, err := store.Replace(ctx, prev, next)
	if err != nil || got.AuditSeq != 201 {
		t.Fatalf("Replace: %+v, %v", got, err)
	}
	if stored, err := store.Get(ctx, "acme", "h1"); err != nil || !stored.Approved || stored.Stage != engine.StageOperator || stored.AuditSeq != 201 {
		t.Fatalf("stored after Replace: %+v, %v", stored, err)
	}
	if rec := record(t, store, "run1"); rec.Closed != engine.RunAccepted || !slices.Equal(rounds(rec), []string{"1:h1:"}) {
		t.Fatalf("record after the approval replaced the held verdict: %v closed %q", rounds(rec), rec.Closed)
	}

	// A second decision on the verdict the first one replaced loses, and
	// is told what stands.
	late := decided(prev, engine.NextContinuation, 202)
	got, err = store.Replace(ctx, prev, late)
	if !errors.Is(err, engine.ErrExists) || got == nil || got.AuditSeq != 201 {
		t.Fatalf("Replace of a replaced verdict: %+v, %v; want the standing verdict (audit_seq 201) and ErrExists", got, err)
	}
	if rec := record(t, store, "run1"); len(rec.Rounds) != 1 {
		t.Fatalf("the losing replacement touched the record: %v", rounds(rec))
	}

	if _, err := store.Replace(ctx, prev, runVerdict("other", "run1", 1, "")); err == nil || errors.Is(err, engine.ErrExists) {
		t.Fatalf("Replace under another proposal's key: err = %v, want a refusal", err)
	}

	// Two operators decide at once: one replacement wins, the other gets
	// the winner's verdict.
	for i := range 10 {
		id := fmt.Sprintf("race%d", i)
		prev := held(id, "run-"+id)
		mustCreate(t, store, prev)
		type result struct {
			v   *engine.Verdict
			err error
		}
		results := make(chan result, 2)
		for _, c := range []struct {
			next string
			seq  uint64
		}{{"", 300}, {engine.NextContinuation, 301}} {
			go func() {
				v, err := store.Replace(ctx, prev, decided(prev, c.next, c.seq))
				results <- result{v, err}
			}()
		}
		a, b := <-results, <-results
		if (a.err == nil) == (b.err == nil) {
			t.Fatalf("two replacements of one verdict: errors %v and %v, want exactly one to win", a.err, b.err)
		}
		won, lost := a, b
		if a.err != nil {
			won, lost = b, a
		}
		if !errors.Is(lost.err, engine.ErrExists) || lost.v.AuditSeq != won.v.AuditSeq {
			t.Fatalf("loser got %+v, %v; want the winner's verdict (audit_seq %d) and ErrExists", lost.v, lost.err, won.v.AuditSeq)
		}
		stored, err := store.Get(ctx, "acme", id)
		if err != nil || stored.AuditSeq != won.v.AuditSeq {
			t.Fatalf("stored %+v, %v; want the winner's", stored, err)
		}
		if rec := record(t, store, "run-"+id); len(rec.Rounds) != 1 || rec.Rounds[0].Next != won.v.Run.Next {
			t.Fatalf("record %v, want the winner's round only", rounds(rec))
		}
	}
}

// streamed returns the messages of the run stream on subject, oldest first.
func streamed(t *testing.T, res *bus.Resources, subject string) []*jetstream.RawStreamMsg {
	t.Helper()
	info, err := res.Runs.Info(t.Context(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Subjects[subject] == 0 {
		return nil
	}
	var msgs []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := res.Runs.GetMsg(t.Context(), seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject == subject {
			msgs = append(msgs, m)
		}
	}
	return msgs
}

func TestFollowUpIsSentOnce(t *testing.T) {
	store, res, _, js := runStore(t)
	ctx := t.Context()
	fu := bus.NewFollowUps(js, store)
	contSubject := wire.ContinuationSubject("acme", "run1")

	v := runVerdict("p1", "run1", 1, engine.NextContinuation)
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
	subject, msgID, body, _ := engine.FollowUp(v)
	if msgs[0].Subject != subject || msgs[0].Header.Get(jetstream.MsgIDHeader) != msgID || string(msgs[0].Data) != string(body) {
		t.Fatalf("stored %s (msg id %q): %s\nwant     %s (msg id %q): %s", msgs[0].Subject, msgs[0].Header.Get(jetstream.MsgIDHeader), msgs[0].Data, subject, msgID, body)
	}
	if got := rounds(record(t, store, "run1")); !slices.Equal(got, []string{"1:p1:continuation:sent"}) {
		t.Fatalf("rounds %v, want round 1 marked sent", got)
	}

	// Another proposal of round 1 (a retry the fleet sent under a new id)
	// was rejected too: the round has its follow-up already.
	other := runVerdict("p1b", "run1", 1, engine.NextContinuation)
	other.AuditSeq = 999
	mustCreate(t, store, other)
	if err := fu.Send(ctx, other); err != nil {
		t.Fatal(err)
	}
	if n := len(streamed(t, res, contSubject)); n != 1 {
		t.Fatalf("%d continuations after another proposal of round 1, want 1", n)
	}

	// A verdict that sends nothing publishes nothing.
	approved := runVerdict("p2", "run1", 2, "")
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
	if err := fu.Send(ctx, &engine.Verdict{V: 1, ProposalID: "act1", Tenant: "acme", Outcome: engine.OutcomeRejected}); err != nil {
		t.Fatalf("Send of an action verdict: %v", err)
	}
}

func TestFollowUpReplayAfterACrash(t *testing.T) {
	store, res, _, js := runStore(t)
	ctx := t.Context()
	fu := bus.NewFollowUps(js, store)

	// A gated published the continuation and died before marking the
	// round sent.
	v := runVerdict("p1", "run1", 1, engine.NextContinuation)
	mustCreate(t, store, v)
	subject, msgID, body, _ := engine.FollowUp(v)
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
	esc := runVerdict("p3", "run9", 3, engine.NextEscalation)
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
	if rec := record(t, store, "run9"); rec.Closed != engine.RunEscalated || !slices.Equal(rounds(rec), []string{"3:p3:escalation:sent"}) {
		t.Fatalf("record after the replay: %v closed %q", rounds(rec), rec.Closed)
	}
}

func TestFollowUpFeeds(t *testing.T) {
	store, _, nc, js := runStore(t)
	ctx := t.Context()
	fu := bus.NewFollowUps(js, store)
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

	send := func(v *engine.Verdict) {
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
	send(runVerdict("p1", "run1", 1, engine.NextContinuation))
	send(runVerdict("q1", "run2", 1, engine.NextContinuation)) // another run: not in run1's feed
	// Something that is not a continuation lands on run1's subject.
	if _, err := js.Publish(ctx, wire.ContinuationSubject("acme", "run1"), []byte(`{"v":1,"tenant":"acme","run_id":"run1","round":2,"surprise":true}`)); err != nil {
		t.Fatal(err)
	}
	send(runVerdict("p2", "run1", 2, engine.NextContinuation))
	send(runVerdict("p3", "run1", 3, engine.NextEscalation))

	var got []*engine.Continuation
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

	var esc *engine.Escalation
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

// runDecider decides every proposal as make says, storing the verdict as
// the engine does (the first stored wins) and replaying it afterwards.
type runDecider struct {
	store   engine.VerdictStore
	make    func(id string) *engine.Verdict
	decided atomic.Int32
}

func (r *runDecider) Decide(ctx context.Context, d engine.Delivery) (*engine.Verdict, error) {
	a, err := fleet.AddressOf(d.Data)
	if err != nil {
		return nil, err
	}
	if stored, err := r.store.Get(ctx, a.Tenant, a.ID); err == nil {
		return stored, nil
	}
	r.decided.Add(1)
	stored, err := r.store.Create(ctx, r.make(a.ID))
	if errors.Is(err, engine.ErrExists) {
		return stored, nil
	}
	return stored, err
}

func (r *runDecider) GiveUp(ctx context.Context, d engine.Delivery, cause error) *engine.Verdict {
	a, _ := fleet.AddressOf(d.Data)
	if stored, err := r.store.Get(ctx, a.Tenant, a.ID); err == nil {
		return stored
	}
	return &engine.Verdict{V: 1, ProposalID: a.ID, Tenant: a.Tenant, Outcome: engine.OutcomeError, Reason: cause.Error()}
}

// runIntake is an intake whose worker decides every proposal id as round
// 1 of run "run-<id>", rejected with a continuation.
func runIntake(t *testing.T, cfg bus.Config) (*intake, *runDecider) {
	t.Helper()
	in := newIntake(t, cfg)
	rd := &runDecider{store: store.New(in.res.Verdicts), make: func(id string) *engine.Verdict {
		return runVerdict(id, "run-"+id, 1, engine.NextContinuation)
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
		var v engine.Verdict
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
	in.startWorker(t, workerOptions{nc: workerNC, publish: publish, wrap: func(bus.Decider) bus.Decider { return seen }})
	verdicts := in.verdicts(t, "w1")
	in.publish(t, proposal("w1", "read", "host_list_services", ""), "acme.w1")

	// The failed publish left the proposal unacknowledged; the redelivery
	// replays the verdict and sends no second continuation.
	v := receive(t, verdicts, "the verdict")
	if v.Run == nil || v.Run.Next != engine.NextContinuation {
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
			followUp := func(send bus.FollowUpSender) bus.FollowUpSender {
				return func(ctx context.Context, v *engine.Verdict) error {
					if published.Load() {
						t.Errorf("follow-up sent after the verdict was published")
					}
					if sends.Add(1) > 1 {
						return send(ctx, v)
					}
					if tc.publishFirst {
						subject, msgID, body, _ := engine.FollowUp(v)
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
			in.startWorker(t, workerOptions{nc: workerNC, publish: publish, followUp: followUp, wrap: func(bus.Decider) bus.Decider { return rd }})
			verdicts := in.verdicts(t, "f1")
			in.publish(t, proposal("f1", "read", "host_list_services", ""), "acme.f1")

			if v := receive(t, verdicts, "the verdict"); v.Run == nil || v.Run.Next != engine.NextContinuation {
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
	in.publish(t, proposal("gone1", "read", "host_list_services", ""), "acme.gone1")
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
	in.startWorker(t, workerOptions{wrap: func(bus.Decider) bus.Decider { return seen }})
	if v := receive(t, verdicts, "the stored verdict"); v.Run == nil || v.Run.Next != engine.NextContinuation {
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
		Denies: []engine.Deny{{Rule: "criterion_failed", Message: "required criterion tests failed: " + why}},
		Review: engine.Route{Required: true, Persona: "run-reviewer", Quorum: 1, Why: "runs are reviewed"},
		Run: &engine.RunPolicy{
			Reviewed: true, ReviewPolicy: "always", MaxRounds: 2, Continuable: true,
			Criteria:    []engine.CriterionEval{{ID: "tests", Pass: false, Reason: why}},
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
	in.startWorker(t, workerOptions{wrap: func(bus.Decider) bus.Decider {
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
	if first.Outcome != engine.OutcomeRejected || first.Run == nil || first.Run.Next != engine.NextContinuation {
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
	if last.Run == nil || last.Run.Next != engine.NextEscalation {
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
	if got := rounds(rec); !slices.Equal(got, []string{"1:e1:continuation:sent", "2:e2:escalation:sent"}) || rec.Closed != engine.RunEscalated {
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
	fu := bus.NewFollowUps(gjs, store)
	for _, v := range []*engine.Verdict{
		runVerdict("p1", "run1", 1, engine.NextContinuation),
		runVerdict("p3", "run1", 3, engine.NextEscalation),
	} {
		mustCreate(t, store, v)
		if err := fu.Send(t.Context(), v); err != nil {
			t.Fatal(err)
		}
	}
	globex := runVerdict("g1", "run1", 3, engine.NextEscalation)
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
