package engine_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// decideSeq decides one delivery of the message at stream sequence seq.
func (h *harness) decideSeq(ctx context.Context, tr *memTrail, data []byte, seq uint64) (*gated.Verdict, error) {
	return h.eng.Decide(ctx, engine.Delivery{Subject: testSubject, Data: data, Attempt: 1, StreamSeq: seq, Trail: tr})
}

// redeliver decides data as the second delivery of message seq: a
// redelivery looks the stored verdict up before deciding.
func (h *harness) redeliver(ctx context.Context, tr *memTrail, data []byte, seq uint64) (*gated.Verdict, error) {
	tr.delivery = 2
	return h.eng.Decide(ctx, engine.Delivery{Subject: testSubject, Data: data, Attempt: 2, StreamSeq: seq, Trail: tr})
}

func (s *memStore) hold(tenant, id string, c engine.Claim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims[tenant+"."+id] = c
}

func TestDecideClaimsOnlyProposalsThatGoToReview(t *testing.T) {
	tests := []struct {
		note    string
		data    []byte
		claimed int
	}{
		{note: "read passes at policy", data: proposalJSON(t, map[string]any{"class": "read", "blast_radius": nil}), claimed: 0},
		{note: "skip_review is denied at policy", data: proposalJSON(t, map[string]any{"flags": map[string]any{"skip_review": true}}), claimed: 0},
		{note: "write goes to review", data: proposalJSON(t, nil), claimed: 1},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			h := newHarness(t)
			if _, err := h.decideSeq(t.Context(), h.stream.trail(), tc.data, 3); err != nil {
				t.Fatal(err)
			}
			// A claim is kept once its verdict is stored: a late copy finds
			// the verdict, or waits on the claim for it.
			if h.store.claimed != tc.claimed || h.store.released != 0 {
				t.Fatalf("claims taken %d, released %d; want %d taken and none released", h.store.claimed, h.store.released, tc.claimed)
			}
			if c, ok := h.store.claim("acme", "p1"); ok != (tc.claimed > 0) || ok && c.Holder != "seq:3" {
				t.Fatalf("claim %+v (%v) after the verdict was stored; want the deciding message's claim only when it was reviewed", c, ok)
			}
		})
	}
}

func TestDecideWaitsForTheClaimHoldersVerdict(t *testing.T) {
	h := newHarness(t)
	h.store.awaiting = make(chan string, 1)
	data := proposalJSON(t, nil)
	held := engine.Claim{Holder: "seq:1", Until: time.Now().Add(time.Hour)}
	h.store.hold("acme", "p1", held)

	// The holder's verdict, decided elsewhere and stored while this
	// delivery waits.
	other := newHarness(t)
	want, _ := other.mustDecide(t, testSubject, data, "")

	tr := h.stream.trail()
	type result struct {
		v   *gated.Verdict
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := h.decideSeq(t.Context(), tr, data, 2)
		done <- result{v, err}
	}()
	select {
	case <-h.store.awaiting:
	case r := <-done:
		t.Fatalf("Decide returned %+v, %v without waiting for the claim holder", r.v, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("Decide never waited for the claim holder's verdict")
	}
	if _, err := h.store.Create(t.Context(), want); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Decide did not return once the verdict was stored")
	}
	if r.err != nil {
		t.Fatalf("Decide: %v", r.err)
	}
	sameVerdict(t, r.v, want)
	if n := h.reviewer.calls(); n != 0 {
		t.Errorf("reviewer called %d times; the claim holder reviews, not this delivery", n)
	}
	wantEvents := []string{gated.EventReceived, gated.EventPolicyDecided, gated.EventReviewAwaited, gated.EventReplayed}
	if got := tr.names(); !slices.Equal(got, wantEvents) {
		t.Errorf("events %v, want %v", got, wantEvents)
	}
	if c, ok := h.store.claim("acme", "p1"); !ok || c != held {
		t.Errorf("claim is %+v (held %v); a waiter must leave the holder's claim alone", c, ok)
	}
}

func TestDecideTakesClaimsOver(t *testing.T) {
	tests := []struct {
		note string
		held engine.Claim
	}{
		{note: "redelivery of the holding message", held: engine.Claim{Holder: "seq:7", Until: time.Now().Add(time.Hour)}},
		{note: "stale claim of another message", held: engine.Claim{Holder: "seq:1", Until: time.Now().Add(-time.Second)}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			h := newHarness(t)
			h.store.hold("acme", "p1", tc.held)
			v, err := h.decideSeq(t.Context(), h.stream.trail(), proposalJSON(t, nil), 7)
			if err != nil {
				t.Fatal(err)
			}
			if v.Outcome != gated.OutcomeApproved || h.reviewer.calls() != 1 {
				t.Fatalf("outcome %s after %d reviews; want approved after one", v.Outcome, h.reviewer.calls())
			}
			if c, ok := h.store.claim("acme", "p1"); !ok || c.Holder != "seq:7" || c.Delivery != 1 {
				t.Fatalf("claim %+v (%v); want the deciding delivery's, kept with its verdict", c, ok)
			}
		})
	}
}

