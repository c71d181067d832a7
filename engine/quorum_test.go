package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/personas"
)

// The registry gated serves with must offer the listing that fills a
// quorum from the loaded personas.
var _ engine.PersonaLister = (*personas.Registry)(nil)

// policyFunc is a Policy whose decision a test computes per input.
type policyFunc struct {
	revision string
	eval     func(engine.PolicyInput) engine.PolicyDecision
}

func (p policyFunc) Revision() string { return p.revision }

func (p policyFunc) Evaluate(_ context.Context, in engine.PolicyInput) (engine.PolicyDecision, error) {
	d := p.eval(in)
	d.Revision = p.revision
	return d, nil
}

// quorumPolicy routes every proposal to persona reviewer with a quorum and
// the policy's preferred further personas. It denies the personas named in
// deny and waives review for those in waive, and gives each persona its
// own tools as its tool bag, so a test can tell whose bag a review got.
func quorumPolicy(quorum int, preferred []string, deny, waive []string) policyFunc {
	return policyFunc{revision: "rev-quorum", eval: func(in engine.PolicyInput) engine.PolicyDecision {
		d := engine.PolicyDecision{
			Review: gated.Route{Required: true, Persona: "reviewer", Quorum: quorum, Why: "tenant-wide change", Personas: preferred},
		}
		if in.Persona == nil {
			return d
		}
		d.ReviewerTools = slices.Clone(in.Persona.Tools)
		if slices.Contains(deny, in.Persona.Name) {
			d.Denies = []gated.Deny{{Rule: "self_review", Message: "no"}}
		}
		if slices.Contains(waive, in.Persona.Name) {
			d.Review = gated.Route{Why: "waived"}
		}
		return d
	}}
}

// readOnlyPersona is a persona like reviewer under another name, with a
// tool of its own.
func readOnlyPersona(name string) *engine.Persona {
	p := reviewerPersona()
	p.Name = name
	p.Tools = append(p.Tools, "tool_of_"+name)
	return p
}

func quorumPersonas(names ...string) listedPersonas {
	s := listedPersonas{}
	for _, n := range names {
		s[n] = readOnlyPersona(n)
	}
	return s
}

// byPersona answers as answers[persona] does, and approves otherwise.
func byPersona(answers map[string]answerFunc) answerFunc {
	return func(ctx context.Context, req engine.ReviewRequest) (engine.ReviewResult, error) {
		if a, ok := answers[req.Persona.Name]; ok {
			return a(ctx, req)
		}
		return approval(), nil
	}
}

func rejection(note string) answerFunc {
	return answer(engine.ReviewResult{
		Plugin: "sop", Text: "Decision: reject\nNotes: " + note, Decision: gated.DecisionReject, Notes: note,
	}, nil)
}

