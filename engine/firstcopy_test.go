package engine_test

import (
	"encoding/json"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/grant"
)

// firstCopy decides data sent on subject as the first delivery of a
// message (no look-up before deciding), with a further trail for what it
// learns after its seal when retrail is set. It returns the verdict, the
// delivery's trail and the further trail (nil when none was opened).
func (h *harness) firstCopy(t *testing.T, subject string, data []byte, retrail bool) (*gated.Verdict, *memTrail, *memTrail, error) {
	t.Helper()
	tr := h.stream.trail()
	var further *memTrail
	d := engine.Delivery{Subject: subject, Data: data, Attempt: 1, StreamSeq: 7, Trail: tr}
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

// withCountedGrants gives the harness's engine a grant key ring and
// counts the grants it signs in issued.
func withCountedGrants(t *testing.T, issued *atomic.Int32) func(*harness) {
	return func(h *harness) {
		var ring *grant.Ring
		withGrants(t, &ring)(h)
		g := h.cfg.Grants.(engine.GrantIssuer)
		g.Issued = func(string, grant.Claims) { issued.Add(1) }
		h.cfg.Grants = g
	}
}

// checkNoApprovalLeft checks that a delivery whose own decision approved
// but was not the id's left nothing of that approval: no verdict.decided
// or grant.issued on its trail before the record it ends with, no grant
// signed, no target history joined.
func (h *harness) checkNoApprovalLeft(t *testing.T, tr *memTrail, issued *atomic.Int32) {
	t.Helper()
	got := tr.names()
	for _, name := range got[:len(got)-1] {
		if name == gated.EventVerdict || name == gated.EventGrantIssued {
			t.Errorf("trail %v: the approval that was not the id's left a %s", got, name)
		}
	}
	if n := issued.Load(); n != 0 {
		t.Errorf("%d grants signed for an approval that was not the id's", n)
	}
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	if h.store.joins != 0 {
		t.Errorf("%d approvals joined a target's history; want none", h.store.joins)
	}
	for key, hist := range h.store.targets {
		if len(hist.Verdicts) != 0 {
			t.Errorf("target %s holds %d verdicts; want none", key, len(hist.Verdicts))
		}
	}
}

// replayedData is the data of a verdict.replayed event.
type replayedData struct {
	AuditSeq      uint64        `json:"audit_seq"`
	Outcome       gated.Outcome `json:"outcome"`
	SupersededSeq uint64        `json:"superseded_seq"`
}

// listSubject is the subject of a read the default policy approves
// without review.
const listSubject = "gated.proposals.acme.host_list_services"

// TestFirstDeliveryOfACopyGetsTheStoredVerdict: a copy of a decided
// proposal delivered as a first delivery (sent again after the stream's
// duplicate window) is answered with the stored verdict, never its own
// decision. Its own approval is looked up before it joins the target, is
// granted or sealed: the stored verdict is handed over on its own trail,
// and nothing of the approval is left, even when the stored verdict
// rejects. Any other decision is decided without a look-up, loses to the
// stored verdict when it stores its own, and is followed by a further
// trail that says which record the stored verdict superseded.
func TestFirstDeliveryOfACopyGetsTheStoredVerdict(t *testing.T) {
	read := proposalJSON(t, map[string]any{"class": "read", "blast_radius": nil, "action": "host_list_services"})
	write := proposalJSON(t, nil)
	reject := func(v *gated.Verdict) {
		v.Outcome, v.Approved, v.Reason, v.Grant = gated.OutcomeRejected, false, "rejected by an earlier policy", ""
	}
	tests := []struct {
		note    string
		subject string
		data    []byte
		// approves says the delivery's own decision approves.
		approves bool
		// edit changes the verdict stored first, when set.
		edit func(*gated.Verdict)
	}{
		{note: "approved by the policy", subject: listSubject, data: read, approves: true},
		{note: "approved on review", subject: testSubject, data: write, approves: true},
		{note: "invalid", subject: testSubject, data: proposalJSON(t, map[string]any{"class": "delete"})},
		{note: "approved by the policy now, rejected when stored", subject: listSubject, data: read, approves: true, edit: reject},
		{note: "approved on review now, rejected when stored", subject: testSubject, data: write, approves: true, edit: reject},
	}
	for _, tc := range tests {
		for _, retrail := range []bool{true, false} {
			name := tc.note
			if !retrail {
				name += ", no further trail"
			}
			t.Run(name, func(t *testing.T) {
				if own := decidedElsewhereOn(t, tc.subject, tc.data, nil); own.Approved != tc.approves {
					t.Fatalf("the copy's own decision is %s (%s); want approved %v", own.Outcome, own.Reason, tc.approves)
				}
				var issued atomic.Int32
				h := newHarness(t, withCountedGrants(t, &issued))
				first := decidedElsewhereOn(t, tc.subject, tc.data, tc.edit)
				mustCreate(t, h.store, first)

				v, tr, further, err := h.firstCopy(t, tc.subject, tc.data, retrail)
				if err != nil {
					t.Fatalf("Decide: %v", err)
				}
				sameVerdict(t, v, first)
				if v.Approved != first.Approved || v.Grant != first.Grant || v.AuditSeq != first.AuditSeq {
					t.Errorf("answered approved %v, grant %q, audit_seq %d; want the stored verdict's %v, %q, %d",
						v.Approved, v.Grant, v.AuditSeq, first.Approved, first.Grant, first.AuditSeq)
				}
				sameVerdict(t, h.store.stored(t, "acme", "p1"), first)
				replayed, supersedes := tr, tr.sealSeq
				if tc.approves {
					h.checkNoApprovalLeft(t, tr, &issued)
					if further != nil {
						t.Errorf("a further trail %v was opened; the stored verdict goes on the delivery's own", further.names())
					}
					supersedes = 0
				} else {
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
					replayed = further
				}
				evs := replayed.all()
				if evs[len(evs)-1].Event != gated.EventReplayed {
					t.Fatalf("trail %v does not end with %s", replayed.names(), gated.EventReplayed)
				}
				var data replayedData
				if err := json.Unmarshal(evs[len(evs)-1].Data, &data); err != nil {
					t.Fatal(err)
				}
				want := replayedData{AuditSeq: first.AuditSeq, Outcome: first.Outcome, SupersededSeq: supersedes}
				if data != want || (!tc.approves && data.SupersededSeq == 0) {
					t.Errorf("replayed data %+v, want %+v", data, want)
				}
			})
		}
	}
}

// TestFirstDeliveryOfAReusedIDIsAnsweredInvalid: a different proposal
// under a decided proposal's id, delivered first, is answered invalid, as
// a redelivery would be, and the store keeps the first proposal's verdict.
// Its approval is looked up before it joins its target, is granted or
// sealed, and is answered invalid on its own trail, leaving nothing of
// itself; a rejection loses when it stores its verdict, and with a further
// trail is answered invalid there at once.
func TestFirstDeliveryOfAReusedIDIsAnsweredInvalid(t *testing.T) {
	tests := []struct {
		note string
		data []byte
		// approves says the delivery's own decision approves.
		approves bool
	}{
		{note: "rejected", data: proposalJSON(t, map[string]any{"class": "read", "blast_radius": nil})},
		{note: "approved", data: proposalJSON(t, nil), approves: true},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			if own := decidedElsewhere(t, tc.data, nil); own.Approved != tc.approves {
				t.Fatalf("the delivery's own decision is %s (%s); want approved %v", own.Outcome, own.Reason, tc.approves)
			}
			var issued atomic.Int32
			h := newHarness(t, withCountedGrants(t, &issued))
			owner := decidedElsewhere(t, otherProposal(t), nil)
			mustCreate(t, h.store, owner)

			v, tr, further, err := h.firstCopy(t, testSubject, tc.data, true)
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			if tc.approves {
				if further != nil {
					t.Errorf("a further trail %v was opened; the invalid verdict goes on the delivery's own", further.names())
				}
				h.checkIDReused(t, v, tr, tc.data, []string{gated.EventReceived, gated.EventPolicyDecided,
					gated.EventReviewStarted, gated.EventReviewDone, gated.EventVerdict}, owner)
				h.checkNoApprovalLeft(t, tr, &issued)
				return
			}
			if further == nil {
				t.Fatal("no further trail was opened")
			}
			h.checkIDReused(t, v, further, tc.data, []string{gated.EventReceived, gated.EventVerdict}, owner)
			if got := tr.names(); got[len(got)-1] != gated.EventVerdict {
				t.Errorf("the delivery's own trail %v does not end with its own %s", got, gated.EventVerdict)
			}
		})
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
