package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/grant"
)

// barrier answers every review with an approval once n reviews have
// begun, so that n proposals have all read their target's history before
// any is decided.
func barrier(n int) answerFunc {
	var mu sync.Mutex
	begun := 0
	all := make(chan struct{})
	return func(ctx context.Context, _ engine.ReviewRequest) (engine.ReviewResult, error) {
		mu.Lock()
		if begun++; begun == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			return approval(), nil
		case <-ctx.Done():
			return engine.ReviewResult{}, ctx.Err()
		}
	}
}

func (s *memStore) history(tenant, key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, v := range s.targets[tenant+"."+key].Verdicts {
		ids = append(ids, v.ProposalID)
	}
	return ids
}

// denial returns the policy's denial of v by rule, or fails.
func denial(t *testing.T, v *engine.Verdict, rule string) engine.Deny {
	t.Helper()
	if v.Policy != nil {
		for _, d := range v.Policy.Denies {
			if d.Rule == rule {
				return d
			}
		}
	}
	t.Fatalf("verdict %s at %s (%s) has no %s denial: %+v", v.Outcome, v.Stage, v.Reason, rule, v.Policy)
	return engine.Deny{}
}

// Two proposals on one target decided at once both pass the policy on an
// empty history and are both approved by their reviewers: the first to
// join the target's history stands, and the other is decided again by
// the policy on the history as it then stands, and rejected.
func TestTargetRaceRechecksThePolicy(t *testing.T) {
	for _, tc := range []struct {
		note   string
		agents [2]string
		rule   string
	}{
		{note: "two agents", agents: [2]string{"agent-a", "agent-b"}, rule: "parallel_operation"},
		{note: "one agent", agents: [2]string{"agent-a", "agent-a"}, rule: "target_cooldown"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			var ring *grant.Ring
			h := newHarness(t, withGrants(t, &ring), func(h *harness) { h.reviewer.answer = barrier(2) })
			data := make([][]byte, 2)
			verdicts := make([]*engine.Verdict, 2)
			trails := make([]*memTrail, 2)
			var wg sync.WaitGroup
			for i := range data {
				data[i] = proposalJSON(t, map[string]any{"id": fmt.Sprintf("p%d", i+1),
					"requested_by": map[string]any{"agent": tc.agents[i], "session": "s"}})
				trails[i] = h.stream.trail()
				wg.Go(func() {
					v, err := h.decideOn(t.Context(), trails[i], testSubject, data[i], "")
					if err != nil {
						t.Errorf("Decide p%d: %v", i+1, err)
					}
					verdicts[i] = v
				})
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			win, lose := 0, 1
			if !verdicts[0].Approved {
				win, lose = 1, 0
			}
			if !verdicts[win].Approved || verdicts[lose].Approved {
				t.Fatalf("verdicts %s and %s: want exactly one approval", verdicts[0].Outcome, verdicts[1].Outcome)
			}
			for i := range data {
				h.checkFresh(t, verdicts[i], trails[i], data[i])
			}
			w, l := verdicts[win], verdicts[lose]
			if l.Outcome != engine.OutcomeRejected || l.Stage != engine.StagePolicy || l.Grant != "" {
				t.Errorf("the other verdict is %s at %s with grant %q, want rejected at policy with none", l.Outcome, l.Stage, l.Grant)
			}
			if d := denial(t, l, tc.rule); !strings.Contains(d.Message, w.ProposalID) || !strings.Contains(l.Reason, w.ProposalID) {
				t.Errorf("the rejection does not name %s: %q, reason %q", w.ProposalID, d.Message, l.Reason)
			}
			if len(l.Reviews) != 1 || l.Reviews[0].Decision != engine.DecisionApprove {
				t.Errorf("the overruled review is not on the record: %+v", l.Reviews)
			}
			if w.Grant == "" {
				t.Error("the approval carries no grant")
			}
			if got := trails[lose].names(); !slices.Contains(got, engine.EventPolicyRechecked) || slices.Contains(got, engine.EventGrantIssued) {
				t.Errorf("the rejected proposal's events %v: want %s and no %s", got, engine.EventPolicyRechecked, engine.EventGrantIssued)
			}
			if got := h.store.history("acme", w.TargetKey); !slices.Equal(got, []string{w.ProposalID}) {
				t.Errorf("target history %v, want only %s", got, w.ProposalID)
			}
			if stored := h.store.stored(t, "acme", l.ProposalID); stored.Outcome != engine.OutcomeRejected {
				t.Errorf("the store holds %s for %s", stored.Outcome, l.ProposalID)
			}
		})
	}
}

