package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/policies"
)

func TestDecideReplaysStoredVerdict(t *testing.T) {
	tests := []struct {
		note        string
		data        []byte
		wantOutcome gated.Outcome
		wantReviews int
	}{
		{note: "approved", data: proposalJSON(t, nil), wantOutcome: gated.OutcomeApproved, wantReviews: 1},
		{note: "invalid", data: proposalJSON(t, map[string]any{"class": "delete"}), wantOutcome: gated.OutcomeInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			h := newHarness(t)
			first, firstTrail := h.mustDecide(t, testSubject, tc.data, "")
			if first.Outcome != tc.wantOutcome {
				t.Fatalf("first outcome %s, want %s (reason: %s)", first.Outcome, tc.wantOutcome, first.Reason)
			}

			tr := h.stream.trail()
			again, err := h.redeliver(t.Context(), tr, tc.data, 0)
			if err != nil {
				t.Fatalf("Decide again: %v", err)
			}
			sameVerdict(t, again, first)
			if again.AuditSeq != firstTrail.sealSeq {
				t.Errorf("replayed audit_seq %d, want the first decision's %d", again.AuditSeq, firstTrail.sealSeq)
			}
			if got := h.reviewer.calls(); got != tc.wantReviews {
				t.Errorf("reviewer called %d times over two deliveries, want %d", got, tc.wantReviews)
			}
			if h.store.creates != 1 {
				t.Errorf("store written %d times, want once", h.store.creates)
			}
			if got := tr.names(); !slices.Equal(got, []string{gated.EventReplayed}) {
				t.Errorf("replay events %v, want [%s]", got, gated.EventReplayed)
			}
			var data struct {
				AuditSeq uint64        `json:"audit_seq"`
				Outcome  gated.Outcome `json:"outcome"`
			}
			if evs := tr.all(); len(evs) == 1 {
				if err := json.Unmarshal(evs[0].Data, &data); err != nil {
					t.Fatal(err)
				}
				if data.AuditSeq != first.AuditSeq || data.Outcome != first.Outcome {
					t.Errorf("replay event data %+v, want audit_seq %d outcome %s", data, first.AuditSeq, first.Outcome)
				}
			}

			failing := h.stream.trail()
			failing.sealErr = errors.New("audit stream unavailable")
			if v, err := h.redeliver(t.Context(), failing, tc.data, 0); err == nil {
				t.Errorf("replay on a failing trail returned %+v and no error", v)
			}
		})
	}
}

func TestDecideRefusesReusedID(t *testing.T) {
	h := newHarness(t)
	first, _ := h.mustDecide(t, testSubject, proposalJSON(t, nil), "")
	if first.Outcome != gated.OutcomeApproved {
		t.Fatalf("first outcome %s, want approved (reason: %s)", first.Outcome, first.Reason)
	}

	other := proposalJSON(t, map[string]any{"class": "destructive", "reason": "drop everything"})
	tr := h.stream.trail()
	v, err := h.redeliver(t.Context(), tr, other, 0)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	h.checkFresh(t, v, tr, other)
	if v.Outcome != gated.OutcomeInvalid || v.Stage != gated.StageValidation || v.Approved {
		t.Errorf("reused id got %s at %s (approved %v), want invalid at validation", v.Outcome, v.Stage, v.Approved)
	}
	if !strings.Contains(v.Reason, "already used") || !strings.Contains(v.Reason, `"p1"`) {
		t.Errorf("reason %q does not say id \"p1\" was already used", v.Reason)
	}
	if v.ProposalID != "p1" || v.Tenant != "acme" {
		t.Errorf("verdict addressed to %q.%q, want acme.p1", v.Tenant, v.ProposalID)
	}
	if got := tr.names(); !slices.Equal(got, []string{gated.EventReceived, gated.EventVerdict}) {
		t.Errorf("events %v", got)
	}
	if got := h.reviewer.calls(); got != 1 {
		t.Errorf("reviewer called %d times, want 1", got)
	}
	sameVerdict(t, h.store.stored(t, "acme", "p1"), first)
}

