package engine_test

import (
	"encoding/json"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// TestReviewRecordsTheReviewer: the review's audit events name the
// reviewer fully, so that a replay can tell whether the same reviewer
// would review again: the persona's revision and configured model on
// review.started, the model the reviewer reports on review.finished.
func TestReviewRecordsTheReviewer(t *testing.T) {
	tests := []struct {
		note                     string
		revision, model, answers string
	}{
		{note: "llm persona", revision: "3f2a", model: "openai/gpt-4o-mini", answers: "gpt-4o-mini-2024"},
		{note: "persona without a model", revision: "77b1"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			h := newHarness(t, func(h *harness) {
				p := reviewerPersona()
				p.Revision, p.Model = tc.revision, tc.model
				h.cfg.Personas = personaSet{"reviewer": p}
				h.reviewer.answer = approvalWith(func(r *engine.ReviewResult) { r.Model = tc.answers })
			})
			v, tr := h.mustDecide(t, testSubject, proposalJSON(t, nil), "")
			if v.Outcome != gated.OutcomeApproved {
				t.Fatalf("verdict %s: %s", v.Outcome, v.Reason)
			}
			var started, finished struct {
				PersonaRevision *string `json:"persona_revision"`
				Model           *string `json:"model"`
				PluginVersion   string  `json:"plugin_version"`
			}
			for _, ev := range tr.all() {
				switch ev.Event {
				case gated.EventReviewStarted:
					if err := json.Unmarshal(ev.Data, &started); err != nil {
						t.Fatal(err)
					}
				case gated.EventReviewDone:
					if err := json.Unmarshal(ev.Data, &finished); err != nil {
						t.Fatal(err)
					}
				}
			}
			if started.PersonaRevision == nil || *started.PersonaRevision != tc.revision {
				t.Errorf("review.started persona_revision %v, want %q", deref(started.PersonaRevision), tc.revision)
			}
			if got := optional(started.Model); got != tc.model {
				t.Errorf("review.started model %q, want %q", got, tc.model)
			}
			if got := optional(finished.Model); got != tc.answers || finished.PluginVersion != "1.2.3" {
				t.Errorf("review.finished model %q, plugin_version %q; want %q, 1.2.3", got, finished.PluginVersion, tc.answers)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return "<absent>"
	}
	return *s
}

// optional reads a field that is left out when empty.
func optional(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
