package engine

import (
	"encoding/json"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/strictjson"
)

func TestMergeJSON(t *testing.T) {
	for _, tc := range []struct{ base, extra, want string }{
		{`{"action":"a"}`, `{"why":"w"}`, `{"action":"a","why":"w"}`},
		{`{"action":"a"}`, ` { "why" : "w" } `, `{"action":"a","why" : "w"}`},
		{`{"action":"a"}`, `{}`, `{"action":"a"}`},
		{`{"action":"a"}`, `null`, `{"action":"a"}`},
		{`{"action":"a"}`, ``, `{"action":"a"}`},
		{`{}`, `{"why":"w"}`, `{"why":"w"}`},
		{`{"action":"a"}`, `"text"`, `{"action":"a","detail":"text"}`},
		{`{"action":"a"}`, `[1,2]`, `{"action":"a","detail":[1,2]}`},
	} {
		got := mergeJSON(json.RawMessage(tc.base), json.RawMessage(tc.extra))
		if string(got) != tc.want {
			t.Errorf("mergeJSON(%s, %s) = %s, want %s", tc.base, tc.extra, got, tc.want)
		}
		if !json.Valid(got) {
			t.Errorf("mergeJSON(%s, %s) = %s is not valid JSON", tc.base, tc.extra, got)
		}
	}
}

// TestEventNamesEachMemberOnce builds events whose data names the head's
// members itself, operator.decided's operator first: the event's data
// must name each member once, the data's own, or two JSON readers could
// read two different operators from one record.
func TestEventNamesEachMemberOnce(t *testing.T) {
	head := &eventHead{tenant: "acme", id: "p1", action: "dns_delete_zone", operator: "u-1042", delivery: 2, evalUS: 40}
	l := auditLog{clock: systemClock{}, head: head}
	for _, tc := range []struct {
		name string
		data any
		want map[string]string
	}{
		{gated.EventOperatorDecided, gated.OperatorDecidedData{Operator: "alice", Decision: OperatorApprove, Outcome: gated.OutcomeApproved},
			map[string]string{"operator": `"alice"`, "action": `"dns_delete_zone"`}},
		{gated.EventGrantUsed, map[string]any{"action": "dns_create_zone", "delivery": 7, "policy_eval_us": 1},
			map[string]string{"action": `"dns_create_zone"`, "operator": `"u-1042"`, "delivery": "7", "policy_eval_us": "1"}},
		{gated.EventGrantUsed, map[string]any{"gid": "g1"},
			map[string]string{"action": `"dns_delete_zone"`, "operator": `"u-1042"`, "gid": `"g1"`}},
	} {
		ev := l.event(tc.name, tc.data)
		if _, err := strictjson.ReadValue(ev.Data, strictjson.ValueOptions{}); err != nil {
			t.Errorf("%s data %s: %v", tc.name, ev.Data, err)
			continue
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(ev.Data, &got); err != nil {
			t.Fatal(err)
		}
		for k, want := range tc.want {
			if string(got[k]) != want {
				t.Errorf("%s data %s: %s is %s, want %s", tc.name, ev.Data, k, got[k], want)
			}
		}
	}
}