// TestDecideLateCopyDoesNotTakeItsClaimOver: a copy of the holding
// message delivered before the holder's delivery, and handled only now (it
// waited in a buffer past the ack wait), is not a redelivery: it waits for
// the holder's verdict instead of reviewing a second time.
func TestDecideLateCopyDoesNotTakeItsClaimOver(t *testing.T) {
	h := newHarness(t)
	h.store.hold("acme", "p1", engine.Claim{Holder: "seq:7", Delivery: 2, Until: time.Now().Add(1500 * time.Millisecond)})
	_, err := h.eng.Decide(t.Context(), engine.Delivery{Subject: testSubject, Data: proposalJSON(t, nil), Attempt: 1, StreamSeq: 7, Trail: h.stream.trail()})
	if !errors.Is(err, gated.ErrClaimed) || h.reviewer.calls() != 0 {
		t.Fatalf("late copy: err %v after %d reviews; want ErrClaimed and no review", err, h.reviewer.calls())
	}
	// A later delivery of the same message does take it over.
	h.store.hold("acme", "p1", engine.Claim{Holder: "seq:7", Delivery: 2, Until: time.Now().Add(time.Hour)})
	v, err := h.eng.Decide(t.Context(), engine.Delivery{Subject: testSubject, Data: proposalJSON(t, nil), Attempt: 3, StreamSeq: 7, Trail: h.stream.trail()})
	if err != nil || v.Outcome != gated.OutcomeApproved || h.reviewer.calls() != 1 {
		t.Fatalf("redelivery: %+v, %v after %d reviews; want approved after one", v, err, h.reviewer.calls())
	}
}

func TestDecideClaimWaitIsBounded(t *testing.T) {
	h := newHarness(t)
	data := proposalJSON(t, nil)
	// A live claim whose holder never stores a verdict.
	h.store.hold("acme", "p1", engine.Claim{Holder: "seq:1", Until: time.Now().Add(1500 * time.Millisecond)})
	_, err := h.decideSeq(t.Context(), h.stream.trail(), data, 2)
	if !errors.Is(err, gated.ErrClaimed) {
		t.Fatalf("err = %v, want ErrClaimed so that the delivery is retried", err)
	}
	if h.store.size() != 0 || h.reviewer.calls() != 0 {
		t.Fatalf("%d verdicts stored, %d reviews after a wait that ran out; want none", h.store.size(), h.reviewer.calls())
	}
	// The wait lasted until the claim went stale: the retry takes it over.
	v, err := h.decideSeq(t.Context(), h.stream.trail(), data, 2)
	if err != nil || v.Outcome != gated.OutcomeApproved || h.reviewer.calls() != 1 {
		t.Fatalf("retry: %+v, %v after %d reviews; want approved after one", v, err, h.reviewer.calls())
	}
}

func TestDecideClaimFailureIsRetried(t *testing.T) {
	h := newHarness(t)
	h.store.claimErr = errors.New("kv: no responders")
	_, err := h.decideSeq(t.Context(), h.stream.trail(), proposalJSON(t, nil), 2)
	if err == nil || errors.Is(err, gated.ErrClaimed) {
		t.Fatalf("err = %v, want the store's error", err)
	}
	if h.store.size() != 0 || h.reviewer.calls() != 0 {
		t.Fatalf("%d verdicts stored, %d reviews without a claim; want none", h.store.size(), h.reviewer.calls())
	}
}

func TestDecideFindsVerdictStoredBeforeItsClaim(t *testing.T) {
	// Another message's review stored its verdict, and its claim went
	// stale, between this delivery's look-up and its claim: the claim
	// replaced is what says to look the verdict up.
	h := newHarness(t)
	h.store.hold("acme", "p1", engine.Claim{Holder: "seq:1", Until: time.Now().Add(-time.Second)})
	data := proposalJSON(t, nil)
	// A rejection: an approval would join the target's history, and the
	// policy would deny a second change on the target before any claim.
	other := newHarness(t, withRejectingReviewer)
	want, _ := other.mustDecide(t, testSubject, data, "")
	h.store.hideOnGet = true
	if _, err := h.store.Create(t.Context(), want); err != nil {
		t.Fatal(err)
	}
	unhide := &unhidingStore{memStore: h.store}
	h.cfg.Store = unhide
	eng, err := engine.New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.eng = eng
	v, err := h.decideSeq(t.Context(), h.stream.trail(), data, 2)
	if err != nil {
		t.Fatal(err)
	}
	sameVerdict(t, v, want)
	if h.reviewer.calls() != 0 {
		t.Errorf("reviewer called %d times; the verdict was stored before the claim", h.reviewer.calls())
	}
	// The verdict is stored, so the claim taken is kept with it.
	if c, ok := h.store.claim("acme", "p1"); !ok || c.Holder != "seq:2" {
		t.Errorf("claim %+v (%v); want this delivery's, kept", c, ok)
	}
}

// unhidingStore stops hiding verdicts from Get once a claim is taken.
type unhidingStore struct{ *memStore }

