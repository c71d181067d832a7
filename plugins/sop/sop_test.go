package sop

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/plugins/sdk"
)

// sopCaller answers get_sop_text from a fixed SOP and records the
// arguments it was called with.
type sopCaller struct {
	sop  *gated.SOP
	args string
}

func (c *sopCaller) CallTool(_ context.Context, _, name string, args json.RawMessage) (json.RawMessage, error) {
	c.args = string(args)
	if name != sdk.ToolGetSOPText || c.sop == nil {
		return nil, sdk.ErrToolDenied
	}
	return json.Marshal(c.sop)
}

// The text of an action review, word for word: the decision line, the
// gates and the notes.
func TestActionReviewText(t *testing.T) {
	restart := &gated.SOP{ID: "SOP-001", Title: "Restart", Actions: []string{"host_*_service"}, Rollback: "start the old unit"}
	rotate := &gated.SOP{ID: "SOP-003", Title: "Rotate", Actions: []string{"rotate_*_credentials"}, Rollback: "re-enable the old credential"}
	tests := []struct {
		note   string
		sop    *gated.SOP
		tools  bool
		caller *sopCaller
		action string
		want   string
	}{
		{note: "covered", sop: restart,
			want: "Decision: approve\nGates:\n- sop_covers: pass — SOP-001 (Restart) covers host_restart_service\n- no_parallel_operation: pass — 0 recent verdicts on this target, none approved in the last 10m0s\n- rollback_known: pass — start the old unit\nNotes: SOP-001 covers host_restart_service on this target and its rollback is known.\n"},
		{note: "read through the host", sop: restart, tools: true, caller: &sopCaller{sop: restart},
			want: "Decision: approve\nGates:\n- sop_covers: pass — SOP-001 (Restart) covers host_restart_service\n- no_parallel_operation: pass — 0 recent verdicts on this target, none approved in the last 10m0s\n- rollback_known: pass — start the old unit\nNotes: SOP-001 covers host_restart_service on this target and its rollback is known.\n"},
		{note: "refused by the host", sop: restart, tools: true, caller: &sopCaller{},
			want: "Decision: reject\nGates:\n- sop_covers: fail — the SOP could not be read: tool call refused by gated\n- no_parallel_operation: pass — 0 recent verdicts on this target, none approved in the last 10m0s\n- rollback_known: fail — the SOP could not be read, so no known rollback\nNotes: The SOP could not be read through gated, so it cannot be relied on: tool call refused by gated.\n"},
		{note: "no SOP",
			want: "Decision: reject\nGates:\n- sop_covers: fail — no SOP in the catalog covers host_restart_service\n- no_parallel_operation: pass — 0 recent verdicts on this target, none approved in the last 10m0s\n- rollback_known: fail — no SOP, so no known rollback\nNotes: No SOP covers host_restart_service; write one or route the change to a human.\n"},
		{note: "no rollback", sop: &gated.SOP{ID: "SOP-9", Title: "No way back", Actions: []string{"host_restart_service"}},
			want: "Decision: reject\nGates:\n- sop_covers: pass — SOP-9 (No way back) covers host_restart_service\n- no_parallel_operation: pass — 0 recent verdicts on this target, none approved in the last 10m0s\n- rollback_known: fail — SOP-9 names no rollback\nNotes: Gates failed: rollback_known.\n"},
		// A policy that matched the SOP more widely than gated reads action
		// patterns does not make the SOP cover the action.
		{note: "stretched coverage", sop: rotate, action: "rotate_db_credentials_then_drop_all_credentials",
			want: "Decision: reject\nGates:\n- sop_covers: fail — SOP-003 was sent as the covering SOP, but none of its action patterns [\"rotate_*_credentials\"] covers rotate_db_credentials_then_drop_all_credentials (a * stands for one word of the action)\n- no_parallel_operation: pass — 0 recent verdicts on this target, none approved in the last 10m0s\n- rollback_known: fail — no covering SOP, so no known rollback\nNotes: SOP-003 does not cover rotate_db_credentials_then_drop_all_credentials: none of its action patterns matches it word for word; write an SOP for this action or route the change to a human.\n"},
		{note: "stretched coverage read through the host", sop: rotate, action: "rotate_db_credentials_then_drop_all_credentials", tools: true, caller: &sopCaller{sop: rotate},
			want: "Decision: reject\nGates:\n- sop_covers: fail — SOP-003 was sent as the covering SOP, but none of its action patterns [\"rotate_*_credentials\"] covers rotate_db_credentials_then_drop_all_credentials (a * stands for one word of the action)\n- no_parallel_operation: pass — 0 recent verdicts on this target, none approved in the last 10m0s\n- rollback_known: fail — no covering SOP, so no known rollback\nNotes: SOP-003 does not cover rotate_db_credentials_then_drop_all_credentials: none of its action patterns matches it word for word; write an SOP for this action or route the change to a human.\n"},
		{note: "one word", sop: rotate, action: "rotate_db_credentials",
			want: "Decision: approve\nGates:\n- sop_covers: pass — SOP-003 (Rotate) covers rotate_db_credentials\n- no_parallel_operation: pass — 0 recent verdicts on this target, none approved in the last 10m0s\n- rollback_known: pass — re-enable the old credential\nNotes: SOP-003 covers rotate_db_credentials on this target and its rollback is known.\n"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			action := tc.action
			if action == "" {
				action = "host_restart_service"
			}
			req := sdk.Request{ReviewID: "rv1", Proposal: &gated.Proposal{ID: "p1", Kind: gated.KindAction, Action: action},
				Policy: sdk.Policy{SOP: tc.sop, History: json.RawMessage("null")}}
			if tc.tools {
				req.Persona.Tools = []sdk.Tool{{Name: sdk.ToolGetSOPText}}
			}
			var caller sdk.ToolCaller
			if tc.caller != nil {
				caller = tc.caller
			}
			res, err := Reviewer{}.Review(t.Context(), sdk.NewRequest(req, caller))
			if err != nil {
				t.Fatal(err)
			}
			if res.Text != tc.want {
				t.Fatalf("text\n%q\nwant\n%q", res.Text, tc.want)
			}
			if tc.caller != nil && tc.caller.args != fmt.Sprintf(`{"id":%q}`, tc.sop.ID) {
				t.Errorf("get_sop_text arguments %s", tc.caller.args)
			}
		})
	}
}
