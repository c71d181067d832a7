package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// hidingStore is a memStore whose Get misses the keys in hide, as when
// another gated stores a verdict between this one's look-up and its
// write. With unhideOnClaim the keys show again once a claim is taken.
type hidingStore struct {
	*memStore
	hide          map[string]bool
	unhideOnClaim bool
}

func (s *hidingStore) Get(ctx context.Context, tenant, id string) (*gated.Verdict, error) {
	s.mu.Lock()
	hidden := s.hide[tenant+"."+id]
	s.mu.Unlock()
	if hidden {
		return nil, fmt.Errorf("key %s.%s: %w", tenant, id, gated.ErrNotFound)
	}
	return s.memStore.Get(ctx, tenant, id)
}

func (s *hidingStore) Claim(ctx context.Context, tenant, id string, c engine.Claim) (engine.Claim, error) {
	got, err := s.memStore.Claim(ctx, tenant, id, c)
	if s.unhideOnClaim {
		s.unhide()
	}
	return got, err
}

func (s *hidingStore) unhide() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.hide)
}

// withHidingStore puts a hidingStore that hides acme.p1 in front of the
// harness's store.
func withHidingStore(unhideOnClaim bool) func(*harness) {
	return func(h *harness) {
		h.cfg.Store = &hidingStore{memStore: h.store, hide: map[string]bool{"acme.p1": true}, unhideOnClaim: unhideOnClaim}
	}
}

// otherProposal is a different proposal under the id of proposalJSON: a
// destructive change on another target, so that its approval is not in
// the target history of the proposal it competes with.
func otherProposal(t testing.TB) []byte {
	return proposalJSON(t, map[string]any{
		"class": "destructive", "reason": "drop everything",
		"target": map[string]any{"device_id": 9, "service": "postgres"},
	})
}

// decidedElsewhere decides data on an engine of its own and returns the
// verdict, edited by edit when it is not nil, to be stored by the test.
func decidedElsewhere(t *testing.T, data []byte, edit func(*gated.Verdict)) *gated.Verdict {
	t.Helper()
	return decidedElsewhereOn(t, testSubject, data, edit)
}

// decidedElsewhereOn is decidedElsewhere for data sent on subject.
func decidedElsewhereOn(t *testing.T, subject string, data []byte, edit func(*gated.Verdict)) *gated.Verdict {
	t.Helper()
	v, _ := newHarness(t).mustDecide(t, subject, data, "")
	raw, err := v.JSON()
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeVerdict(raw)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(out)
	}
	return out
}

// checkIDReused checks that v answers data invalid because its id is
// taken, on trail tr with events want, and that the store still holds
// owner.
func (h *harness) checkIDReused(t *testing.T, v *gated.Verdict, tr *memTrail, data []byte, want []string, owner *gated.Verdict) {
	t.Helper()
	h.checkFresh(t, v, tr, data)
	if v.Outcome != gated.OutcomeInvalid || v.Stage != gated.StageValidation || v.Approved {
		t.Errorf("verdict %s at %s (approved %v): %s; want invalid at validation", v.Outcome, v.Stage, v.Approved, v.Reason)
	}
	if !strings.Contains(v.Reason, `id "p1" was already used by a different proposal`) {
		t.Errorf("reason %q does not say id p1 was used by a different proposal", v.Reason)
	}
	if got := tr.names(); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	sameVerdict(t, h.store.stored(t, "acme", "p1"), owner)
}