// A decision that crashes after its approval joined the target's history
// and before its verdict was stored leaves the target closed for the
// policy's window; the proposal's redelivery is decided again, and its own
// entry does not deny it.
func TestTargetJoinedBeforeACrash(t *testing.T) {
	h := newHarness(t)
	crash := errors.New("the store went away")
	h.store.createErr = crash
	first := proposalJSON(t, nil)
	if _, err := h.decideOn(t.Context(), h.stream.trail(), testSubject, first, ""); !errors.Is(err, crash) {
		t.Fatalf("Decide with the store failing: %v", err)
	}
	if got := h.store.history("acme", proposalKey(t, first)); !slices.Equal(got, []string{"p1"}) {
		t.Fatalf("target history after the crash %v, want [p1]", got)
	}
	h.store.createErr = nil

	other, _ := h.mustDecide(t, testSubject, proposalJSON(t, map[string]any{"id": "p2",
		"requested_by": map[string]any{"agent": "another-agent"}}), "")
	if other.Approved || !strings.Contains(denial(t, other, "parallel_operation").Message, "p1") {
		t.Fatalf("another proposal on the target: %s (%s), want denied by parallel_operation naming p1", other.Outcome, other.Reason)
	}
	again, _ := h.mustDecide(t, testSubject, first, "")
	if !again.Approved {
		t.Fatalf("the redelivery: %s (%s), want approved", again.Outcome, again.Reason)
	}
	// The reviewer of the redelivery is not shown the entry its own
	// crashed decision left: a reviewer that checks for parallel
	// operations (the sop reviewer's gate) would reject the proposal for
	// colliding with itself.
	reqs := h.reviewer.requests()
	for _, v := range reqs[len(reqs)-1].History {
		if v.ProposalID == "p1" {
			t.Errorf("the redelivery's reviewer was shown its own approval in the target's history: %+v", reqs[len(reqs)-1].History)
		}
	}
	if got := h.store.history("acme", again.TargetKey); !slices.Equal(got, []string{"p1"}) {
		t.Errorf("target history %v, want p1 once", got)
	}
	replay, err := h.decideOn(t.Context(), h.stream.trail(), testSubject, first, "")
	if err != nil || replay.AuditSeq != again.AuditSeq || !replay.Approved {
		t.Errorf("replay %+v, %v: want the stored approval", replay, err)
	}
}

// Only an approval of a mutating action joins a target's history.
func TestTargetJoinsOnlyApprovalsOnTargets(t *testing.T) {
	for _, tc := range []struct {
		note  string
		data  map[string]any
		joins int
	}{
		{note: "a write approved", joins: 1},
		{note: "a read approved", data: map[string]any{"class": "read", "blast_radius": nil}, joins: 0},
		{note: "a write denied", data: map[string]any{"flags": map[string]any{"skip_review": true}}, joins: 0},
	} {
		t.Run(tc.note, func(t *testing.T) {
			h := newHarness(t)
			h.mustDecide(t, testSubject, proposalJSON(t, tc.data), "")
			h.store.mu.Lock()
			joins := h.store.joins
			h.store.mu.Unlock()
			if joins != tc.joins {
				t.Errorf("%d joins, want %d", joins, tc.joins)
			}
		})
	}
}

func proposalKey(t *testing.T, data []byte) string {
	t.Helper()
	p, err := engine.DecodeProposal(data, "acme", "host_restart_service", engine.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return p.TargetKey()
}

// An operator's approval of a held action joins the target's history like
// any approval; when another approval joined the target while the action
// was held, the operator's approval is refused at stage policy, naming it.
func TestHeldApprovalRechecksTheTarget(t *testing.T) {
	for _, tc := range []struct {
		note    string
		between bool
	}{
		{note: "nothing approved meanwhile"},
		{note: "another approval meanwhile", between: true},
	} {
		t.Run(tc.note, func(t *testing.T) {
			ev, err := holdingPolicy()
			if err != nil {
				t.Fatal(err)
			}
			var ring *grant.Ring
			h := newHarness(t, withGrants(t, &ring), func(h *harness) { h.cfg.Policy = ev })
			held := decideHeld(t, h)
			if tc.between {
				v, _ := h.mustDecide(t, testSubject, proposalJSON(t, map[string]any{"id": "p2",
					"target": map[string]any{"zone": "example.org"}, "requested_by": map[string]any{"agent": "another-agent"}}), "")
				if !v.Approved {
					t.Fatalf("the other proposal: %s (%s)", v.Outcome, v.Reason)
				}
			}
			h.advance(time.Minute)
			tr := h.stream.trail()
			v, err := h.eng.Resolve(t.Context(), actionDecision(held, engine.OperatorApprove), tr)
			if err != nil {
				t.Fatal(err)
			}
			history := h.store.history("acme", held.TargetKey)
			if !tc.between {
				if !v.Approved || v.Grant == "" || !slices.Equal(history, []string{"p1"}) {
					t.Fatalf("verdict %s (%s), grant %t, history %v: want approved, with a grant, in the history", v.Outcome, v.Reason, v.Grant != "", history)
				}
				return
			}
			if v.Approved || v.Outcome != engine.OutcomeRejected || v.Stage != engine.StagePolicy || v.Grant != "" {
				t.Fatalf("verdict %s at %s (%s), grant %t: want rejected at policy, no grant", v.Outcome, v.Stage, v.Reason, v.Grant != "")
			}
			if d := denial(t, v, "parallel_operation"); !strings.Contains(d.Message, "p2") || !strings.Contains(v.Reason, "p2") {
				t.Errorf("the refusal does not name p2: %q, reason %q", d.Message, v.Reason)
			}
			if !slices.Equal(history, []string{"p2"}) {
				t.Errorf("target history %v, want [p2]", history)
			}
			if stored := h.store.stored(t, "acme", "p1"); stored.Outcome != engine.OutcomeRejected {
				t.Errorf("the store holds %s", stored.Outcome)
			}
			if got := tr.names(); !slices.Contains(got, engine.EventPolicyRechecked) || slices.Contains(got, engine.EventGrantIssued) {
				t.Errorf("events %v: want %s and no %s", got, engine.EventPolicyRechecked, engine.EventGrantIssued)
			}
		})
	}
}
