package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/grant"
	"github.com/gated/gated/policies"
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
func denial(t *testing.T, v *gated.Verdict, rule string) gated.Deny {
	t.Helper()
	if v.Policy != nil {
		for _, d := range v.Policy.Denies {
			if d.Rule == rule {
				return d
			}
		}
	}
	t.Fatalf("verdict %s at %s (%s) has no %s denial: %+v", v.Outcome, v.Stage, v.Reason, rule, v.Policy)
	return gated.Deny{}
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
			for i := range data {
				data[i] = proposalJSON(t, map[string]any{"id": fmt.Sprintf("p%d", i+1),
					"requested_by": map[string]any{"agent": tc.agents[i], "session": "s"}})
			}
			verdicts, trails := h.decideAtOnce(t, data)
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
			if l.Outcome != gated.OutcomeRejected || l.Stage != gated.StagePolicy || l.Grant != "" {
				t.Errorf("the other verdict is %s at %s with grant %q, want rejected at policy with none", l.Outcome, l.Stage, l.Grant)
			}
			if d := denial(t, l, tc.rule); !strings.Contains(d.Message, w.ProposalID) || !strings.Contains(l.Reason, w.ProposalID) {
				t.Errorf("the rejection does not name %s: %q, reason %q", w.ProposalID, d.Message, l.Reason)
			}
			if len(l.Reviews) != 1 || l.Reviews[0].Decision != gated.DecisionApprove {
				t.Errorf("the overruled review is not on the record: %+v", l.Reviews)
			}
			if w.Grant == "" {
				t.Error("the approval carries no grant")
			}
			if got := trails[lose].names(); !slices.Contains(got, gated.EventPolicyRechecked) || slices.Contains(got, gated.EventGrantIssued) {
				t.Errorf("the rejected proposal's events %v: want %s and no %s", got, gated.EventPolicyRechecked, gated.EventGrantIssued)
			}
			if got := h.store.history("acme", w.TargetKey); !slices.Equal(got, []string{w.ProposalID}) {
				t.Errorf("target history %v, want only %s", got, w.ProposalID)
			}
			if stored := h.store.stored(t, "acme", l.ProposalID); stored.Outcome != gated.OutcomeRejected {
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
	p, err := gated.DecodeProposal(data, "acme", "host_restart_service", gated.Limits{})
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
			if v.Approved || v.Outcome != gated.OutcomeRejected || v.Stage != gated.StagePolicy || v.Grant != "" {
				t.Fatalf("verdict %s at %s (%s), grant %t: want rejected at policy, no grant", v.Outcome, v.Stage, v.Reason, v.Grant != "")
			}
			if d := denial(t, v, "parallel_operation"); !strings.Contains(d.Message, "p2") || !strings.Contains(v.Reason, "p2") {
				t.Errorf("the refusal does not name p2: %q, reason %q", d.Message, v.Reason)
			}
			if !slices.Equal(history, []string{"p2"}) {
				t.Errorf("target history %v, want [p2]", history)
			}
			if stored := h.store.stored(t, "acme", "p1"); stored.Outcome != gated.OutcomeRejected {
				t.Errorf("the store holds %s", stored.Outcome)
			}
			if got := tr.names(); !slices.Contains(got, gated.EventPolicyRechecked) || slices.Contains(got, gated.EventGrantIssued) {
				t.Errorf("events %v: want %s and no %s", got, gated.EventPolicyRechecked, gated.EventGrantIssued)
			}
		})
	}
}

// recentChange is a policy author's module: target_recently_changed holds
// when another proposal was approved on the target within the hour.
const recentChange = `package gated

target_recently_changed if {
	some h in input.history
	h.outcome == "approved"
	h.proposal_id != input.proposal.id
	now_ns - h.decided_at_ns < time.parse_duration_ns("1h")
}
`