func (s *unhidingStore) Claim(ctx context.Context, tenant, id string, c engine.Claim) (engine.Claim, error) {
	got, err := s.memStore.Claim(ctx, tenant, id, c)
	s.mu.Lock()
	s.hideOnGet = false
	s.mu.Unlock()
	return got, err
}

func TestGiveUpKeepsTheClaimWithAStoredVerdict(t *testing.T) {
	h := newHarness(t)
	data := proposalJSON(t, nil)
	cause := errors.New("gated crashed")

	// The holder died mid-review on every delivery: its claim is left.
	h.store.hold("acme", "p1", engine.Claim{Holder: "seq:5", Until: time.Now().Add(time.Hour)})
	v := h.eng.GiveUp(t.Context(), engine.Delivery{Subject: testSubject, Data: data, Attempt: 5, StreamSeq: 5, Trail: h.stream.trail()}, cause)
	if v.Outcome != gated.OutcomeError || v.Approved {
		t.Fatalf("GiveUp: %s, want error", v.Outcome)
	}
	sameVerdict(t, h.store.stored(t, "acme", "p1"), v)
	// The claim stays with the verdict: a copy that found no claim would
	// review without looking a verdict up.
	if c, ok := h.store.claim("acme", "p1"); !ok || c.Holder != "seq:5" {
		t.Fatalf("claim %+v (%v); want seq:5's, kept with the verdict", c, ok)
	}
	// A copy of the message delivered first waits on that claim and gets
	// the stored verdict, unreviewed.
	copied, err := h.decideSeq(t.Context(), h.stream.trail(), data, 6)
	if err != nil {
		t.Fatal(err)
	}
	sameVerdict(t, copied, v)
	if n := h.reviewer.calls(); n != 0 {
		t.Errorf("reviewer called %d times after GiveUp stored the verdict", n)
	}

	// Giving up once more (a redelivery past the budget, after the answer
	// was stored but not published) hands back
	// the stored verdict.
	tr := h.stream.trail()
	again := h.eng.GiveUp(t.Context(), engine.Delivery{Subject: testSubject, Data: data, Attempt: 5, StreamSeq: 5, Trail: tr}, cause)
	sameVerdict(t, again, v)
	if got := tr.names(); !slices.Equal(got, []string{gated.EventReplayed}) {
		t.Errorf("events %v, want [%s]", got, gated.EventReplayed)
	}
}

// A delivery that ends without a stored verdict releases its claim, so
// that the redelivery, or another copy, may review without waiting for
// the claim to go stale.
func TestDecideReleasesTheClaimWhenNothingIsStored(t *testing.T) {
	h := newHarness(t)
	h.store.createErr = errors.New("bucket unavailable")
	if _, err := h.decideSeq(t.Context(), h.stream.trail(), proposalJSON(t, nil), 4); err == nil {
		t.Fatal("Decide stored nothing and reported no error")
	}
	if h.store.claimed != 1 || h.store.released != 1 {
		t.Fatalf("claims taken %d, released %d; want one of each", h.store.claimed, h.store.released)
	}
	if c, ok := h.store.claim("acme", "p1"); ok {
		t.Fatalf("claim %+v left behind by a delivery that stored no verdict", c)
	}
}

func TestGiveUpReleasesTheClaimWhenNothingIsStored(t *testing.T) {
	h := newHarness(t, func(h *harness) { h.store.createErr = errors.New("kv: no responders") })
	h.store.hold("acme", "p1", engine.Claim{Holder: "seq:5", Until: time.Now().Add(time.Hour)})
	v := h.eng.GiveUp(t.Context(), engine.Delivery{Subject: testSubject, Data: proposalJSON(t, nil), Attempt: 5, StreamSeq: 5, Trail: h.stream.trail()},
		errors.New("gated crashed"))
	if v.Approved {
		t.Fatalf("GiveUp approved: %+v", v)
	}
	if c, ok := h.store.claim("acme", "p1"); ok {
		t.Fatalf("claim %+v left behind with no verdict stored", c)
	}
}

func TestDecideLooksNoVerdictUpOnAFreshClaim(t *testing.T) {
	// A verdict stored without a claim (here: decided elsewhere and
	// written straight to the store, as a policy decision is) is met by
	// the create, not looked up: the first delivery of a copy that finds
	// no claim reviews, loses at the create, and answers the stored
	// verdict, which stays the only one. (Its review rejects: an approval
	// would look the verdict up before it is sealed.)
	h := newHarness(t, withRejectingReviewer)
	data := proposalJSON(t, nil)
	other := newHarness(t, withRejectingReviewer)
	want, _ := other.mustDecide(t, testSubject, data, "")
	mustCreate(t, h.store, want)
	h.store.getErr = errors.New("kv: a look-up this delivery need not make")
	v, err := h.decideSeq(t.Context(), h.stream.trail(), data, 2)
	if err != nil {
		t.Fatal(err)
	}
	sameVerdict(t, v, want)
	sameVerdict(t, h.store.stored(t, "acme", "p1"), want)
	if n := h.store.size(); n != 1 {
		t.Errorf("%d verdicts stored, want 1", n)
	}
}
