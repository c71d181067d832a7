package gated

import (
	"encoding/json"
	"testing"
	"time"
)

// The records every proposal has, and the grant records, keep the
// encoding of the maps they were written from before: the same members,
// in the same order.
func TestEventDataEncodesAsItsMap(t *testing.T) {
	run := &RunPolicy{MaxRounds: 3}
	at := time.Date(2026, 11, 1, 9, 0, 0, 5, time.UTC)
	for _, tc := range []struct {
		data any
		m    map[string]any
	}{
		{ReceivedData{Subject: "proposals.acme.restart", Bytes: 412, SHA256: "ab"},
			map[string]any{"subject": "proposals.acme.restart", "bytes": 412, "sha256": "ab"}},
		{PolicyDecidedData{Denies: []Deny{{Rule: "r", Message: "m"}}, Review: Route{Required: true, Persona: "reviewer", Quorum: 1},
			ReviewerTools: []string{"get_sop_text"}, DeniedTools: []string{"x_skill"}, EvalUS: 25, SOP: "sop-1", Run: run},
			map[string]any{"denies": []Deny{{Rule: "r", Message: "m"}}, "review": Route{Required: true, Persona: "reviewer", Quorum: 1},
				"reviewer_tools": []string{"get_sop_text"}, "denied_tools": []string{"x_skill"}, "eval_us": int64(25), "sop": "sop-1", "run": run}},
		{PolicyDecidedData{Denies: []Deny{}},
			map[string]any{"denies": []Deny{}, "review": Route{}, "reviewer_tools": []string(nil), "denied_tools": []string(nil),
				"eval_us": int64(0), "sop": "", "run": (*RunPolicy)(nil)}},
		{GrantUsedData{GID: "g1", Tenant: "acme", ProposalID: "p1", Action: "host_restart_service", By: "exec-1"},
			map[string]any{"gid": "g1", "tenant": "acme", "proposal_id": "p1", "action": "host_restart_service", "by": "exec-1"}},
		{GrantUsedData{GID: "g1", Tenant: "acme", ProposalID: "p1", By: "", As: "agent-1"},
			map[string]any{"gid": "g1", "tenant": "acme", "proposal_id": "p1", "action": "", "by": "", "as": "agent-1"}},
		{GrantRefusedData{Reason: "expired"}, map[string]any{"reason": "expired"}},
		{GrantRefusedData{Reason: "", GID: "g1", As: "agent-1", ProposalID: "p1"},
			map[string]any{"reason": "", "gid": "g1", "as": "agent-1", "proposal_id": "p1"}},
		{GrantRefusedData{Reason: "no disk", By: "executor", ProposalID: "p1", At: &at, GID: "g1", As: "agent-1"},
			map[string]any{"reason": "no disk", "by": "executor", "proposal_id": "p1", "at": at, "gid": "g1", "as": "agent-1"}},
		{GrantRefusedData{By: "executor", ProposalID: "p1", At: &time.Time{}},
			map[string]any{"reason": "", "by": "executor", "proposal_id": "p1", "at": time.Time{}}},
		{GrantExpiredData{GID: "g1", Tenant: "acme", ProposalID: "p1", Exp: 1795661606},
			map[string]any{"gid": "g1", "tenant": "acme", "proposal_id": "p1", "exp": int64(1795661606)}},
		{GrantExpiredData{}, map[string]any{"gid": "", "tenant": "", "proposal_id": "", "exp": int64(0)}},
	} {
		got, _ := json.Marshal(tc.data)
		want, _ := json.Marshal(tc.m)
		if string(got) != string(want) {
			t.Errorf("%T encodes as\n%s\nwant\n%s", tc.data, got, want)
		}
	}
}
