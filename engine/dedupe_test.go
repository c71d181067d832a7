package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

const rejectedNote = "no SOP covers a restart during the backup window."

// withRejectingReviewer makes the harness's reviewer reject every review.
func withRejectingReviewer(h *harness) { h.reviewer.answer = rejection(rejectedNote) }

// withID returns the default proposal with id and the edits in override.
func withID(t *testing.T, id string, override map[string]any) []byte {
	t.Helper()
	m := map[string]any{"id": id}
	for k, v := range override {
		m[k] = v
	}
	return proposalJSON(t, m)
}

func (s *memStore) forget(tenant, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, tenant+"."+id)
}

// switchPolicy answers with one decision under a revision the test may
// change, as a policy reload does.
type switchPolicy struct {
	d   engine.PolicyDecision
	mu  sync.Mutex
	rev string
}

func (p *switchPolicy) Revision() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rev
}

func (p *switchPolicy) reload(rev string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rev = rev
}

func (p *switchPolicy) Evaluate(context.Context, engine.PolicyInput) (engine.PolicyDecision, error) {
	d := p.d
	d.Revision = p.Revision()
	return d, nil
}

// denyingPolicy rejects every proposal at stage policy.
func denyingPolicy() *switchPolicy {
	return &switchPolicy{rev: "rev-a", d: engine.PolicyDecision{Denies: []gated.Deny{{Rule: "change_freeze", Message: "frozen"}}}}
}

// reviewingPolicy sends every proposal to the reviewer persona.
func reviewingPolicy() *switchPolicy {
	return &switchPolicy{rev: "rev-a", d: engine.PolicyDecision{
		Review: gated.Route{Required: true, Persona: "reviewer", Quorum: 1, Why: "write actions need review"},
	}}
}

func TestDecideDedupesAnIdenticalRejection(t *testing.T) {
	h := newHarness(t, withRejectingReviewer)
	first, _ := h.mustDecide(t, testSubject, withID(t, "p1", nil), "")
	if first.Outcome != gated.OutcomeRejected || first.Stage != gated.StageReview {
		t.Fatalf("first verdict %s at %s, want rejected at review: %s", first.Outcome, first.Stage, first.Reason)
	}

	h.advance(12 * time.Second)
	data := withID(t, "p2", map[string]any{"created_at": "2026-01-02T03:04:05Z", "context_summary": "retrying"})
	v, tr := h.mustDecide(t, testSubject, data, "")

	if v.Outcome != gated.OutcomeRejected || v.Stage != gated.StageDedupe || v.Approved {
		t.Errorf("verdict %s at %s (approved %v), want rejected at dedupe", v.Outcome, v.Stage, v.Approved)
	}
	if want := "identical to proposal p1 rejected 12s ago: " + first.Reason; v.Reason != want {
		t.Errorf("reason %q, want %q", v.Reason, want)
	}
	if v.DuplicateOf != "p1" || v.ProposalID != "p2" || v.Tenant != "acme" {
		t.Errorf("verdict for %s.%s duplicate of %q, want acme.p2 duplicate of p1", v.Tenant, v.ProposalID, v.DuplicateOf)
	}
	for _, part := range []struct {
		name      string
		got, want any
	}{
		{"policy", v.Policy, first.Policy},
		{"reviews", v.Reviews, first.Reviews},
	} {
		g, _ := json.Marshal(part.got)
		w, _ := json.Marshal(part.want)
		if string(g) != string(w) {
			t.Errorf("%s %s, want the earlier verdict's %s", part.name, g, w)
		}
	}
	if len(v.Reviews) != 1 || v.Reviews[0].Notes != rejectedNote {
		t.Errorf("reviews %+v, want the earlier rejection's", v.Reviews)
	}
	if h.reviewer.calls() != 1 {
		t.Errorf("reviewer called %d times, want once", h.reviewer.calls())
	}
	if got, want := tr.names(), []string{gated.EventReceived, gated.EventDeduplicated, gated.EventVerdict}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	var data2 struct {
		DuplicateOf string `json:"duplicate_of"`
		AuditSeq    uint64 `json:"audit_seq"`
	}
	if err := json.Unmarshal(tr.all()[1].Data, &data2); err != nil {
		t.Fatal(err)
	}
	if data2.DuplicateOf != "p1" || data2.AuditSeq != first.AuditSeq || first.AuditSeq == 0 {
		t.Errorf("%s data %+v, want duplicate_of p1 and audit_seq %d", gated.EventDeduplicated, data2, first.AuditSeq)
	}
	sameVerdict(t, h.store.stored(t, "acme", "p2"), v)

	// A redelivery of p2 replays its stored verdict.
	again, err := h.decideOn(t.Context(), h.stream.trail(), testSubject, data, "")
	if err != nil {
		t.Fatal(err)
	}
	sameVerdict(t, again, v)
}