// TestDecideHandsAStoredVerdictOnlyToItsContent: whichever way a delivery
// meets a verdict already stored under its id, it gets that verdict only
// when the verdict answers its very bytes. A different proposal's verdict,
// or one without a digest, is never handed over: the delivery is answered
// invalid, audited, and the store keeps what it holds.
func TestDecideHandsAStoredVerdictOnlyToItsContent(t *testing.T) {
	mine := proposalJSON(t, nil)
	stored := []struct {
		note    string
		verdict func(t *testing.T) *gated.Verdict
	}{
		{note: "another proposal's approval", verdict: func(t *testing.T) *gated.Verdict {
			return decidedElsewhere(t, otherProposal(t), nil)
		}},
		{note: "an approval without a digest", verdict: func(t *testing.T) *gated.Verdict {
			// The delivery's own bytes decided, but the digest is gone:
			// nothing says which proposal this verdict answers.
			return decidedElsewhere(t, mine, func(v *gated.Verdict) { v.ProposalSHA256 = "" })
		}},
	}
	received, policy, awaited, decided := gated.EventReceived, gated.EventPolicyDecided, gated.EventReviewAwaited, gated.EventVerdict
	paths := []struct {
		note string
		// meet stores owner and has the harness meet it on the path.
		meet   func(t *testing.T, h *harness, tr *memTrail, owner *gated.Verdict) (*gated.Verdict, error)
		opts   []func(*harness)
		events []string
	}{
		{
			note: "found on look-up", events: []string{received, decided},
			meet: func(t *testing.T, h *harness, tr *memTrail, owner *gated.Verdict) (*gated.Verdict, error) {
				mustCreate(t, h.store, owner)
				return h.redeliver(t.Context(), tr, mine, 2)
			},
		},
		{
			note: "found once the claim is taken", opts: []func(*harness){withHidingStore(true)},
			events: []string{received, policy, decided},
			meet: func(t *testing.T, h *harness, tr *memTrail, owner *gated.Verdict) (*gated.Verdict, error) {
				mustCreate(t, h.store, owner)
				// The owner's claim, kept with its verdict, went stale.
				h.store.hold("acme", "p1", engine.Claim{Holder: "seq:1", Until: time.Now().Add(-time.Second)})
				return h.decideSeq(t.Context(), tr, mine, 2)
			},
		},
		{
			note: "awaited on another message's claim", events: []string{received, policy, awaited, decided},
			meet: func(t *testing.T, h *harness, tr *memTrail, owner *gated.Verdict) (*gated.Verdict, error) {
				h.store.awaiting = make(chan string, 1)
				h.store.hold("acme", "p1", engine.Claim{Holder: "seq:1", Until: time.Now().Add(time.Hour)})
				type result struct {
					v   *gated.Verdict
					err error
				}
				done := make(chan result, 1)
				go func() {
					v, err := h.decideSeq(t.Context(), tr, mine, 2)
					done <- result{v, err}
				}()
				select {
				case <-h.store.awaiting:
				case r := <-done:
					t.Fatalf("Decide returned %+v, %v without waiting for the claim holder", r.v, r.err)
				}
				mustCreate(t, h.store, owner)
				r := <-done
				return r.v, r.err
			},
		},
		{
			note: "found by GiveUp", events: []string{received, decided},
			meet: func(t *testing.T, h *harness, tr *memTrail, owner *gated.Verdict) (*gated.Verdict, error) {
				mustCreate(t, h.store, owner)
				return h.eng.GiveUp(t.Context(), engine.Delivery{Subject: testSubject, Data: mine, Attempt: 1, StreamSeq: 2, Trail: tr},
					errors.New("gated crashed")), nil
			},
		},
	}
	for _, s := range stored {
		for _, p := range paths {
			t.Run(s.note+", "+p.note, func(t *testing.T) {
				h := newHarness(t, p.opts...)
				owner := s.verdict(t)
				tr := h.stream.trail()
				v, err := p.meet(t, h, tr, owner)
				if err != nil {
					t.Fatalf("Decide: %v", err)
				}
				h.checkIDReused(t, v, tr, mine, p.events, owner)
				if n := h.reviewer.calls(); n != 0 {
					t.Errorf("reviewer called %d times for a proposal whose id is taken", n)
				}
			})
		}
	}
}

