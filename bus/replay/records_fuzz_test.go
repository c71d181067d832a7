package replay

import (
	"strings"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/personas"
)

// FuzzReviewRecords feeds replay a review.started and a review.finished
// record of arbitrary data: a record that does not decode is kept as a
// reason naming its event, a failed review is never an approval, and a
// replay that does not know the candidate's plugins never reuses a
// recorded review; nothing panics.
func FuzzReviewRecords(f *testing.F) {
	f.Add([]byte(`{"review_id":"rv_1","persona":"reviewer","plugin":"sop","tools":["get_sop_text"],"persona_revision":"ab12","model":""}`),
		[]byte(`{"review_id":"rv_1","plugin":"sop","plugin_version":"dev","decision":"approve","why":"ok"}`))
	f.Add([]byte(`{"review_id":"rv_1","persona":"reviewer"}`), []byte(`{"review_id":"rv_1","outcome":"timeout","error":"deadline","decision":"approve"}`))
	f.Add([]byte(`{"review_id":"rv_1","persona":"nobody"}`), []byte(`{"review_id":"rv_2"}`))
	f.Add([]byte(`{"review_id":7}`), []byte(`[`))
	f.Add([]byte(`{}`), []byte(`{"review_id":"rv_1","error":"crash"}`))
	reg, err := personas.Builtin()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, startedData, finishedData []byte) {
		p := &recordedPolicy{}
		p.addReviewRecord(&replayEvent{Seq: 3, Event: gated.AuditEvent{Event: gated.EventReviewStarted, Tenant: "acme", ProposalID: "p1", Data: startedData}})
		startedErr := p.reviewErr
		p.addReviewRecord(&replayEvent{Seq: 4, Event: gated.AuditEvent{Event: gated.EventReviewDone, Tenant: "acme", ProposalID: "p1", Data: finishedData}})
		if startedErr != "" && !strings.Contains(startedErr, "review.started") {
			t.Fatalf("reason %q does not name review.started", startedErr)
		}
		if p.reviewErr != "" && p.reviewErr != startedErr && !strings.Contains(p.reviewErr, "review.finished") {
			t.Fatalf("reason %q does not name review.finished", p.reviewErr)
		}
		for _, rv := range p.reviews {
			if rv.Finished == nil {
				continue
			}
			if cat := reviewCategory(rv.Finished); cat == string(gated.DecisionApprove) && rv.Finished.Error != "" {
				t.Fatalf("a failed review (%q) reads as %s", rv.Finished.Error, cat)
			}
		}
		c := NewReviewers(ReviewersConfig{Personas: reg, Plugins: failingPlugins("no plugins in this test")})
		if why := c.staleness(t.Context(), p, "reviewer", 1); why == "" {
			t.Fatalf("reviews %+v reused without knowing the candidate's plugins", p.reviews)
		}
	})
}