func TestDecideDedupeWindow(t *testing.T) {
	tests := []struct {
		note      string
		window    time.Duration // engine.Config.DedupeWindow
		after     time.Duration
		wantStage gated.Stage
	}{
		{note: "just inside the default window", after: 119 * time.Second, wantStage: gated.StageDedupe},
		{note: "at the end of the default window", after: 120 * time.Second, wantStage: gated.StageReview},
		{note: "long after", after: time.Hour, wantStage: gated.StageReview},
		{note: "inside a configured window", window: 10 * time.Second, after: 9 * time.Second, wantStage: gated.StageDedupe},
		{note: "past a configured window", window: 10 * time.Second, after: 11 * time.Second, wantStage: gated.StageReview},
		{note: "turned off", window: -1, after: time.Second, wantStage: gated.StageReview},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			h := newHarness(t, withRejectingReviewer, func(h *harness) { h.cfg.DedupeWindow = tc.window })
			h.mustDecide(t, testSubject, withID(t, "p1", nil), "")
			h.advance(tc.after)
			v, _ := h.mustDecide(t, testSubject, withID(t, "p2", nil), "")
			if v.Outcome != gated.OutcomeRejected || v.Stage != tc.wantStage {
				t.Errorf("verdict %s at %s, want rejected at %s: %s", v.Outcome, v.Stage, tc.wantStage, v.Reason)
			}
		})
	}
}

// TestDecideDedupeWindowRunsFromTheOriginal checks that a dedupe verdict
// does not extend the window: only a judgement starts one.
func TestDecideDedupeWindowRunsFromTheOriginal(t *testing.T) {
	h := newHarness(t, withRejectingReviewer)
	h.mustDecide(t, testSubject, withID(t, "p1", nil), "")
	h.advance(100 * time.Second)
	if v, _ := h.mustDecide(t, testSubject, withID(t, "p2", nil), ""); v.Stage != gated.StageDedupe {
		t.Fatalf("p2 at %s, want dedupe", v.Stage)
	}
	h.advance(30 * time.Second)
	v, _ := h.mustDecide(t, testSubject, withID(t, "p3", nil), "")
	if v.Stage != gated.StageReview {
		t.Fatalf("p3, 130s after the original rejection, at %s: %s", v.Stage, v.Reason)
	}
	h.advance(time.Second)
	if v, _ := h.mustDecide(t, testSubject, withID(t, "p4", nil), ""); v.DuplicateOf != "p3" {
		t.Errorf("p4 duplicate of %q, want p3, the latest judgement", v.DuplicateOf)
	}
}

