package engine_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// firstCopy decides data as the first delivery of a message (no look-up
// before deciding), with a further trail for what it learns after its
// seal when retrail is set. It returns the verdict, the delivery's trail
// and the further trail (nil when none was opened).
func (h *harness) firstCopy(t *testing.T, data []byte, retrail bool) (*gated.Verdict, *memTrail, *memTrail, error) {
	t.Helper()
	tr := h.stream.trail()
	var further *memTrail
	d := engine.Delivery{Subject: testSubject, Data: data, Attempt: 1, StreamSeq: 7, Trail: tr}
	if retrail {
		d.Retrail = func() engine.AuditTrail {
			if further != nil {
				t.Error("a second further trail was opened")
			}
			further = h.stream.trail()
			return further
		}
	}
	v, err := h.eng.Decide(t.Context(), d)
	return v, tr, further, err
}

// replayedData is the data of a verdict.replayed event.
type replayedData struct {
	AuditSeq      uint64        `json:"audit_seq"`
	Outcome       gated.Outcome `json:"outcome"`
	SupersededSeq uint64        `json:"superseded_seq"`
}

// TestFirstDeliveryOfACopyGetsTheStoredVerdict: a copy of a decided
// proposal delivered as a first delivery (sent again after the stream's
// duplicate window) is decided without a look-up, loses to the stored
// verdict when it stores its own, and is answered with the stored verdict,
// never its own decision, even when its own decision approves and the
// stored one does not. Its sealed trail is followed by a further one that
// says which record the stored verdict superseded.
func TestFirstDeliveryOfACopyGetsTheStoredVerdict(t *testing.T) {
	read := proposalJSON(t, map[string]any{"class": "read", "blast_radius": nil})
	tests := []struct {
		note string
		data []byte
		// edit changes the verdict stored first, when set.
		edit func(*gated.Verdict)
	}{
		{note: "approved by the policy", data: read},
		{note: "invalid", data: proposalJSON(t, map[string]any{"class": "delete"})},
		{note: "approved now, rejected when stored", data: read, edit: func(v *gated.Verdict) {
			v.Outcome, v.Approved, v.Reason, v.Grant = gated.OutcomeRejected, false, "rejected by an earlier policy", ""
		}},
	}
	for _, tc := range tests {
		for _, retrail := range []bool{true, false} {
			name := tc.note
			if !retrail {
				name += ", no further trail"
			}
			t.Run(name, func(t *testing.T) {
				h := newHarness(t)
				first := decidedElsewhere(t, tc.data, tc.edit)
				mustCreate(t, h.store, first)

				v, tr, further, err := h.firstCopy(t, tc.data, retrail)
				if err != nil {
					t.Fatalf("Decide: %v", err)
				}
				sameVerdict(t, v, first)
				if v.Approved != first.Approved || v.Grant != first.Grant || v.AuditSeq != first.AuditSeq {
					t.Errorf("answered approved %v, grant %q, audit_seq %d; want the stored verdict's %v, %q, %d",
						v.Approved, v.Grant, v.AuditSeq, first.Approved, first.Grant, first.AuditSeq)
				}
				sameVerdict(t, h.store.stored(t, "acme", "p1"), first)
				if got := tr.names(); len(got) == 0 || got[len(got)-1] != gated.EventVerdict {
					t.Errorf("the delivery's own trail %v does not end with its own %s", got, gated.EventVerdict)
				}
				if !retrail {
					return
				}
				if further == nil {
					t.Fatal("no further trail says the decision lost to the stored verdict")
				}
				if got := further.names(); !slices.Equal(got, []string{gated.EventReplayed}) {
					t.Fatalf("further trail %v, want [%s]", got, gated.EventReplayed)
				}
				var data replayedData
				if err := json.Unmarshal(further.all()[0].Data, &data); err != nil {
					t.Fatal(err)
				}
				want := replayedData{AuditSeq: first.AuditSeq, Outcome: first.Outcome, SupersededSeq: tr.sealSeq}
				if data != want || data.SupersededSeq == 0 {
					t.Errorf("replayed data %+v, want %+v", data, want)
				}
			})
		}
	}
}

// TestFirstDeliveryOfAReusedIDIsAnsweredInvalid: a different proposal
// under a decided proposal's id, delivered first, loses when it stores its
// verdict: with a further trail it is answered invalid there at once, as a
// redelivery would be, and the store keeps the first proposal's verdict.
func TestFirstDeliveryOfAReusedIDIsAnsweredInvalid(t *testing.T) {
	h := newHarness(t)
	owner := decidedElsewhere(t, otherProposal(t), nil)
	mustCreate(t, h.store, owner)
	mine := proposalJSON(t, map[string]any{"class": "read", "blast_radius": nil})

	v, tr, further, err := h.firstCopy(t, mine, true)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	if further == nil {
		t.Fatal("no further trail was opened")
	}
	h.checkIDReused(t, v, further, mine, []string{gated.EventReceived, gated.EventVerdict}, owner)
	if got := tr.names(); got[len(got)-1] != gated.EventVerdict {
		t.Errorf("the delivery's own trail %v does not end with its own %s", got, gated.EventVerdict)
	}
}

// TestFirstDeliveryLostOnAFailingTrailIsRetried: when the further trail
// of a decision that lost cannot be sealed, the delivery answers nothing
// (an error, to be redelivered), neither its own verdict nor the stored
// one unaudited.
func TestFirstDeliveryLostOnAFailingTrailIsRetried(t *testing.T) {
	h := newHarness(t)
	data := proposalJSON(t, map[string]any{"class": "read", "blast_radius": nil})
	first := decidedElsewhere(t, data, nil)
	mustCreate(t, h.store, first)
	failing := h.stream.trail()
	failing.sealErr = errors.New("audit stream unavailable")
	v, err := h.eng.Decide(t.Context(), engine.Delivery{
		Subject: testSubject, Data: data, Attempt: 1, StreamSeq: 7, Trail: h.stream.trail(),
		Retrail: func() engine.AuditTrail { return failing },
	})
	if err == nil || v != nil {
		t.Fatalf("Decide = %+v, %v; want no verdict and an error", v, err)
	}
	sameVerdict(t, h.store.stored(t, "acme", "p1"), first)
}
