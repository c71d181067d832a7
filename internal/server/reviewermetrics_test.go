package server

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
)

// TestReviewerMetricsScrapeReadsFirst: the reviewer metrics read the
// audit stream in rounds, and a scrape between two rounds still counts
// every record stored before it. The rounds here are an hour apart, so
// only the scrape's own read can count the verdicts.
func TestReviewerMetricsScrapeReadsFirst(t *testing.T) {
	s := natsServer(t)
	_, js := connect(t, s)
	if _, err := bus.Setup(t.Context(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	aud := auditWriter(t, js)
	c, stop := followReviewers(t.Context(), js, time.Hour, zaptest.NewLogger(t))
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)

	seal := func(id string, decision gated.ReviewDecision) {
		t.Helper()
		data, err := json.Marshal(map[string]any{
			"proposal_id": id, "outcome": gated.OutcomeApproved, "stage": "review",
			"reviews": []map[string]any{{"plugin": "sop", "plugin_version": "1", "persona": "reviewer", "model": "m", "decision": decision, "latency_ms": 12}},
		})
		if err != nil {
			t.Fatal(err)
		}
		ev := gated.AuditEvent{V: gated.SchemaVersion, Event: gated.EventVerdict, Tenant: "acme", ProposalID: id, At: time.Now().UTC(), Data: data}
		if _, err := aud.Trail().Seal(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	approvals := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "gated_reviewer_reviews_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "decision" && l.GetValue() == "approve" {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		return 0
	}

	for i := range 3 {
		seal(fmt.Sprint("p", i), gated.DecisionApprove)
		if got := approvals(); got != float64(i+1) {
			t.Fatalf("after verdict %d a scrape counted %v approvals, want %d", i+1, got, i+1)
		}
	}
	// Stopped, the reader no longer answers: a scrape reports what was
	// read instead of waiting.
	stop()
	seal("late", gated.DecisionApprove)
	if got := approvals(); got != 3 {
		t.Fatalf("a scrape after the reader stopped counted %v approvals, want the 3 read", got)
	}
}