func TestDecideDedupeKey(t *testing.T) {
	otherTarget := map[string]any{"device_id": 8, "service": "nginx", "tags": []string{"production"}}
	tests := []struct {
		note     string
		override map[string]any
		data     []byte // replaces the second proposal
		want     gated.Stage
	}{
		{note: "identical but for the id", want: gated.StageDedupe},
		{note: "other session and created_at", want: gated.StageDedupe, override: map[string]any{
			"requested_by": map[string]any{"agent": "fleet-ops-3", "session": "s-2"}, "created_at": "2026-01-02T03:04:05Z",
		}},
		{
			note: "target keys in another order", want: gated.StageDedupe,
			data: []byte(`{"v":1,"id":"p2","tenant":"acme","action":"host_restart_service","class":"write",` +
				`"blast_radius":"single_device","target":{"tags":["production"],"service":"nginx","device_id":7},` +
				`"reason":"nginx on web-7 stopped answering health checks","operator":{"id":"u-1042","roles":["sre"]},` +
				`"requested_by":{"agent":"fleet-ops-3","session":"s-1"}}`),
		},
		{note: "other reason", want: gated.StageReview, override: map[string]any{"reason": "nginx on web-7 is still down"}},
		{note: "user_confirmed set", want: gated.StageReview, override: map[string]any{"flags": map[string]any{"user_confirmed": true}}},
		{note: "other target", want: gated.StageReview, override: map[string]any{"target": otherTarget}},
		{note: "other class", want: gated.StageReview, override: map[string]any{"class": "destructive"}},
		{note: "other blast radius", want: gated.StageReview, override: map[string]any{"blast_radius": "cluster"}},
		{note: "reviewer named", want: gated.StageReview, override: map[string]any{"reviewer": "reviewer"}},
		{note: "incident named", want: gated.StageReview, override: map[string]any{"incident_id": "INC-7"}},
		{note: "other agent", want: gated.StageReview, override: map[string]any{"requested_by": map[string]any{"agent": "fleet-ops-4"}}},
		{note: "other operator roles", want: gated.StageReview, override: map[string]any{"operator": map[string]any{"id": "u-1042", "roles": []string{"sre", "dba"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			h := newHarness(t, withRejectingReviewer)
			h.mustDecide(t, testSubject, withID(t, "p1", nil), "")
			h.advance(time.Second)
			data := tc.data
			if data == nil {
				data = withID(t, "p2", tc.override)
			}
			v, _ := h.mustDecide(t, testSubject, data, "")
			if v.Stage != tc.want || v.Outcome != gated.OutcomeRejected {
				t.Errorf("second proposal %s at %s, want rejected at %s: %s", v.Outcome, v.Stage, tc.want, v.Reason)
			}
		})
	}
}

// TestDecideNeverDedupesRuns: two proposals of one run round are told
// apart by the run record, never answered with each other's rejection.
func TestDecideNeverDedupesRuns(t *testing.T) {
	run := map[string]any{
		"kind": "run", "class": "write",
		"run": map[string]any{"run_id": "r-1", "round": 1, "status": "completed", "worker": "w-1", "summary": "fix the flaky test", "diff": "--- a\n+++ b\n"},
	}
	h := newHarness(t, withRejectingReviewer)
	h.mustDecide(t, testSubject, withID(t, "p1", run), "")
	if v, _ := h.mustDecide(t, testSubject, withID(t, "p2", run), ""); v.Stage == gated.StageDedupe {
		t.Errorf("the same run again at %s (%s): runs are never deduplicated", v.Stage, v.Reason)
	}
}

func TestDecideDedupePolicyRevision(t *testing.T) {
	pol := denyingPolicy()
	h := newHarness(t, func(h *harness) { h.cfg.Policy = pol })
	h.mustDecide(t, testSubject, withID(t, "p1", nil), "")
	if v, _ := h.mustDecide(t, testSubject, withID(t, "p2", nil), ""); v.Stage != gated.StageDedupe {
		t.Fatalf("p2 under the same policy at %s, want dedupe", v.Stage)
	}
	pol.reload("rev-b")
	v, _ := h.mustDecide(t, testSubject, withID(t, "p3", nil), "")
	if v.Stage != gated.StagePolicy || v.Policy.Revision != "rev-b" {
		t.Fatalf("p3 after a reload at %s under %q, want a new judgement under rev-b", v.Stage, v.Policy.Revision)
	}
	if v, _ := h.mustDecide(t, testSubject, withID(t, "p4", nil), ""); v.DuplicateOf != "p3" {
		t.Errorf("p4 duplicate of %q, want p3, judged under rev-b", v.DuplicateOf)
	}
}

// TestDecideDedupeOnlyRejections checks that only what the policy or a
// reviewer rejected is repeated: a failure says nothing about the
// proposal, and an approval must be judged again.
func TestDecideDedupeOnlyRejections(t *testing.T) {
	tests := []struct {
		note   string
		edit   func(*harness)
		want   gated.Outcome
		first  gated.Stage
		second gated.Stage // of the identical second proposal
	}{
		{note: "rejected by the policy", edit: func(h *harness) { h.cfg.Policy = denyingPolicy() },
			want: gated.OutcomeRejected, first: gated.StagePolicy, second: gated.StageDedupe},
		{note: "rejected by a reviewer", edit: func(h *harness) { h.cfg.Policy = reviewingPolicy(); withRejectingReviewer(h) },
			want: gated.OutcomeRejected, first: gated.StageReview, second: gated.StageDedupe},
		{note: "approved", edit: func(h *harness) { h.cfg.Policy = reviewingPolicy() },
			want: gated.OutcomeApproved, first: gated.StageReview, second: gated.StageReview},
		{note: "reviewer error", edit: func(h *harness) {
			h.cfg.Policy = reviewingPolicy()
			h.reviewer.answer = answer(engine.ReviewResult{}, errors.New("provider down"))
		}, want: gated.OutcomeError, first: gated.StageReview, second: gated.StageReview},
		{note: "timeout", edit: func(h *harness) {
			h.cfg.Policy = reviewingPolicy()
			h.cfg.ReviewTimeout = 20 * time.Millisecond
			h.reviewer.answer = blockUntilDone(5 * time.Second)
		}, want: gated.OutcomeTimeout, first: gated.StageReview, second: gated.StageReview},
		{note: "blocked", edit: func(h *harness) {
			h.cfg.Policy = reviewingPolicy()
			h.router.err = fmt.Errorf("plugin down: %w", engine.ErrNoReviewer)
		}, want: gated.OutcomeBlocked, first: gated.StageReview, second: gated.StageReview},
		{note: "policy error", edit: func(h *harness) { h.cfg.Policy = stubPolicy{err: errors.New("rego: undefined")} },
			want: gated.OutcomeError, first: gated.StagePolicy, second: gated.StagePolicy},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			h := newHarness(t, tc.edit)
			for _, step := range []struct {
				id    string
				stage gated.Stage
			}{{"p1", tc.first}, {"p2", tc.second}} {
				v, _ := h.mustDecide(t, testSubject, withID(t, step.id, nil), "")
				if v.Outcome != tc.want || v.Stage != step.stage {
					t.Errorf("%s: %s at %s, want %s at %s: %s", step.id, v.Outcome, v.Stage, tc.want, step.stage, v.Reason)
				}
			}
		})
	}
}