func mustCreate(t *testing.T, s *memStore, v *gated.Verdict) {
	t.Helper()
	if _, err := s.Create(t.Context(), v); err != nil {
		t.Fatal(err)
	}
}

// TestDecideLosesTheIDToAnotherProposal: a delivery that missed the
// verdict on look-up decides, seals its own verdict, and finds a
// different proposal's verdict when it comes to store it. It is not
// handed that verdict on any path, policy-only ones included: Decide
// fails with ErrIDTaken and stores nothing, and the redelivery is
// answered invalid on a trail of its own.
func TestDecideLosesTheIDToAnotherProposal(t *testing.T) {
	tests := []struct {
		note    string
		opts    []func(*harness)
		data    []byte
		reviews int
		// before runs before the delivery: it may decide other proposals.
		before func(t *testing.T, h *harness)
	}{
		{note: "read approved by the policy alone", data: proposalJSON(t, map[string]any{"class": "read", "blast_radius": nil})},
		{note: "denied by the policy", data: proposalJSON(t, map[string]any{"flags": map[string]any{"skip_review": true}})},
		{note: "reviewed", data: proposalJSON(t, nil), reviews: 1},
		{
			note: "rejected at dedupe", opts: []func(*harness){withRejectingReviewer},
			data: proposalJSON(t, nil), reviews: 1,
			before: func(t *testing.T, h *harness) {
				// The same request under another id, rejected: the delivery
				// is answered at stage dedupe.
				v, _ := h.mustDecide(t, testSubject, proposalJSON(t, map[string]any{"id": "p0"}), "")
				if v.Outcome != gated.OutcomeRejected {
					t.Fatalf("p0: %s, want rejected", v.Outcome)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			h := newHarness(t, append(tc.opts, withHidingStore(false))...)
			if tc.before != nil {
				tc.before(t, h)
			}
			owner := decidedElsewhere(t, otherProposal(t), nil)
			mustCreate(t, h.store, owner)

			tr := h.stream.trail()
			v, err := h.decideSeq(t.Context(), tr, tc.data, 2)
			if !errors.Is(err, gated.ErrIDTaken) || v != nil {
				t.Fatalf("Decide = %+v, %v; want no verdict and an error wrapping ErrIDTaken", v, err)
			}
			sameVerdict(t, h.store.stored(t, "acme", "p1"), owner)
			if n := h.reviewer.calls(); n != tc.reviews {
				t.Errorf("reviewer called %d times, want %d", n, tc.reviews)
			}

			// The redelivery finds the stored verdict on look-up.
			h.cfg.Store.(*hidingStore).unhide()
			again := h.stream.trail()
			v, err = h.redeliver(t.Context(), again, tc.data, 2)
			if err != nil {
				t.Fatalf("redelivery: %v", err)
			}
			h.checkIDReused(t, v, again, tc.data, []string{gated.EventReceived, gated.EventVerdict}, owner)
		})
	}
}

// TestGiveUpLosesTheIDToAnotherProposal: GiveUp's error verdict that
// finds a different proposal's verdict when stored is not replaced by it.
func TestGiveUpLosesTheIDToAnotherProposal(t *testing.T) {
	h := newHarness(t, withHidingStore(false))
	owner := decidedElsewhere(t, otherProposal(t), nil)
	mustCreate(t, h.store, owner)
	data := proposalJSON(t, nil)
	v := h.eng.GiveUp(t.Context(), engine.Delivery{Subject: testSubject, Data: data, Attempt: 5, Trail: h.stream.trail()}, errors.New("gated crashed"))
	if v.Outcome != gated.OutcomeInvalid || v.Approved || v.ProposalSHA256 == owner.ProposalSHA256 {
		t.Fatalf("GiveUp: %s (%s), digest %s; want invalid for its own bytes", v.Outcome, v.Reason, v.ProposalSHA256)
	}
	sameVerdict(t, h.store.stored(t, "acme", "p1"), owner)
}
