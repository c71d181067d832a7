package intake_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
)

// The run tests check section 5 of the run review design: gated's record
// of a run's rounds, the replacement of a held verdict, and the follow-ups
// (continuations, escalations) that a rejected run gets exactly once.

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

func mustCreate(t *testing.T, store *store.Verdicts, v *gated.Verdict) {
	t.Helper()
	if _, err := store.Create(t.Context(), v); err != nil {
		t.Fatalf("storing verdict %s: %v", v.ProposalID, err)
	}
}

func record(t *testing.T, store *store.Verdicts, runID string) *gated.RunRecord {
	t.Helper()
	rec, err := store.RunRecord(t.Context(), "acme", runID)
	if err != nil {
		t.Fatalf("run record %s: %v", runID, err)
	}
	return rec
}

// rounds renders a record's rounds as "<round>:<proposal>:<next>[:sent]".
func rounds(rec *gated.RunRecord) []string {
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

func TestRunRecordKeepsDecidedRounds(t *testing.T) {
	store, _, _, _ := runStore(t)
	if rec := record(t, store, "run1"); rec != nil {
		t.Fatalf("record of a run never decided: %+v, want none", rec)
	}
	blocked := bustest.RunVerdict("b1", "run1", 1, "")
	blocked.Outcome, blocked.Approved = gated.OutcomeBlocked, false
	quiet := bustest.RunVerdict("n1", "run1", 1, "")
	quiet.Outcome, quiet.Approved = gated.OutcomeRejected, false
	steps := []struct {
		note   string
		v      *gated.Verdict
		rounds []string
		closed string
	}{
		{note: "a blocked round is not recorded", v: blocked},
		{note: "an action verdict is not recorded", v: &gated.Verdict{V: 1, ProposalID: "a1", Tenant: "acme", Outcome: gated.OutcomeApproved, Approved: true}},
		{note: "a rejection that sends nothing is not recorded", v: quiet},
		{note: "a continuation is recorded", v: bustest.RunVerdict("p1", "run1", 1, gated.NextContinuation), rounds: []string{"1:p1:continuation"}},
		{note: "another proposal of a decided round is left out", v: bustest.RunVerdict("p1b", "run1", 1, gated.NextContinuation), rounds: []string{"1:p1:continuation"}},
		{note: "the next round", v: bustest.RunVerdict("p2", "run1", 2, gated.NextContinuation), rounds: []string{"1:p1:continuation", "2:p2:continuation"}},
		{note: "an approval closes the run", v: bustest.RunVerdict("p3", "run1", 3, ""), rounds: []string{"1:p1:continuation", "2:p2:continuation", "3:p3:"}, closed: gated.RunAccepted},
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

	mustCreate(t, store, bustest.RunVerdict("e1", "run2", 3, gated.NextEscalation))
	if rec := record(t, store, "run2"); rec.Closed != gated.RunEscalated || !slices.Equal(rounds(rec), []string{"3:e1:escalation"}) {
		t.Fatalf("escalated run: %+v", rec)
	}

	// Run records share the bucket with verdicts, target histories and
	// claims, and collide with none, whatever the ids are called.
	for _, id := range []string{"runs", "run1", "claims", "targets"} {
		mustCreate(t, store, bustest.RunVerdict(id, id, 1, gated.NextContinuation))
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
	if rec := record(t, store, "run1"); len(rec.Rounds) != 3 || rec.Closed != gated.RunAccepted {
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
				if _, err := store.Create(t.Context(), bustest.RunVerdict(fmt.Sprintf("%s-r%d", runID, round), runID, round, gated.NextContinuation)); err != nil {
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
				if _, err := store.Create(t.Context(), bustest.RunVerdict(sameID+id, sameID, 1, gated.NextContinuation)); err != nil {
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
func held(id, runID string) *gated.Verdict {
	v := bustest.RunVerdict(id, runID, 1, "")
	v.Outcome, v.Approved, v.Reason = gated.OutcomeBlocked, false, "awaiting an operator on manual criterion ux"
	v.Run.AwaitingOperator = []string{"ux"}
	return v
}

// decided is the operator's replacement of prev.
func decided(prev *gated.Verdict, next string, seq uint64) *gated.Verdict {
	v := bustest.RunVerdict(prev.ProposalID, prev.Run.RunID, prev.Run.Round, next)
	v.Stage, v.AuditSeq = gated.StageOperator, seq
	return v
}

func TestReplaceSwapsOnlyTheVerdictItRead(t *testing.T) {
	store, _, _, _ := runStore(t)
	ctx := t.Context()
	if _, err := store.Replace(ctx, held("none", "run0"), decided(held("none", "run0"), "", 200)); !errors.Is(err, gated.ErrNotFound) {
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
	if stored, err := store.Get(ctx, "acme", "h1"); err != nil || !stored.Approved || stored.Stage != gated.StageOperator || stored.AuditSeq != 201 {
		t.Fatalf("stored after Replace: %+v, %v", stored, err)
	}
	if rec := record(t, store, "run1"); rec.Closed != gated.RunAccepted || !slices.Equal(rounds(rec), []string{"1:h1:"}) {
		t.Fatalf("record after the approval replaced the held verdict: %v closed %q", rounds(rec), rec.Closed)
	}

	// A second decision on the verdict the first one replaced loses, and
	// is told what stands.
	late := decided(prev, gated.NextContinuation, 202)
	got, err = store.Replace(ctx, prev, late)
	if !errors.Is(err, gated.ErrExists) || got == nil || got.AuditSeq != 201 {
		t.Fatalf("Replace of a replaced verdict: %+v, %v; want the standing verdict (audit_seq 201) and ErrExists", got, err)
	}
	if rec := record(t, store, "run1"); len(rec.Rounds) != 1 {
		t.Fatalf("the losing replacement touched the record: %v", rounds(rec))
	}

	if _, err := store.Replace(ctx, prev, bustest.RunVerdict("other", "run1", 1, "")); err == nil || errors.Is(err, gated.ErrExists) {
		t.Fatalf("Replace under another proposal's key: err = %v, want a refusal", err)
	}

	// Two operators decide at once: one replacement wins, the other gets
	// the winner's verdict.
	for i := range 10 {
		id := fmt.Sprintf("race%d", i)
		prev := held(id, "run-"+id)
		mustCreate(t, store, prev)
		type result struct {
			v   *gated.Verdict
			err error
		}
		results := make(chan result, 2)
		for _, c := range []struct {
			next string
			seq  uint64
		}{{"", 300}, {gated.NextContinuation, 301}} {
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
		if !errors.Is(lost.err, gated.ErrExists) || lost.v.AuditSeq != won.v.AuditSeq {
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