func TestDecideDedupeEarlierVerdictGone(t *testing.T) {
	h := newHarness(t, withRejectingReviewer)
	h.mustDecide(t, testSubject, withID(t, "p1", nil), "")
	h.store.forget("acme", "p1")
	v, _ := h.mustDecide(t, testSubject, withID(t, "p2", nil), "")
	if v.Stage != gated.StageReview || h.reviewer.calls() != 2 {
		t.Errorf("p2 at %s after %d reviews, want a new review because p1's verdict is gone", v.Stage, h.reviewer.calls())
	}
}

// getFailStore fails Get for one proposal id, once id is set.
type getFailStore struct {
	*memStore
	id  string
	err error
}

func (s *getFailStore) Get(ctx context.Context, tenant, id string) (*gated.Verdict, error) {
	if id == s.id {
		return nil, s.err
	}
	return s.memStore.Get(ctx, tenant, id)
}

func TestDecideDedupeStoreFailureIsRetried(t *testing.T) {
	kvDown := errors.New("kv: no responders")
	store := &getFailStore{err: kvDown}
	h := newHarness(t, withRejectingReviewer, func(h *harness) {
		store.memStore = h.store
		h.cfg.Store = store
	})
	h.mustDecide(t, testSubject, withID(t, "p1", nil), "")
	store.id = "p1"
	v, err := h.decideOn(t.Context(), h.stream.trail(), testSubject, withID(t, "p2", nil), "")
	if !errors.Is(err, kvDown) || v != nil {
		t.Fatalf("Decide = %+v, %v; want no verdict and an error wrapping %v", v, err, kvDown)
	}
	if h.store.stored(t, "acme", "p2") != nil {
		t.Error("p2 was decided although the earlier verdict could not be read")
	}
}