// authorBundle compiles the default bundle as a policy author may change
// it: without parallel_operation and target_cooldown (so approvals on one
// target may overlap), with recentChange and extra added, each edit of
// gated.rego applied (old text to new, each found exactly once), and
// config merged into data.gated.config.
func authorBundle(t *testing.T, extra string, edits [][2]string, config map[string]any) *policies.Evaluator {
	t.Helper()
	b, err := policies.Default()
	if err != nil {
		t.Fatal(err)
	}
	ops := b.Modules["operations.rego"]
	from := strings.Index(ops, `deny contains {"rule": "parallel_operation"`)
	to := strings.Index(ops, "same_agent(h) if {")
	if from < 0 || to < from {
		t.Fatal("operations.rego no longer has parallel_operation and target_cooldown before same_agent: update authorBundle")
	}
	b.Modules["operations.rego"] = ops[:from] + ops[to:]
	b.Modules["author.rego"] = recentChange + extra
	for _, e := range edits {
		if n := strings.Count(b.Modules["gated.rego"], e[0]); n != 1 {
			t.Fatalf("gated.rego has %q %d times, want once: update the edit", e[0], n)
		}
		b.Modules["gated.rego"] = strings.Replace(b.Modules["gated.rego"], e[0], e[1], 1)
	}
	maps.Copy(b.Data["gated"].(map[string]any)["config"].(map[string]any), config)
	ev, err := policies.Compile(t.Context(), b)
	if err != nil {
		t.Fatalf("compiling the author's bundle: %v", err)
	}
	return ev
}

// joinBarrier holds every proposal's first Join until n proposals have
// come to join: all of them read the target's history before any joined
// it.
func joinBarrier(n int) func(*gated.Verdict) {
	var mu sync.Mutex
	seen := map[string]bool{}
	all := make(chan struct{})
	return func(v *gated.Verdict) {
		mu.Lock()
		if !seen[v.ProposalID] {
			if seen[v.ProposalID] = true; len(seen) == n {
				close(all)
			}
		}
		mu.Unlock()
		<-all
	}
}

// rechecked returns the data of the policy.rechecked record on tr, or
// fails.
func rechecked(t *testing.T, tr *memTrail) (d struct {
	Denies  []gated.Deny `json:"denies"`
	Holds   []gated.Hold `json:"holds"`
	Changed []string     `json:"changed"`
}) {
	t.Helper()
	for _, ev := range tr.all() {
		if ev.Event == gated.EventPolicyRechecked {
			decodeData(t, ev, &d)
			return d
		}
	}
	t.Fatalf("no %s record among %v", gated.EventPolicyRechecked, tr.names())
	return d
}

