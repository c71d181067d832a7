package engine_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
)

// TestPolicyDecidedKeepsReplayInput: the policy.decided record keeps the
// proposal, the starting persona, the clock and the target's history the
// policy saw, so that a replay rebuilds the same input.
func TestPolicyDecidedKeepsReplayInput(t *testing.T) {
	h := newHarness(t)
	first := proposalJSON(t, map[string]any{"id": "p1"})
	v, firstTrail := h.mustDecide(t, "gated.proposals.acme.host_restart_service", first, "acme.p1")
	if v.Outcome != gated.OutcomeApproved {
		t.Fatalf("first proposal: outcome %s, want approved", v.Outcome)
	}
	second := proposalJSON(t, map[string]any{"id": "p2"})
	_, tr := h.mustDecide(t, "gated.proposals.acme.host_restart_service", second, "acme.p2")

	for _, tc := range []struct {
		name    string
		data    []byte
		tr      *memTrail
		history int
	}{
		{name: "first proposal, no history", data: first, tr: firstTrail},
		{name: "second proposal, one approval in history", data: second, tr: tr, history: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in *gated.ReplayInput
			tc.tr.mu.Lock()
			events := append([]gated.AuditEvent(nil), tc.tr.events...)
			tc.tr.mu.Unlock()
			for _, ev := range events {
				if ev.Event != gated.EventPolicyDecided {
					continue
				}
				var d struct {
					Input *gated.ReplayInput `json:"input"`
				}
				if err := json.Unmarshal(ev.Data, &d); err != nil {
					t.Fatalf("policy.decided data: %v", err)
				}
				in = d.Input
				t.Logf("policy.decided data: %d bytes, of which input %d (proposal %d)", len(ev.Data), len(mustMarshal(t, d.Input)), len(tc.data))
			}
			if in == nil {
				t.Fatal("policy.decided has no input")
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, tc.data); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(in.Proposal, compact.Bytes()) {
				t.Errorf("input proposal = %s, want %s", in.Proposal, compact.Bytes())
			}
			if in.Persona != "reviewer" {
				t.Errorf("input persona = %q, want reviewer", in.Persona)
			}
			if !in.Now.Equal(h.now) {
				t.Errorf("input now = %v, want the clock's %v", in.Now, h.now)
			}
			if len(in.History) != tc.history || (tc.history > 0 && in.History[0].ProposalID != "p1") {
				t.Errorf("input history = %+v, want the approval of p1", in.History)
			}
		})
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReplayInputKeepsTheBudget writes a replay input's budget without
// its zero counters and reads the same budget back.
func TestReplayInputKeepsTheBudget(t *testing.T) {
	tests := []struct {
		note   string
		budget *gated.BudgetState
		want   string
	}{
		{note: "no budget kept", want: `"now":"2025-01-02T03:04:05Z"}`},
		{note: "every counter zero", budget: &gated.BudgetState{}, want: `"budget":{"tenant":{},"agent":{}}`},
		{note: "some counters", budget: &gated.BudgetState{Tenant: gated.BudgetCounters{Proposals: 3, Refusals: 1}, Agent: gated.BudgetCounters{Tokens: 9}},
			want: `"budget":{"tenant":{"proposals":3,"refusals_10m":1},"agent":{"tokens":9}}`},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			in := gated.ReplayInput{Proposal: []byte(`{"v":1}`), Persona: "reviewer", Now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Budget: tc.budget}
			doc, err := json.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(doc), tc.want) {
				t.Fatalf("%s does not hold %s", doc, tc.want)
			}
			var back gated.ReplayInput
			if err := json.Unmarshal(doc, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.Budget, tc.budget) || back.Persona != in.Persona || !back.Now.Equal(in.Now) || string(back.Proposal) != string(in.Proposal) {
				t.Fatalf("read back %+v, want %+v", back, in)
			}
		})
	}
}