func TestDecideDedupeMax(t *testing.T) {
	const limit, n = 20, 150
	h := newHarness(t, func(h *harness) {
		h.cfg.Policy = denyingPolicy()
		h.cfg.DedupeMax = limit
	})
	// Without a target no history is read, which keeps the in-memory
	// store's scans out of the test's time.
	reason := func(i int) map[string]any {
		return map[string]any{"reason": fmt.Sprintf("attempt %d", i), "target": nil}
	}
	for i := range n {
		h.mustDecide(t, testSubject, withID(t, fmt.Sprintf("a%d", i), reason(i)), "")
	}
	// Hits first: a miss is judged and remembered, and pushes out the
	// oldest entry itself.
	for _, tc := range []struct {
		i    int
		want gated.Stage
	}{
		{i: n - 1, want: gated.StageDedupe},
		{i: n - limit, want: gated.StageDedupe},
		{i: n - limit - 1, want: gated.StagePolicy},
		{i: 0, want: gated.StagePolicy},
	} {
		v, _ := h.mustDecide(t, testSubject, withID(t, fmt.Sprintf("b%d", tc.i), reason(tc.i)), "")
		if v.Stage != tc.want {
			t.Errorf("resubmission of rejection %d of %d with a cap of %d at %s, want %s", tc.i, n, limit, v.Stage, tc.want)
		}
	}
}

// TestDecideDedupeConcurrent decides identical and different rejected
// proposals from many goroutines, with a cap small enough to evict while
// they do; run it with -race.
func TestDecideDedupeConcurrent(t *testing.T) {
	h := newHarness(t, func(h *harness) {
		h.cfg.Policy = denyingPolicy()
		h.cfg.DedupeMax = 16
	})
	const workers, each = 8, 40
	data := make([][][]byte, workers)
	for w := range workers {
		for i := range each {
			data[w] = append(data[w], withID(t, fmt.Sprintf("w%d-%d", w, i),
				map[string]any{"reason": fmt.Sprintf("reason %d", i%20), "target": nil}))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i, d := range data[w] {
				v, err := h.decideOn(t.Context(), h.stream.trail(), testSubject, d, "")
				switch {
				case err != nil:
					errs <- err
				case v.Outcome != gated.OutcomeRejected || (v.Stage != gated.StagePolicy && v.Stage != gated.StageDedupe):
					errs <- fmt.Errorf("w%d-%d: %s at %s", w, i, v.Outcome, v.Stage)
				case v.Stage == gated.StageDedupe && !strings.HasPrefix(v.DuplicateOf, "w"):
					errs <- fmt.Errorf("w%d-%d: duplicate of %q", w, i, v.DuplicateOf)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := h.store.size(); got != workers*each {
		t.Errorf("store holds %d verdicts, want %d", got, workers*each)
	}

	// The memory still answers after the churn.
	first, _ := h.mustDecide(t, testSubject, withID(t, "after-1", map[string]any{"reason": "after", "target": nil}), "")
	v, _ := h.mustDecide(t, testSubject, withID(t, "after-2", map[string]any{"reason": "after", "target": nil}), "")
	if first.Stage != gated.StagePolicy || v.Stage != gated.StageDedupe || v.DuplicateOf != "after-1" {
		t.Errorf("after the churn: %s then %s (duplicate of %q), want policy then dedupe of after-1", first.Stage, v.Stage, v.DuplicateOf)
	}
}