func TestDecideAuditFailureStoresNothing(t *testing.T) {
	tests := []struct {
		note      string
		recordErr error
		sealErr   error
	}{
		{note: "record and seal fail", recordErr: errors.New("publish: no responders"), sealErr: errors.New("publish: no responders")},
		{note: "record fails, trail refuses to seal", recordErr: errors.New("publish: no responders")},
		{note: "seal fails", sealErr: errors.New("ack wait exceeded")},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			for _, data := range [][]byte{proposalJSON(t, nil), proposalJSON(t, map[string]any{"class": nil})} {
				h := newHarness(t)
				tr := h.stream.trail()
				tr.recordErr, tr.sealErr = tc.recordErr, tc.sealErr
				v, err := h.decideOn(t.Context(), tr, testSubject, data, "")
				if err == nil {
					t.Fatalf("Decide returned %+v and no error on a failing audit trail", v)
				}
				if v != nil {
					t.Errorf("Decide returned a verdict with its error: %+v", v)
				}
				if h.store.size() != 0 {
					t.Errorf("store holds %d verdicts after an audit failure", h.store.size())
				}
			}
		})
	}
}

func TestDecideCancelledContext(t *testing.T) {
	tests := []struct {
		note   string
		answer func(cancel context.CancelFunc) answerFunc
	}{
		{note: "reviewer waits for the context", answer: func(cancel context.CancelFunc) answerFunc {
			return func(ctx context.Context, _ engine.ReviewRequest) (engine.ReviewResult, error) {
				cancel()
				<-ctx.Done()
				return engine.ReviewResult{}, ctx.Err()
			}
		}},
		{note: "reviewer approves after the cancel", answer: func(cancel context.CancelFunc) answerFunc {
			return func(ctx context.Context, _ engine.ReviewRequest) (engine.ReviewResult, error) {
				cancel()
				<-ctx.Done()
				return approval(), nil
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			h := newHarness(t, func(h *harness) { h.reviewer.answer = tc.answer(cancel) })
			tr := h.stream.trail()
			v, err := h.decideOn(ctx, tr, testSubject, proposalJSON(t, nil), "")
			if err == nil {
				t.Fatalf("Decide returned %+v and no error after its context was cancelled", v)
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("error %v does not wrap context.Canceled", err)
			}
			if v != nil {
				t.Errorf("Decide returned a verdict with its error: %+v", v)
			}
			if h.store.size() != 0 {
				t.Errorf("store holds %d verdicts after a cancelled decision", h.store.size())
			}
			if slices.Contains(tr.names(), gated.EventVerdict) {
				t.Error("a verdict was audited for a decision that was abandoned")
			}
		})
	}
}

// TestDecideReviewDeadlineIsWallClock checks that a review's deadline is a
// span of real time, whatever time the injected Clock tells.
func TestDecideReviewDeadlineIsWallClock(t *testing.T) {
	t.Run("clock behind the wall clock", func(t *testing.T) {
		var deadlineErr atomic.Value
		h := newHarness(t, func(h *harness) {
			h.now = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
			h.cfg.ReviewTimeout = 10 * time.Second
			h.reviewer.answer = func(ctx context.Context, _ engine.ReviewRequest) (engine.ReviewResult, error) {
				if dl, ok := ctx.Deadline(); !ok || !dl.After(time.Now()) || dl.After(time.Now().Add(10*time.Second)) {
					deadlineErr.Store(fmt.Sprintf("review context deadline %v (set %v) is not within 10s of now %v", dl, ok, time.Now()))
				}
				select {
				case <-ctx.Done():
					return engine.ReviewResult{}, ctx.Err()
				case <-time.After(20 * time.Millisecond):
					return approval(), nil
				}
			}
		})
		v, _ := h.mustDecide(t, testSubject, proposalJSON(t, nil), "")
		if msg := deadlineErr.Load(); msg != nil {
			t.Error(msg)
		}
		if v.Outcome != gated.OutcomeApproved {
			t.Errorf("a 20ms review with a 10s timeout ended %s: %s", v.Outcome, v.Reason)
		}
	})
	t.Run("clock ahead of the wall clock", func(t *testing.T) {
		h := newHarness(t, func(h *harness) {
			h.now = time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
			h.cfg.ReviewTimeout = 50 * time.Millisecond
			h.reviewer.answer = blockUntilDone(2 * time.Second)
		})
		start := time.Now()
		v, _ := h.mustDecide(t, testSubject, proposalJSON(t, nil), "")
		if v.Outcome != gated.OutcomeTimeout {
			t.Errorf("a review past its 50ms timeout ended %s after %v: %s", v.Outcome, time.Since(start), v.Reason)
		}
	})
}

func TestDecideStoreFailures(t *testing.T) {
	t.Run("get fails", func(t *testing.T) {
		kvDown := errors.New("kv: no responders")
		h := newHarness(t, func(h *harness) { h.store.getErr = kvDown })
		// A stale claim taken over: its holder may have stored a verdict.
		h.store.hold("acme", "p1", engine.Claim{Holder: "seq:9", Until: time.Now().Add(-time.Second)})
		tr := h.stream.trail()
		v, err := h.decideOn(t.Context(), tr, testSubject, proposalJSON(t, nil), "")
		if !errors.Is(err, kvDown) {
			t.Fatalf("Decide = %+v, %v; want an error wrapping %v", v, err, kvDown)
		}
		if h.reviewer.calls() != 0 {
			t.Error("reviewed a proposal whose earlier verdict could not be looked up")
		}
	})
	t.Run("create fails", func(t *testing.T) {
		kvDown := errors.New("kv: no responders")
		h := newHarness(t, func(h *harness) { h.store.createErr = kvDown })
		v, err := h.decideOn(t.Context(), h.stream.trail(), testSubject, proposalJSON(t, nil), "")
		if !errors.Is(err, kvDown) || v != nil {
			t.Fatalf("Decide = %+v, %v; want no verdict and an error wrapping %v", v, err, kvDown)
		}
	})
}

// TestDecideLosesRace checks that when another gated stored a verdict
// between this one's look-up and its write, the stored verdict stands.
// TestDecideLosesRace: a copy of a proposal that missed the stored
// verdict on its look-up gets the stored verdict, never its own. While
// the first review's claim is kept, the copy waits on it and does not
// review; once that claim has gone stale it reviews, and storing its
// verdict finds the first one there.
func TestDecideLosesRace(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprintf("stale claim %v", stale), func(t *testing.T) {
			h := newHarness(t)
			data := proposalJSON(t, nil)
			first, _ := h.mustDecide(t, testSubject, data, "")
			c, ok := h.store.claim("acme", "p1")
			if !ok {
				t.Fatal("the first review's claim was not kept with its verdict")
			}
			if stale {
				c.Until = time.Now().Add(-time.Second)
				h.store.hold("acme", "p1", c)
			}

			h.store.mu.Lock()
			h.store.hideOnGet = true
			h.store.mu.Unlock()
			h.reviewer.answer = answer(engine.ReviewResult{}, errors.New("plugin crashed"))
			tr := h.stream.trail()
			v, err := h.decideOn(t.Context(), tr, testSubject, data, "")
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			sameVerdict(t, v, first)
			want := 1
			if stale {
				want = 2
			}
			if h.reviewer.calls() != want {
				t.Errorf("reviewer called %d times, want %d", h.reviewer.calls(), want)
			}
			sameVerdict(t, h.store.stored(t, "acme", "p1"), first)
		})
	}
}

