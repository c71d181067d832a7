package engine_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

func TestDecide(t *testing.T) {
	writer := &engine.Persona{Name: "writer", PermissionMode: "acceptEdits", Plugin: "sop", Tools: []string{"get_proposal"}}
	var (
		received = gated.EventReceived
		invalid  = gated.EventInvalid
		policy   = gated.EventPolicyDecided
		started  = gated.EventReviewStarted
		finished = gated.EventReviewDone
		decided  = gated.EventVerdict
	)
	reviewed := []string{received, policy, started, finished, decided}

	tests := []struct {
		note     string
		subject  string         // default testSubject
		override map[string]any // edits the default proposal
		data     []byte         // replaces the proposal entirely
		msgID    string
		reviewer answerFunc // default: a full approval
		routeErr error
		timeout  time.Duration

		wantOutcome      gated.Outcome
		wantStage        gated.Stage
		noAddress        bool   // the verdict has no tenant and id
		wantTenant       string // default acme
		wantReviews      int    // calls to the reviewer
		wantEvents       []string
		wantReason       []string // substrings of the verdict's reason
		wantDenies       []string
		wantDecision     gated.ReviewDecision // of the single review, when set
		wantMissingGates []string
	}{
		{
			note:        "invalid proposal",
			override:    map[string]any{"class": nil},
			wantOutcome: gated.OutcomeInvalid, wantStage: gated.StageValidation,
			wantEvents: []string{received, invalid, decided},
			wantReason: []string{"class"},
		},
		{
			note:        "payload unreadable, id from Nats-Msg-Id",
			data:        []byte(`{"v": 1, "id": `),
			msgID:       "acme.p1",
			wantOutcome: gated.OutcomeInvalid, wantStage: gated.StageValidation,
			wantEvents: []string{received, invalid, decided},
		},
		{
			note:        "subject with a bad tenant token",
			subject:     "gated.proposals.ACME.host_restart_service",
			msgID:       "ACME.p1",
			wantOutcome: gated.OutcomeInvalid, wantStage: gated.StageValidation, noAddress: true,
			wantEvents: []string{received, invalid, decided},
			wantReason: []string{"subject"},
		},
		{
			note:        "payload tenant differs from the subject's",
			subject:     "gated.proposals.globex.host_restart_service",
			wantTenant:  "globex", // the subject's tenant is authoritative
			wantOutcome: gated.OutcomeInvalid, wantStage: gated.StageValidation,
			wantEvents: []string{received, invalid, decided},
			wantReason: []string{"tenant"},
		},
		{
			// Go's encoding/json matches keys case-insensitively and keeps the
			// last; a case-sensitive executor keeps "destructive".
			note: "case variant of class cannot turn a destructive proposal into a read",
			data: []byte(`{"v": 1, "id": "p1", "tenant": "acme", "action": "host_restart_service", ` +
				`"class": "destructive", "blast_radius": "tenant_wide", "CLASS": "read"}`),
			wantOutcome: gated.OutcomeInvalid, wantStage: gated.StageValidation,
			wantEvents: []string{received, invalid, decided},
		},
		{
			note:        "read needs no review",
			override:    map[string]any{"class": "read", "blast_radius": nil, "action": "host_list_services"},
			subject:     "gated.proposals.acme.host_list_services",
			wantOutcome: gated.OutcomeApproved, wantStage: gated.StagePolicy,
			wantEvents: []string{received, policy, decided},
		},
		{
			note: "skip_review refused even for an admin",
			override: map[string]any{
				"operator": map[string]any{"id": "root", "roles": []string{"admin"}},
				"flags":    map[string]any{"skip_review": true},
			},
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StagePolicy,
			wantEvents: []string{received, policy, decided},
			wantDenies: []string{"no_skip_review"},
			wantReason: []string{"no_skip_review"},
		},
		{
			note:        "force_approve refused",
			override:    map[string]any{"flags": map[string]any{"force_approve": true}},
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StagePolicy,
			wantEvents: []string{received, policy, decided},
			wantDenies: []string{"unsupported_force_approve"},
		},
		{
			note:        "persona that is not read-only cannot review",
			override:    map[string]any{"reviewer": "writer"},
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StagePolicy,
			wantEvents: []string{received, policy, decided},
			wantDenies: []string{"reviewer_tool_denied"},
		},
		{
			note:        "write approved with all three gates",
			wantOutcome: gated.OutcomeApproved, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: gated.DecisionApprove,
		},
		{
			note:        "destructive approved with all three gates",
			override:    map[string]any{"class": "destructive", "blast_radius": "cluster"},
			wantOutcome: gated.OutcomeApproved, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: gated.DecisionApprove,
		},
		{
			note:        "text approves, structured decision rejects",
			reviewer:    approvalWith(func(r *engine.ReviewResult) { r.Decision = gated.DecisionReject }),
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: gated.DecisionReject,
		},
		{
			note:        "structured decision approves, text rejects",
			reviewer:    approvalWith(func(r *engine.ReviewResult) { r.Text = "Decision: reject\nNotes: no rollback." }),
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: gated.DecisionReject,
		},
		{
			note:        "structured decision empty",
			reviewer:    approvalWith(func(r *engine.ReviewResult) { r.Decision = "" }),
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: gated.DecisionReject,
		},
		{
			note: "approval missing a required gate",
			reviewer: approvalWith(func(r *engine.ReviewResult) {
				r.Gates = []gated.GateResult{{Name: "sop_covers", Passed: true}, {Name: "rollback_known", Passed: true}}
			}),
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: gated.DecisionReject,
			wantMissingGates: []string{"no_parallel_operation"},
			wantReason:       []string{"no_parallel_operation"},
		},
		{
			note: "approval with a failed gate",
			reviewer: approvalWith(func(r *engine.ReviewResult) {
				r.Gates[2].Passed = false
			}),
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: gated.DecisionReject,
			wantMissingGates: []string{"rollback_known"},
			wantReason:       []string{"rollback_known"},
		},
		{
			note:        "approval without gates",
			reviewer:    approvalWith(func(r *engine.ReviewResult) { r.Gates = nil }),
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: gated.DecisionReject,
			wantMissingGates: requiredGates,
		},
		{
			note: "approval reporting a gate both failed and passed",
			reviewer: approvalWith(func(r *engine.ReviewResult) {
				r.Gates = append([]gated.GateResult{{Name: "no_parallel_operation", Passed: false, Detail: "web-7 restarted 2 min ago"}}, r.Gates...)
			}),
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: gated.DecisionReject,
			wantMissingGates: []string{"no_parallel_operation"},
		},
		{
			note:        "approve with caveats",
			reviewer:    approvalWith(func(r *engine.ReviewResult) { r.Text = "Decision: approve with caveats\nNotes: watch it." }),
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: gated.DecisionReject,
		},
		{
			note: "approval whose text fails every gate the structured report passes",
			reviewer: approvalWith(func(r *engine.ReviewResult) {
				r.Text = "Decision: approve\nGates:\n- sop_covers: fail\n- no_parallel_operation: fail\n- rollback_known: fail\nNotes: safe to restart."
			}),
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: gated.DecisionReject,
			wantReason: []string{"sop_covers", "disagree"},
		},
		{
			note: "approval taken back by a later decision line",
			reviewer: approvalWith(func(r *engine.ReviewResult) {
				r.Text += "\nDecision: reject"
				r.Notes = "Safe to restart."
			}),
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: gated.DecisionReject,
			wantReason: []string{`"Decision: reject"`, "disagrees"},
		},
		{
			note:        "empty reviewer text",
			reviewer:    approvalWith(func(r *engine.ReviewResult) { r.Text = "" }),
			wantOutcome: gated.OutcomeRejected, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: gated.DecisionReject,
		},
		{
			note:        "reviewer error",
			reviewer:    answer(engine.ReviewResult{}, errors.New("plugin sop exited: signal: killed")),
			wantOutcome: gated.OutcomeError, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed,
			wantReason: []string{"reviewer sop (persona reviewer) failed"},
		},
		{
			note:        "reviewer error carrying an approval",
			reviewer:    answer(approval(), errors.New("stream broken after the answer")),
			wantOutcome: gated.OutcomeError, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed,
		},
		{
			note:        "reviewer refuses work",
			reviewer:    answer(engine.ReviewResult{}, fmt.Errorf("plugin sop: circuit open: %w", engine.ErrNoReviewer)),
			wantOutcome: gated.OutcomeBlocked, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed,
		},
		{
			note:        "review passes its deadline",
			reviewer:    blockUntilDone(5 * time.Second),
			timeout:     50 * time.Millisecond,
			wantOutcome: gated.OutcomeTimeout, wantStage: gated.StageReview,
			wantReviews: 1, wantEvents: reviewed,
		},
		{
			note:        "no reviewer for the persona",
			routeErr:    fmt.Errorf("plugin sop is not running: %w", engine.ErrNoReviewer),
			wantOutcome: gated.OutcomeBlocked, wantStage: gated.StageReview,
			wantEvents: []string{received, policy, gated.EventReviewUnrouted, decided},
		},
		{
			note:        "unknown persona named by the proposal",
			override:    map[string]any{"reviewer": "ghost"},
			wantOutcome: gated.OutcomeBlocked, wantStage: gated.StageReview,
			wantEvents: []string{received, policy, decided},
			wantReason: []string{"ghost"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			h := newHarness(t, func(h *harness) {
				h.cfg.Personas = personaSet{"reviewer": reviewerPersona(), "writer": writer}
				if tc.reviewer != nil {
					h.reviewer.answer = tc.reviewer
				}
				h.router.err = tc.routeErr
				h.cfg.ReviewTimeout = tc.timeout
			})
			subject := tc.subject
			if subject == "" {
				subject = testSubject
			}
			data := tc.data
			if data == nil {
				data = proposalJSON(t, tc.override)
			}

			v, tr := h.mustDecide(t, subject, data, tc.msgID)

			if v.Outcome != tc.wantOutcome || v.Stage != tc.wantStage {
				t.Errorf("verdict %s at stage %s, want %s at stage %s (reason: %s)", v.Outcome, v.Stage, tc.wantOutcome, tc.wantStage, v.Reason)
			}
			for _, s := range tc.wantReason {
				if !strings.Contains(v.Reason, s) {
					t.Errorf("reason %q does not mention %q", v.Reason, s)
				}
			}
			if got := h.reviewer.calls(); got != tc.wantReviews {
				t.Errorf("reviewer called %d times, want %d", got, tc.wantReviews)
			}
			if got := tr.names(); !slices.Equal(got, tc.wantEvents) {
				t.Errorf("audit events %v, want %v", got, tc.wantEvents)
			}

			wantTenant, wantID := "acme", "p1"
			if tc.wantTenant != "" {
				wantTenant = tc.wantTenant
			}
			if tc.noAddress {
				wantTenant, wantID = "", ""
			}
			if v.Tenant != wantTenant || v.ProposalID != wantID {
				t.Errorf("verdict addressed to %q.%q, want %q.%q", v.Tenant, v.ProposalID, wantTenant, wantID)
			}
			if stored := h.store.stored(t, wantTenant, wantID); tc.noAddress {
				if h.store.size() != 0 {
					t.Errorf("a verdict without an address was stored")
				}
			} else if stored == nil {
				t.Error("verdict not stored")
			} else {
				sameVerdict(t, stored, v)
			}

			if tc.wantStage == gated.StagePolicy || tc.wantStage == gated.StageReview {
				if v.Policy == nil {
					t.Fatal("verdict has no policy part")
				}
				var rules []string
				for _, d := range v.Policy.Denies {
					rules = append(rules, d.Rule)
					if d.Message == "" {
						t.Errorf("deny %s has no message", d.Rule)
					}
				}
				if !slices.Equal(rules, tc.wantDenies) {
					t.Errorf("policy denies %v, want %v", rules, tc.wantDenies)
				}
				if v.Policy.Revision != defaultPolicy(t).Revision() {
					t.Errorf("policy revision %q, want %q", v.Policy.Revision, defaultPolicy(t).Revision())
				}
				if len(tc.wantDenies) > 0 && h.router.calls() != 0 {
					t.Error("a denied proposal was routed to a reviewer")
				}
			} else if v.Policy == nil || v.Policy.Revision != defaultPolicy(t).Revision() || len(v.Policy.Denies) != 0 || v.Policy.EvalUS != 0 {
				// Verdicts the policy never saw still name the policy in force.
				t.Errorf("policy part on a %s verdict: %+v, want the revision in force and no evaluation", v.Stage, v.Policy)
			}

			if tc.wantDecision != "" {
				if len(v.Reviews) != 1 {
					t.Fatalf("verdict has %d reviews, want 1", len(v.Reviews))
				}
				r := v.Reviews[0]
				if r.Decision != tc.wantDecision {
					t.Errorf("review decision %q, want %q", r.Decision, tc.wantDecision)
				}
				if r.Persona != "reviewer" || r.Plugin != "sop" || r.PluginVersion != "1.2.3" {
					t.Errorf("review by %q/%q/%q, want reviewer/sop/1.2.3", r.Persona, r.Plugin, r.PluginVersion)
				}
				if !slices.Equal(r.MissingGates, tc.wantMissingGates) {
					t.Errorf("missing gates %v, want %v", r.MissingGates, tc.wantMissingGates)
				}
			} else if len(v.Reviews) != 0 && v.Outcome != gated.OutcomeError {
				t.Errorf("unexpected reviews %+v", v.Reviews)
			}
		})
	}
}