func TestDecideQuorum(t *testing.T) {
	tests := []struct {
		note      string
		personas  engine.Personas // default: reviewer, dba, ops, zed, all listed
		quorum    int
		preferred []string
		deny      []string
		waive     []string
		routeErr  map[string]error
		answers   map[string]answerFunc
		timeout   time.Duration

		wantOutcome gated.Outcome
		wantReviews []string // personas in verdict.reviews, in order
		wantCalls   int
		wantReason  []string
		// wantDecisions are the reviews' decisions, when set.
		wantDecisions []gated.ReviewDecision
	}{
		{
			note: "two approving personas", quorum: 2,
			wantOutcome: gated.OutcomeApproved, wantReviews: []string{"reviewer", "dba"}, wantCalls: 2,
			wantReason:    []string{"2 of 2 reviewers approved (reviewer, dba)"},
			wantDecisions: []gated.ReviewDecision{gated.DecisionApprove, gated.DecisionApprove},
		},
		{
			note: "one reviewer rejects", quorum: 2,
			answers:     map[string]answerFunc{"dba": rejection("the replica is behind.")},
			wantOutcome: gated.OutcomeRejected, wantReviews: []string{"reviewer", "dba"}, wantCalls: 2,
			wantReason:    []string{"1 of 2 reviewers rejected (dba)", "the replica is behind"},
			wantDecisions: []gated.ReviewDecision{gated.DecisionApprove, gated.DecisionReject},
		},
		{
			note: "one reviewer errors", quorum: 2,
			answers:     map[string]answerFunc{"dba": answer(engine.ReviewResult{}, errors.New("plugin sop exited: signal: killed"))},
			wantOutcome: gated.OutcomeError, wantReviews: []string{"reviewer", "dba"}, wantCalls: 2,
			wantReason:    []string{"1 of 2 reviewers failed (dba: failed)"},
			wantDecisions: []gated.ReviewDecision{gated.DecisionApprove, gated.DecisionReject},
		},
		{
			note: "a reviewer refusing work after it was chosen is an error", quorum: 2,
			answers:     map[string]answerFunc{"reviewer": answer(engine.ReviewResult{}, fmt.Errorf("circuit open: %w", engine.ErrNoReviewer))},
			wantOutcome: gated.OutcomeError, wantReviews: []string{"reviewer", "dba"}, wantCalls: 2,
			wantReason: []string{"1 of 2 reviewers failed (reviewer: was not available)"},
		},
		{
			note: "one reviewer passes its deadline", quorum: 2, timeout: 50 * time.Millisecond,
			answers:     map[string]answerFunc{"dba": blockUntilDone(5 * time.Second)},
			wantOutcome: gated.OutcomeTimeout, wantReviews: []string{"reviewer", "dba"}, wantCalls: 2,
			wantReason: []string{"1 of 2 reviewers passed their deadline (dba: timed out after 50ms)"},
		},
		{
			note: "a rejection outweighs a timeout and an error", quorum: 3, timeout: 50 * time.Millisecond,
			answers: map[string]answerFunc{
				"reviewer": answer(engine.ReviewResult{}, errors.New("provider down")),
				"dba":      blockUntilDone(5 * time.Second),
				"ops":      rejection("no rollback."),
			},
			wantOutcome: gated.OutcomeRejected, wantReviews: []string{"reviewer", "dba", "ops"}, wantCalls: 3,
			wantReason: []string{"1 of 3 reviewers rejected (ops)"},
		},
		{
			note: "only one eligible persona", quorum: 2, personas: quorumPersonas("reviewer"),
			wantOutcome: gated.OutcomeBlocked,
			wantReason:  []string{"quorum of 2", "only 1 is eligible (reviewer)", "no other persona"},
		},
		{
			note: "a persona the policy denies is skipped", quorum: 2, deny: []string{"dba"},
			wantOutcome: gated.OutcomeApproved, wantReviews: []string{"reviewer", "ops"}, wantCalls: 2,
		},
		{
			note: "a persona the policy waives is skipped", quorum: 2, waive: []string{"dba"},
			wantOutcome: gated.OutcomeApproved, wantReviews: []string{"reviewer", "ops"}, wantCalls: 2,
		},
		{
			note: "a persona without a reviewer is skipped", quorum: 2,
			routeErr:    map[string]error{"dba": fmt.Errorf("plugin dba is not running: %w", engine.ErrNoReviewer)},
			wantOutcome: gated.OutcomeApproved, wantReviews: []string{"reviewer", "ops"}, wantCalls: 2,
		},
		{
			note: "skipped personas are named when the quorum cannot be filled", quorum: 3, deny: []string{"dba", "zed"},
			routeErr:    map[string]error{"ops": errors.New("circuit open")},
			wantOutcome: gated.OutcomeBlocked,
			wantReason: []string{
				"quorum of 3", "only 1 is eligible", "dba (policy denies self_review)",
				"ops (reviewer sop was not available)", "zed (policy denies self_review)",
			},
		},
		{
			note: "the policy's preferred personas come first, in its order", quorum: 3, preferred: []string{"zed", "ops"},
			wantOutcome: gated.OutcomeApproved, wantReviews: []string{"reviewer", "zed", "ops"}, wantCalls: 3,
		},
		{
			note: "a preferred persona that is not loaded is skipped", quorum: 2, preferred: []string{"ghost", "ops"},
			wantOutcome: gated.OutcomeApproved, wantReviews: []string{"reviewer", "ops"}, wantCalls: 2,
		},
		{
			note: "repeated candidates count once", quorum: 3, personas: quorumPersonas("reviewer", "dba"),
			preferred:   []string{"dba", "reviewer", "dba"},
			wantOutcome: gated.OutcomeBlocked, wantReason: []string{"only 2 are eligible (reviewer, dba)"},
		},
		{
			note: "without a lister only the preferred personas are candidates", quorum: 2,
			personas:    personaSet(quorumPersonas("reviewer", "dba", "ops")),
			preferred:   []string{"ops"},
			wantOutcome: gated.OutcomeApproved, wantReviews: []string{"reviewer", "ops"}, wantCalls: 2,
		},
		{
			note: "without a lister and preferences a quorum is blocked", quorum: 2,
			personas:    personaSet(quorumPersonas("reviewer", "dba")),
			wantOutcome: gated.OutcomeBlocked, wantReason: []string{"no other persona"},
		},
		{
			note: "the routed persona is never replaced", quorum: 2,
			routeErr:    map[string]error{"reviewer": fmt.Errorf("plugin sop: %w", engine.ErrNoReviewer)},
			wantOutcome: gated.OutcomeBlocked, wantReason: []string{`no reviewer for persona "reviewer"`},
		},
		{
			note: "quorum one reviews with the routed persona only", quorum: 1,
			wantOutcome: gated.OutcomeApproved, wantReviews: []string{"reviewer"}, wantCalls: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			h := newHarness(t, func(h *harness) {
				h.cfg.Policy = quorumPolicy(tc.quorum, tc.preferred, tc.deny, tc.waive)
				h.cfg.Personas = quorumPersonas("reviewer", "dba", "ops", "zed")
				if tc.personas != nil {
					h.cfg.Personas = tc.personas
				}
				h.router.errFor = tc.routeErr
				h.reviewer.answer = byPersona(tc.answers)
				h.cfg.ReviewTimeout = tc.timeout
			})
			v, tr := h.mustDecide(t, testSubject, proposalJSON(t, nil), "")

			if v.Outcome != tc.wantOutcome || v.Stage != gated.StageReview {
				t.Errorf("verdict %s at %s, want %s at review (reason: %s)", v.Outcome, v.Stage, tc.wantOutcome, v.Reason)
			}
			for _, s := range tc.wantReason {
				if !strings.Contains(v.Reason, s) {
					t.Errorf("reason %q does not mention %q", v.Reason, s)
				}
			}
			if got := h.reviewer.calls(); got != tc.wantCalls {
				t.Errorf("reviewer called %d times, want %d", got, tc.wantCalls)
			}
			var reviewed []string
			for _, r := range v.Reviews {
				reviewed = append(reviewed, r.Persona)
			}
			if !slices.Equal(reviewed, tc.wantReviews) {
				t.Errorf("reviews by %v, want %v", reviewed, tc.wantReviews)
			}
			if tc.wantDecisions != nil {
				var got []gated.ReviewDecision
				for _, r := range v.Reviews {
					got = append(got, r.Decision)
				}
				if !slices.Equal(got, tc.wantDecisions) {
					t.Errorf("review decisions %v, want %v", got, tc.wantDecisions)
				}
			}
			for _, r := range v.Reviews {
				if r.Decision != gated.DecisionApprove && r.Decision != gated.DecisionReject {
					t.Errorf("review by %s has decision %q", r.Persona, r.Decision)
				}
			}
			if v.Policy == nil || v.Policy.Revision != "rev-quorum" {
				t.Errorf("policy part %+v, want revision rev-quorum", v.Policy)
			}
			sameVerdict(t, h.store.stored(t, "acme", "p1"), v)

			checkQuorumRequests(t, h.reviewer.requests(), tr, tc.wantCalls)
		})
	}
}