// Two proposals on one target are decided at once under a policy that
// lets approvals on one target overlap, but asks more of a proposal whose
// target another approval changed within the hour: a hold for an
// operator, a review where the policy alone approved, a larger quorum,
// another persona, fewer reviewer tools. Both read an empty history and
// are approved; the second to join finds the target changed, and the
// policy on the history as it now stands asks for more than its approval
// had. That approval must not stand: it is rejected at stage policy by
// target_changed, naming the approval that joined and what the policy now
// asks, with no grant, and audited. The same proposal sent again (a new
// id) is decided afresh on the history as it stands, not answered by the
// rejection, and gets what the policy asks.
func TestTargetRaceRechecksWhatThePolicyAsks(t *testing.T) {
	personas := listedPersonas{"reviewer": reviewerPersona(), "senior": readOnlyPersona("senior")}
	for _, tc := range []struct {
		note     string
		proposal map[string]any
		extra    string
		edits    [][2]string
		config   map[string]any
		// asks is a phrase the rejection must carry; none means the
		// approval stands.
		asks string
		// again checks the same proposal sent again after the race.
		again func(t *testing.T, h *harness, v *gated.Verdict)
	}{
		{
			note:  "a hold for an operator",
			extra: `hold contains {"rule": "hold_recent_change", "why": "the target changed within the hour"} if target_recently_changed` + "\n",
			asks:  "holds it for an operator",
			again: func(t *testing.T, _ *harness, v *gated.Verdict) {
				if v.Outcome != gated.OutcomeBlocked || v.AwaitingOperator == nil || v.AwaitingOperator.Rule != "hold_recent_change" {
					t.Errorf("sent again: %s at %s (%s), awaiting %+v; want held for an operator by hold_recent_change", v.Outcome, v.Stage, v.Reason, v.AwaitingOperator)
				}
			},
		},
		{
			note:   "a review where the policy alone approved",
			edits:  [][2]string{{"} if {\n\treview_skipped\n}", "} if {\n\treview_skipped\n\tnot target_recently_changed\n}"}},
			config: map[string]any{"skip_review_actions": []any{"host_restart_service"}},
			asks:   "requires a review",
			again: func(t *testing.T, h *harness, v *gated.Verdict) {
				if !v.Approved || v.Stage != gated.StageReview || len(v.Reviews) != 1 || h.reviewer.calls() != 1 {
					t.Errorf("sent again: %s at %s (%s), %d reviews, %d review calls; want approved by one review", v.Outcome, v.Stage, v.Reason, len(v.Reviews), h.reviewer.calls())
				}
			},
		},
		{
			note:  "a larger quorum",
			edits: [][2]string{{"} else := 1\n", "} else := 2 if {\n\ttarget_recently_changed\n} else := 1\n"}},
			asks:  "quorum of 2",
			again: func(t *testing.T, _ *harness, v *gated.Verdict) {
				if !v.Approved || len(v.Reviews) != 2 {
					t.Errorf("sent again: %s (%s) with %d reviews; want approved by two", v.Outcome, v.Reason, len(v.Reviews))
				}
			},
		},
		{
			note:  "another persona",
			edits: [][2]string{{"persona_name := proposal_reviewer if {", "persona_name := \"senior\" if {\n\ttarget_recently_changed\n} else := proposal_reviewer if {"}},
			asks:  `persona "senior"`,
			again: func(t *testing.T, _ *harness, v *gated.Verdict) {
				if !v.Approved || len(v.Reviews) != 1 || v.Reviews[0].Persona != "senior" {
					t.Errorf("sent again: %s (%s), reviews %+v; want approved by senior", v.Outcome, v.Reason, v.Reviews)
				}
			},
		},
		{
			note:  "fewer reviewer tools",
			extra: `denied_tools contains "get_verdict_history" if target_recently_changed` + "\n",
			asks:  "get_verdict_history",
			again: func(t *testing.T, h *harness, v *gated.Verdict) {
				reqs := h.reviewer.requests()
				if !v.Approved || len(reqs) != 1 {
					t.Fatalf("sent again: %s (%s) after %d reviews; want approved by one", v.Outcome, v.Reason, len(reqs))
				}
				if slices.Contains(reqs[0].Tools, "get_verdict_history") || !slices.Contains(reqs[0].DeniedTools, "get_verdict_history") {
					t.Errorf("sent again: tools %v, denied %v; want get_verdict_history denied", reqs[0].Tools, reqs[0].DeniedTools)
				}
			},
		},
		{
			note:     "a quorum reviewer the policy now refuses",
			proposal: map[string]any{"blast_radius": "tenant_wide"},
			extra: `deny contains {"rule": "senior_after_change", "message": "senior reviews no changed target"} if {
	target_recently_changed
	input.persona.name == "senior"
}
`,
			asks: `no longer lets persona "senior" review`,
			again: func(t *testing.T, _ *harness, v *gated.Verdict) {
				if v.Approved || v.Outcome != gated.OutcomeBlocked || v.Stage != gated.StageReview {
					t.Errorf("sent again: %s at %s (%s); want blocked at review, short of a quorum", v.Outcome, v.Stage, v.Reason)
				}
			},
		},
		{
			note:     "fewer tools for a quorum reviewer",
			proposal: map[string]any{"blast_radius": "tenant_wide"},
			extra: `denied_tools contains "get_proposal" if {
	target_recently_changed
	input.persona.name == "senior"
}
`,
			asks: `takes get_proposal from the tool bag of persona "senior"`,
			again: func(t *testing.T, h *harness, v *gated.Verdict) {
				if !v.Approved || len(v.Reviews) != 2 {
					t.Fatalf("sent again: %s (%s) with %d reviews; want approved by two", v.Outcome, v.Reason, len(v.Reviews))
				}
				for _, req := range h.reviewer.requests() {
					if req.Persona.Name == "senior" && slices.Contains(req.Tools, "get_proposal") {
						t.Errorf("sent again: senior got get_proposal, which the policy now denies it")
					}
				}
			},
		},
		{
			note:     "less: a quorum where one reviewer now suffices",
			proposal: map[string]any{"blast_radius": "tenant_wide"},
			edits:    [][2]string{{"class_quorum := tenant_wide_quorum if {", "class_quorum := 1 if {\n\ttarget_recently_changed\n} else := tenant_wide_quorum if {"}},
		},
		{
			note: "nothing more",
		},
	} {
		t.Run(tc.note, func(t *testing.T) {
			var ring *grant.Ring
			h := newHarness(t, withGrants(t, &ring), func(h *harness) {
				h.cfg.Policy = authorBundle(t, tc.extra, tc.edits, tc.config)
				h.cfg.Personas = personas
				h.store.beforeJoin = joinBarrier(2)
			})
			data := make([][]byte, 2)
			for i := range data {
				p := map[string]any{"id": fmt.Sprintf("p%d", i+1),
					"requested_by": map[string]any{"agent": fmt.Sprintf("agent-%d", i+1), "session": "s"}}
				maps.Copy(p, tc.proposal)
				data[i] = proposalJSON(t, p)
			}
			verdicts, trails := h.decideAtOnce(t, data)
			for i := range data {
				h.checkFresh(t, verdicts[i], trails[i], data[i])
			}
			if tc.asks == "" {
				for _, v := range verdicts {
					if !v.Approved || v.Grant == "" {
						t.Errorf("%s: %s at %s (%s): want approved with a grant", v.ProposalID, v.Outcome, v.Stage, v.Reason)
					}
				}
				if got := h.store.history("acme", verdicts[0].TargetKey); len(got) != 2 {
					t.Errorf("target history %v, want both approvals", got)
				}
				// The second to join was decided again, and stood.
				n := 0
				for _, tr := range trails {
					if slices.Contains(tr.names(), gated.EventPolicyRechecked) {
						n++
						if rc := rechecked(t, tr); len(rc.Changed) != 0 || len(rc.Denies) != 0 {
							t.Errorf("%s record: denies %v, changed %q: want none", gated.EventPolicyRechecked, rc.Denies, rc.Changed)
						}
					}
				}
				if n != 1 {
					t.Errorf("%d proposals were decided again, want 1", n)
				}
				return
			}
			win, lose := 0, 1
			if !verdicts[0].Approved {
				win, lose = 1, 0
			}
			w, l := verdicts[win], verdicts[lose]
			if !w.Approved || l.Approved {
				t.Fatalf("verdicts %s (%s) and %s (%s): want exactly one approval", verdicts[0].Outcome, verdicts[0].Reason, verdicts[1].Outcome, verdicts[1].Reason)
			}
			if l.Outcome != gated.OutcomeRejected || l.Stage != gated.StagePolicy || l.Grant != "" || l.AwaitingOperator != nil {
				t.Errorf("the other verdict is %s at %s with grant %q: want rejected at policy with none", l.Outcome, l.Stage, l.Grant)
			}
			d := denial(t, l, engine.RuleTargetChanged)
			if !strings.Contains(d.Message, w.ProposalID) || !strings.Contains(d.Message, tc.asks) || !strings.Contains(l.Reason, tc.asks) {
				t.Errorf("the rejection does not name %s and %q: %q, reason %q", w.ProposalID, tc.asks, d.Message, l.Reason)
			}
			if !slices.Equal(l.Policy.Rules, []string{engine.RuleTargetChanged}) {
				t.Errorf("policy rules %v, want [%s]", l.Policy.Rules, engine.RuleTargetChanged)
			}
			if rc := rechecked(t, trails[lose]); len(rc.Denies) != 0 || len(rc.Changed) == 0 || !strings.Contains(strings.Join(rc.Changed, "; "), tc.asks) {
				t.Errorf("%s record: denies %v, changed %q: want no denies and what changed", gated.EventPolicyRechecked, rc.Denies, rc.Changed)
			}
			if slices.Contains(trails[lose].names(), gated.EventGrantIssued) {
				t.Errorf("the rejected proposal's events %v have %s", trails[lose].names(), gated.EventGrantIssued)
			}
			if got := h.store.history("acme", w.TargetKey); !slices.Equal(got, []string{w.ProposalID}) {
				t.Errorf("target history %v, want only %s", got, w.ProposalID)
			}
			if stored := h.store.stored(t, "acme", l.ProposalID); stored.Outcome != gated.OutcomeRejected {
				t.Errorf("the store holds %s for %s", stored.Outcome, l.ProposalID)
			}

			// The same proposal again, under a new id: decided afresh.
			h.reviewer.mu.Lock()
			h.reviewer.reqs = nil
			h.reviewer.mu.Unlock()
			var p map[string]any
			if err := json.Unmarshal(data[lose], &p); err != nil {
				t.Fatal(err)
			}
			p["id"] = "p3"
			again, _ := h.mustDecide(t, testSubject, proposalJSON(t, p), "")
			if again.Stage == gated.StageDedupe {
				t.Fatalf("sent again: answered at stage dedupe by the race's rejection (%s)", again.Reason)
			}
			tc.again(t, h, again)
		})
	}
}

// decideAtOnce decides every proposal of data at the same time, each on a
// trail of its own, and returns their verdicts and trails in data's
// order; the test stops when any decision fails.
func (h *harness) decideAtOnce(t *testing.T, data [][]byte) ([]*gated.Verdict, []*memTrail) {
	t.Helper()
	verdicts := make([]*gated.Verdict, len(data))
	trails := make([]*memTrail, len(data))
	var wg sync.WaitGroup
	for i := range data {
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
	return verdicts, trails
}