func TestDecideConcurrentDeliveries(t *testing.T) {
	h := newHarness(t, func(h *harness) {
		h.reviewer.answer = func(context.Context, engine.ReviewRequest) (engine.ReviewResult, error) {
			time.Sleep(2 * time.Millisecond)
			return approval(), nil
		}
	})
	data := proposalJSON(t, nil)
	const n = 8
	verdicts := make([]*gated.Verdict, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			verdicts[i], errs[i] = h.decideOn(t.Context(), h.stream.trail(), testSubject, data, "")
		})
	}
	wg.Wait()
	stored := h.store.stored(t, "acme", "p1")
	if stored == nil {
		t.Fatal("nothing stored")
	}
	for i := range n {
		if errs[i] != nil {
			t.Errorf("delivery %d: %v", i, errs[i])
			continue
		}
		sameVerdict(t, verdicts[i], stored)
	}
	// The review claim lets one delivery review; the others wait for its
	// verdict or find it stored.
	if n := h.reviewer.calls(); n != 1 {
		t.Errorf("reviewer called %d times for %d concurrent deliveries of one proposal, want once", n, len(verdicts))
	}
}

func TestDecidePolicyOutcomes(t *testing.T) {
	tests := []struct {
		note        string
		policy      stubPolicy
		wantOutcome gated.Outcome
		wantStage   gated.Stage
	}{
		{note: "policy error fails closed", policy: stubPolicy{err: errors.New("rego: undefined")}, wantOutcome: gated.OutcomeError, wantStage: gated.StagePolicy},
		{note: "quorum above the loaded personas is blocked", policy: stubPolicy{d: engine.PolicyDecision{Review: gated.Route{Required: true, Persona: "reviewer", Quorum: 2, Why: "tenant_wide"}}},
			wantOutcome: gated.OutcomeBlocked, wantStage: gated.StageReview},
		{note: "deny beats a waived review", policy: stubPolicy{d: engine.PolicyDecision{Denies: []gated.Deny{{Rule: "change_freeze", Message: "frozen"}}}},
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StagePolicy},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			h := newHarness(t, func(h *harness) { h.cfg.Policy = tc.policy })
			v, _ := h.mustDecide(t, testSubject, proposalJSON(t, nil), "")
			if v.Outcome != tc.wantOutcome || v.Stage != tc.wantStage {
				t.Errorf("verdict %s at %s, want %s at %s (reason: %s)", v.Outcome, v.Stage, tc.wantOutcome, tc.wantStage, v.Reason)
			}
			if h.reviewer.calls() != 0 {
				t.Errorf("reviewer called %d times", h.reviewer.calls())
			}
		})
	}
}