// TestDecideSendsTheReviewerWhatThePolicyAllows checks the request a
// reviewer gets and the revision trail of the audit events.
func TestDecideSendsTheReviewerWhatThePolicyAllows(t *testing.T) {
	h := newHarness(t, func(h *harness) {
		p := reviewerPersona()
		p.Tools = append(p.Tools, "run_shell", "web_skill", "host_restart_service")
		h.cfg.Personas = personaSet{"reviewer": p}
		h.cfg.ReviewTimeout = 42 * time.Second
	})
	data := proposalJSON(t, nil)
	v, tr := h.mustDecide(t, testSubject, data, "")
	if v.Outcome != gated.OutcomeApproved {
		t.Fatalf("outcome %s, want approved (reason: %s)", v.Outcome, v.Reason)
	}
	reqs := h.reviewer.requests()
	if len(reqs) != 1 {
		t.Fatalf("reviewer called %d times, want 1", len(reqs))
	}
	req := reqs[0]
	if want := []string{"get_sop_text", "get_verdict_history", "get_proposal"}; !slices.Equal(req.Tools, want) {
		t.Errorf("reviewer tools %v, want %v", req.Tools, want)
	}
	if want := []string{"host_restart_service", "run_shell", "web_skill"}; !slices.Equal(req.DeniedTools, want) {
		t.Errorf("denied tools %v, want %v", req.DeniedTools, want)
	}
	if req.SOP == nil || req.SOP.ID != "SOP-001" {
		t.Errorf("SOP %+v, want SOP-001", req.SOP)
	}
	if req.Persona == nil || req.Persona.Name != "reviewer" {
		t.Errorf("persona %+v, want reviewer", req.Persona)
	}
	if req.Proposal == nil || req.Proposal.ID != "p1" || req.Proposal.Class != gated.ClassWrite {
		t.Errorf("proposal %+v", req.Proposal)
	}
	if string(req.ProposalJSON) != string(data) {
		t.Errorf("proposal JSON %s, want the delivered bytes %s", req.ProposalJSON, data)
	}
	if req.ReviewID == "" || req.Why == "" || req.PolicyRevision != defaultPolicy(t).Revision() {
		t.Errorf("review id %q, why %q, revision %q", req.ReviewID, req.Why, req.PolicyRevision)
	}
	for _, ev := range tr.all() {
		if want := defaultPolicy(t).Revision(); ev.PolicyRevision != want {
			t.Errorf("event %s has policy revision %q, want %q", ev.Event, ev.PolicyRevision, want)
		}
		// The evaluation time is known from the policy's event on.
		if evaluated := ev.Event != gated.EventReceived; evaluated != (commonData(t, ev).PolicyEvalUS > 0) {
			t.Errorf("event %s has policy_eval_us %d", ev.Event, commonData(t, ev).PolicyEvalUS)
		}
	}
}
