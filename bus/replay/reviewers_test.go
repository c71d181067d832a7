package replay

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gated/gated"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/plugins"
)

// failingPlugins is a plugin set-up that cannot be read: it fails with
// why, before any plugin is launched.
func failingPlugins(why string) func(context.Context) ([]plugins.Spec, string, error) {
	return func(context.Context) ([]plugins.Spec, string, error) { return nil, "", errors.New(why) }
}

// TestReviewStaleness names why a recorded review would not be given
// again, before any plugin is asked.
func TestReviewStaleness(t *testing.T) {
	reg, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	builtin, _ := reg.Persona("reviewer")
	started := func(persona, revision, model string) *recordedReview {
		return &recordedReview{Started: gated.ReviewStartedData{ReviewID: "rv_1", Persona: persona, PersonaRevision: revision, Model: model},
			Finished: &gated.ReviewFinishedData{ReviewID: "rv_1", PluginVersion: "dev", Decision: "approve"}}
	}
	unfinished := started("reviewer", builtin.Revision, "")
	unfinished.Finished = nil
	reviewed := func(quorum int) recordedPolicy {
		return recordedPolicy{PolicyDecidedData: gated.PolicyDecidedData{Review: gated.Route{Required: true, Persona: "reviewer", Quorum: quorum}},
			reviews: []*recordedReview{started("reviewer", builtin.Revision, "")}}
	}
	tests := []struct {
		note     string
		p        recordedPolicy
		routedTo string // default reviewer
		quorum   int    // the candidate's, default 1
		want     string
	}{
		{note: "candidate routes elsewhere", p: reviewed(1), routedTo: "dba", want: "the candidate routes the review to persona dba; the recorded review is by reviewer"},
		{note: "candidate raises the quorum", p: reviewed(1), quorum: 2, want: "the candidate asks a quorum of 2, the recorded decision 1"},
		{note: "no review record", p: recordedPolicy{}, want: "no review record of the proposal in the range"},
		{note: "a record that does not decode", p: recordedPolicy{reviewErr: "seq 4: decoding a review.finished record: bad"}, want: "seq 4: decoding a review.finished"},
		{note: "never finished", p: recordedPolicy{reviews: []*recordedReview{unfinished}}, want: "has no review.finished record"},
		{note: "persona gone", p: recordedPolicy{reviews: []*recordedReview{started("auditor", "ab", "")}}, routedTo: "auditor", want: "persona auditor is not in the candidate set"},
		{note: "older gated", p: recordedPolicy{reviews: []*recordedReview{started("reviewer", "", "")}}, want: "recorded without the persona's revision"},
		{note: "persona edited", p: recordedPolicy{reviews: []*recordedReview{started("reviewer", "0123", "")}}, want: "persona reviewer changed: revision 0123 recorded, " + builtin.Revision},
		{note: "model changed", p: recordedPolicy{reviews: []*recordedReview{started("reviewer", builtin.Revision, "openai/gpt-4o")}}, want: `model changed: "openai/gpt-4o" recorded, "" in the candidate set`},
		{note: "plugins unknown", p: recordedPolicy{reviews: []*recordedReview{started("reviewer", builtin.Revision, "")}}, want: "no plugins here"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			c := NewReviewers(ReviewersConfig{Personas: reg, Plugins: failingPlugins("no plugins here")})
			routedTo, quorum := cmp.Or(tc.routedTo, "reviewer"), cmp.Or(tc.quorum, 1)
			if got := c.staleness(t.Context(), &tc.p, routedTo, quorum); !strings.Contains(got, tc.want) {
				t.Errorf("staleness %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRecordedReviewCategory: what ended a review is its category; a
// failed review is never an approval.
func TestRecordedReviewCategory(t *testing.T) {
	tests := []struct {
		note string
		f    gated.ReviewFinishedData
		want string
	}{
		{note: "approved", f: gated.ReviewFinishedData{Decision: "approve"}, want: "approve"},
		{note: "rejected", f: gated.ReviewFinishedData{Decision: "reject"}, want: "reject"},
		{note: "timed out", f: gated.ReviewFinishedData{Outcome: "timeout", Error: "deadline", Decision: "approve"}, want: "timeout"},
		{note: "failed without an outcome", f: gated.ReviewFinishedData{Error: "crash"}, want: "error"},
		{note: "no decision", f: gated.ReviewFinishedData{}, want: "none"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			if got := reviewCategory(&tc.f); got != tc.want {
				t.Errorf("category %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCandidateTools: a re-run review gets the recorded bag, never a tool
// the candidate persona does not list.
func TestCandidateTools(t *testing.T) {
	tests := []struct {
		note          string
		recorded, has []string
		want          []string
	}{
		{note: "same persona", recorded: []string{"get_sop_text", "get_proposal"}, has: []string{"get_proposal", "get_sop_text", "get_verdict_history"},
			want: []string{"get_sop_text", "get_proposal"}},
		{note: "candidate drops a tool", recorded: []string{"get_sop_text", "get_proposal"}, has: []string{"get_proposal"}, want: []string{"get_proposal"}},
		{note: "candidate lists none", recorded: []string{"get_sop_text"}, want: []string{}},
		{note: "policy denied one the candidate lists", recorded: []string{"get_proposal"}, has: []string{"get_proposal", "run_shell"}, want: []string{"get_proposal"}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			if got := candidateTools(tc.recorded, &engine.Persona{Tools: tc.has}); !slices.Equal(got, tc.want) {
				t.Errorf("tools %v, want %v", got, tc.want)
			}
		})
	}
}