// checkQuorumRequests checks that every review ran on its own: its own id,
// tool bag, audit hook, deadline and pair of audit events.
func checkQuorumRequests(t *testing.T, reqs []engine.ReviewRequest, tr *memTrail, n int) {
	t.Helper()
	ids := map[string]bool{}
	for _, req := range reqs {
		if req.ReviewID == "" || ids[req.ReviewID] {
			t.Errorf("review id %q is empty or shared", req.ReviewID)
		}
		ids[req.ReviewID] = true
		if !slices.Contains(req.Tools, "tool_of_"+req.Persona.Name) || len(req.Tools) != len(req.Persona.Tools) {
			t.Errorf("persona %s got tools %v, want its own bag %v", req.Persona.Name, req.Tools, req.Persona.Tools)
		}
		if req.Audit == nil {
			t.Errorf("review by %s has no audit hook", req.Persona.Name)
		}
		if req.Deadline.IsZero() || req.PolicyRevision != "rev-quorum" {
			t.Errorf("review by %s: deadline %v, policy revision %q", req.Persona.Name, req.Deadline, req.PolicyRevision)
		}
	}
	started, finished := map[string]bool{}, map[string]bool{}
	for _, ev := range tr.all() {
		var data struct {
			ReviewID string `json:"review_id"`
			Quorum   int    `json:"quorum"`
		}
		switch ev.Event {
		case gated.EventReviewStarted:
			if err := json.Unmarshal(ev.Data, &data); err != nil {
				t.Fatal(err)
			}
			started[data.ReviewID] = true
			if n > 1 && data.Quorum != n {
				t.Errorf("review.started says quorum %d, want %d", data.Quorum, n)
			}
		case gated.EventReviewDone:
			if err := json.Unmarshal(ev.Data, &data); err != nil {
				t.Fatal(err)
			}
			finished[data.ReviewID] = true
		}
	}
	if len(started) != n || len(finished) != n {
		t.Errorf("%d reviews started and %d finished on the trail, want %d each", len(started), len(finished), n)
	}
	for id := range ids {
		if !started[id] || !finished[id] {
			t.Errorf("review %s has no started or finished event", id)
		}
	}
}

