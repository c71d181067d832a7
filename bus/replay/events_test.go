package replay

import (
	"strings"
	"testing"

	"github.com/gated/gated"

	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/personas"
)

// TestEveryEventReadsBackThroughReplay writes a record of each event
// gated records, with bus/audit's sample data, and reads it as a replay
// and a re-review do: the batch decoder reads policy.decided and the
// review records into engine's declared types without error, a verdict
// is counted once and read from its declared type, and a re-review takes
// the recorded review's result.
func TestEveryEventReadsBackThroughReplay(t *testing.T) {
	reg, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	eval := bustest.Policy(t)
	var policy *recordedPolicy
	var verdicts []*replayEvent
	for i, name := range gated.AuditEventNames() {
		ev := bustest.AuditEventSample(t, name)
		m, err := audit.NewCompressedRecordMsg([]gated.AuditEvent{ev}, audit.Chain{N: 1}, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b := &replayBatch{entries: []audit.Entry{{Seq: uint64(i + 1), Subject: m.Subject, Header: m.Header, Data: m.Data}}, done: make(chan struct{})}
		b.decode()
		if len(b.items[0]) != 1 {
			t.Fatalf("%s: the batch reads %d events, want 1 (%v)", name, len(b.items[0]), b.entries[0].Err)
		}
		it := b.items[0][0]
		switch name {
		case gated.EventPolicyDecided:
			policy = it.policy
			if policy.Error != "" || policy.Action != "host_restart_service" || policy.Operator != "u-1042" || policy.Input == nil || policy.ShadowRevision != "r2" {
				t.Errorf("%s reads as %+v", name, policy)
			}
		case gated.EventReviewStarted, gated.EventReviewDone:
			if it.review.err != nil {
				t.Errorf("%s: %v", name, it.review.err)
			}
		case gated.EventVerdict:
			verdicts = append(verdicts, it.ev)
		}
	}
	if policy == nil || len(verdicts) != 1 {
		t.Fatalf("policy.decided read %v, %d verdicts", policy != nil, len(verdicts))
	}
	for _, name := range []string{gated.EventReviewStarted, gated.EventReviewDone} {
		policy.addReviewRecord(&replayEvent{Seq: 9, Event: bustest.AuditEventSample(t, name)})
	}
	if policy.reviewErr != "" || len(policy.reviews) != 1 || policy.reviews[0].Finished == nil {
		t.Fatalf("the reviews read as %+v (%s)", policy.reviews, policy.reviewErr)
	}
	rv := policy.reviews[0]
	if cat, why := reviewCategory(rv.Finished), reviewWhy(rv.Finished); cat != "approve" || why != "fine" || rv.Started.Persona != "sre" {
		t.Errorf("a re-review reads the recorded review as %s (%q) of persona %q", cat, why, rv.Started.Persona)
	}
	rep := newReport("")
	rep.verdict(t.Context(), eval, reg, verdicts[0], policy, 1)
	if rep.Verdicts != 1 || rep.Replayed+rep.Unrebuildable != 1 {
		t.Errorf("the verdict is counted %d times, replayed %d, unrebuildable %d: %+v", rep.Verdicts, rep.Replayed, rep.Unrebuildable, rep.UnrebuildableNamed)
	}
	for _, u := range rep.UnrebuildableNamed {
		if u.Why == "" || strings.HasPrefix(u.Why, "the verdict record does not decode") {
			t.Errorf("the verdict is not read: %s", u.Why)
		}
	}
}