// TestDecideRegoRuntimeErrorIsAnErrorVerdict runs a real bundle whose
// user rule fails at run time for one action (to_number on a sentence):
// the verdict is error, never approved, and the reviewer is not asked.
func TestDecideRegoRuntimeErrorIsAnErrorVerdict(t *testing.T) {
	b, err := policies.Default()
	if err != nil {
		t.Fatal(err)
	}
	b.Modules["explode.rego"] = `package gated

deny contains {"rule": "reason_budget", "message": "too expensive"} if {
	input.proposal.action == "db_vacuum_table"
	to_number(input.proposal.reason) > 100
}
`
	pol, err := policies.Compile(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(h *harness) { h.cfg.Policy = pol })
	v, _ := h.mustDecide(t, "gated.proposals.acme.db_vacuum_table", proposalJSON(t, map[string]any{"action": "db_vacuum_table"}), "")
	if v.Outcome != gated.OutcomeError || v.Stage != gated.StagePolicy || !strings.Contains(v.Reason, "to_number") {
		t.Fatalf("verdict %s at %s (%s), want error at policy naming to_number", v.Outcome, v.Stage, v.Reason)
	}
	if h.reviewer.calls() != 0 {
		t.Errorf("reviewer called %d times", h.reviewer.calls())
	}
}

func TestNewChecksConfig(t *testing.T) {
	base := func() engine.Config {
		return engine.Config{Policy: stubPolicy{}, Personas: personaSet{}, Router: &fakeRouter{}, Store: newMemStore()}
	}
	tests := []struct {
		note string
		edit func(*engine.Config)
	}{
		{note: "no policy", edit: func(c *engine.Config) { c.Policy = nil }},
		{note: "no personas", edit: func(c *engine.Config) { c.Personas = nil }},
		{note: "no router", edit: func(c *engine.Config) { c.Router = nil }},
		{note: "no store", edit: func(c *engine.Config) { c.Store = nil }},
		{note: "negative review timeout", edit: func(c *engine.Config) { c.ReviewTimeout = -time.Second }},
		{note: "negative dedupe max", edit: func(c *engine.Config) { c.DedupeMax = -1 }},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			cfg := base()
			tc.edit(&cfg)
			if _, err := engine.New(cfg); !errors.Is(err, engine.ErrInvalidOption) {
				t.Errorf("New = %v, want an error wrapping ErrInvalidOption", err)
			}
		})
	}
	if _, err := engine.New(base()); err != nil {
		t.Errorf("New with a complete config: %v", err)
	}
	disabled := base()
	disabled.DedupeWindow = -time.Second
	if _, err := engine.New(disabled); err != nil {
		t.Errorf("New with deduplication off: %v", err)
	}
}

// overlapStore holds the first verdict look-up until the target's history
// is being read, so a Decide that reads them one after the other fails.
type overlapStore struct {
	*memStore
	recent     chan struct{}
	recentOnce sync.Once
	gets       atomic.Int32
}

func (s *overlapStore) Get(ctx context.Context, tenant, id string) (*gated.Verdict, error) {
	if s.gets.Add(1) == 1 {
		select {
		case <-s.recent:
		case <-time.After(5 * time.Second):
			return nil, errors.New("the target's history was not read while the stored verdict was looked up")
		}
	}
	return s.memStore.Get(ctx, tenant, id)
}

func (s *overlapStore) Recent(ctx context.Context, tenant, key string) (engine.History, error) {
	s.recentOnce.Do(func() { close(s.recent) })
	return s.memStore.Recent(ctx, tenant, key)
}

// A mutating proposal's history is read beside the look-up of a stored
// verdict, not after it.
func TestDecideReadsHistoryBesideTheVerdictLookup(t *testing.T) {
	h := newHarness(t)
	store := &overlapStore{memStore: h.store, recent: make(chan struct{})}
	h.cfg.Store = store
	eng, err := engine.New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.eng = eng
	v, err := h.decideOn(t.Context(), h.stream.trail(), testSubject, proposalJSON(t, nil), "")
	if err != nil {
		t.Fatal(err)
	}
	if v.Outcome != gated.OutcomeApproved {
		t.Fatalf("outcome %s: %s", v.Outcome, v.Reason)
	}
}