// TestDecideQuorumFailedReviewIsListed checks what a failed review of a
// quorum looks like in the verdict: a rejection that says, in gated's
// words, that the review failed; the reviewer's error is not in it.
func TestDecideQuorumFailedReviewIsListed(t *testing.T) {
	h := newHarness(t, func(h *harness) {
		h.cfg.Policy = quorumPolicy(2, nil, nil, nil)
		h.cfg.Personas = quorumPersonas("reviewer", "dba")
		h.reviewer.answer = byPersona(map[string]answerFunc{
			"dba": answer(approval(), errors.New("stream broken after the answer")),
		})
	})
	v, _ := h.mustDecide(t, testSubject, proposalJSON(t, nil), "")
	if v.Outcome != gated.OutcomeError || v.Approved {
		t.Fatalf("verdict %s (approved %v), want error: %s", v.Outcome, v.Approved, v.Reason)
	}
	if len(v.Reviews) != 2 {
		t.Fatalf("%d reviews, want 2", len(v.Reviews))
	}
	failed := v.Reviews[1]
	if failed.Persona != "dba" || failed.Plugin != "sop" || failed.Decision != gated.DecisionReject ||
		failed.Notes != "review failed: reviewer sop (persona dba) failed" || failed.DecisionText != "" {
		t.Errorf("failed review listed as %+v, want a rejection by dba that says it failed and no answer", failed)
	}
	if strings.Contains(v.Reason, "stream broken") || strings.Contains(failed.Notes, "stream broken") {
		t.Errorf("the reviewer's error reached the verdict: reason %q, notes %q", v.Reason, failed.Notes)
	}
}

// TestDecideQuorumReviewsRunConcurrently has each reviewer wait until both
// reviews are under way; reviews run one after the other would never get
// there and end in the reviewers' own error.
func TestDecideQuorumReviewsRunConcurrently(t *testing.T) {
	var inFlight atomic.Int32
	both := make(chan struct{})
	h := newHarness(t, func(h *harness) {
		h.cfg.Policy = quorumPolicy(2, nil, nil, nil)
		h.cfg.Personas = quorumPersonas("reviewer", "dba")
		h.reviewer.answer = func(ctx context.Context, _ engine.ReviewRequest) (engine.ReviewResult, error) {
			if inFlight.Add(1) == 2 {
				close(both)
			}
			select {
			case <-both:
				return approval(), nil
			case <-time.After(2 * time.Second):
				return engine.ReviewResult{}, errors.New("test reviewer: the other review never started")
			}
		}
	})
	v, _ := h.mustDecide(t, testSubject, proposalJSON(t, nil), "")
	if v.Outcome != gated.OutcomeApproved {
		t.Errorf("verdict %s, want approved: %s", v.Outcome, v.Reason)
	}
}

// TestDecideQuorumWithDefaultPolicy fills a tenant-wide quorum with the
// default bundle: the proposing agent's own persona is refused by the
// self_review rule, and a persona that may write cannot review.
func TestDecideQuorumWithDefaultPolicy(t *testing.T) {
	writer := readOnlyPersona("aardvark")
	writer.PermissionMode = "acceptEdits"
	h := newHarness(t, func(h *harness) {
		h.cfg.Personas = listedPersonas{
			"reviewer": reviewerPersona(), "aardvark": writer,
			"fleet-ops-3": readOnlyPersona("fleet-ops-3"), "ops": readOnlyPersona("ops"),
		}
	})
	v, tr := h.mustDecide(t, testSubject, proposalJSON(t, map[string]any{"blast_radius": "tenant_wide"}), "")
	if v.Outcome != gated.OutcomeApproved {
		t.Fatalf("verdict %s, want approved: %s", v.Outcome, v.Reason)
	}
	var reviewed []string
	for _, r := range v.Reviews {
		reviewed = append(reviewed, r.Persona)
	}
	if want := []string{"reviewer", "ops"}; !slices.Equal(reviewed, want) {
		t.Errorf("reviews by %v, want %v", reviewed, want)
	}
	for _, req := range h.reviewer.requests() {
		if req.Persona.Name == "ops" && !slices.Contains(req.Tools, "get_sop_text") {
			t.Errorf("ops got tools %v from the policy", req.Tools)
		}
	}
	if got := tr.names(); slices.Contains(got[2:len(got)-1], gated.EventPolicyDecided) {
		t.Errorf("events %v: evaluating candidates recorded policy decisions of their own", got)
	}

	// One more persona short, the quorum cannot be filled and the verdict
	// says why the others could not review.
	h = newHarness(t, func(h *harness) {
		h.cfg.Personas = listedPersonas{"reviewer": reviewerPersona(), "aardvark": writer, "fleet-ops-3": readOnlyPersona("fleet-ops-3")}
	})
	v, _ = h.mustDecide(t, testSubject, proposalJSON(t, map[string]any{"blast_radius": "tenant_wide"}), "")
	if v.Outcome != gated.OutcomeBlocked || h.reviewer.calls() != 0 {
		t.Fatalf("verdict %s after %d reviews, want blocked before any: %s", v.Outcome, h.reviewer.calls(), v.Reason)
	}
	for _, s := range []string{"aardvark (policy denies reviewer_tool_denied)", "fleet-ops-3 (policy denies self_review)"} {
		if !strings.Contains(v.Reason, s) {
			t.Errorf("reason %q does not say %q", v.Reason, s)
		}
	}
}

// TestDecideProposalReviewerIsAdded: a persona the proposal names reviews
// beside the one the policy routes to, never in its place, and both must
// approve; unless the policy lets it replace the routed persona.
func TestDecideProposalReviewerIsAdded(t *testing.T) {
	lenient := readOnlyPersona("oncall")
	lenient.RequiredGates = nil
	writer := readOnlyPersona("writer")
	writer.PermissionMode = "acceptEdits"
	tests := []struct {
		note        string
		reviewer    string
		answers     map[string]answerFunc
		wantOutcome gated.Outcome
		wantStage   gated.Stage
		wantReviews []string
		wantReason  string
	}{
		{note: "both approve", reviewer: "oncall", wantOutcome: gated.OutcomeApproved, wantStage: gated.StageReview,
			wantReviews: []string{"reviewer", "oncall"}, wantReason: "2 of 2 reviewers approved (reviewer, oncall)"},
		{note: "the routed persona rejects", reviewer: "oncall", answers: map[string]answerFunc{"reviewer": rejection("no SOP covers it")},
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StageReview,
			wantReviews: []string{"reviewer", "oncall"}, wantReason: "1 of 2 reviewers rejected (reviewer)"},
		{note: "the added persona rejects", reviewer: "oncall", answers: map[string]answerFunc{"oncall": rejection("not now")},
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StageReview,
			wantReviews: []string{"reviewer", "oncall"}, wantReason: "1 of 2 reviewers rejected (oncall)"},
		{note: "naming the routed persona adds nobody", reviewer: "reviewer", wantOutcome: gated.OutcomeApproved,
			wantStage: gated.StageReview, wantReviews: []string{"reviewer"}},
		{note: "an added persona that is not loaded blocks", reviewer: "ghost",
			wantOutcome: gated.OutcomeBlocked, wantStage: gated.StageReview, wantReason: `persona "ghost" to review as well, and it cannot: not loaded`},
		{note: "an added persona the policy refuses rejects", reviewer: "writer",
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StagePolicy, wantReason: "reviewer_tool_denied"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			h := newHarness(t, func(h *harness) {
				h.cfg.Personas = personaSet{"reviewer": reviewerPersona(), "oncall": lenient, "writer": writer}
				h.reviewer.answer = byPersona(tc.answers)
			})
			v, _ := h.mustDecide(t, testSubject, proposalJSON(t, map[string]any{"reviewer": tc.reviewer}), "")
			var reviewed []string
			for _, r := range v.Reviews {
				reviewed = append(reviewed, r.Persona)
			}
			if v.Outcome != tc.wantOutcome || v.Stage != tc.wantStage || !slices.Equal(reviewed, tc.wantReviews) {
				t.Fatalf("%s at %s reviewed by %v: %s; want %s at %s by %v", v.Outcome, v.Stage, reviewed, v.Reason, tc.wantOutcome, tc.wantStage, tc.wantReviews)
			}
			if !strings.Contains(v.Reason, tc.wantReason) {
				t.Errorf("reason %q does not say %q", v.Reason, tc.wantReason)
			}
			if tc.wantStage == gated.StagePolicy && h.router.calls() != 0 {
				t.Error("a proposal the policy refused was routed to a reviewer")
			}
		})
	}
}
