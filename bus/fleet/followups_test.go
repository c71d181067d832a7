package fleet_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
)

func TestDecodeFollowUps(t *testing.T) {
	_, _, cont, _ := gated.FollowUp(bustest.RunVerdict("p1", "run1", 1, gated.NextContinuation))
	_, _, esc, _ := gated.FollowUp(bustest.RunVerdict("p3", "run1", 3, gated.NextEscalation))
	edit := func(body []byte, change func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		change(m)
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	tests := []struct {
		note         string
		data         []byte
		continuation bool
		ok           bool
	}{
		{note: "continuation", data: cont, continuation: true, ok: true},
		{note: "escalation", data: esc, ok: true},
		{note: "unknown field", data: edit(cont, func(m map[string]any) { m["approved"] = true }), continuation: true},
		{note: "unknown nested field", data: edit(esc, func(m map[string]any) { m["review"].(map[string]any)["extra"] = 1 })},
		{note: "schema version 2", data: edit(cont, func(m map[string]any) { m["v"] = 2 }), continuation: true},
		{note: "dotted run id", data: edit(cont, func(m map[string]any) { m["run_id"] = "run.1" }), continuation: true},
		{note: "round 1", data: edit(cont, func(m map[string]any) { m["round"] = 1 }), continuation: true},
		{note: "past max rounds", data: edit(cont, func(m map[string]any) { m["max_rounds"] = 1 }), continuation: true},
		{note: "review of another round", data: edit(esc, func(m map[string]any) { m["rounds"] = 2 })},
		{note: "verdict link of another proposal", data: edit(esc, func(m map[string]any) { m["review"].(map[string]any)["verdict"] = "gated.verdicts.acme.p9" })},
		{note: "trailing data", data: append(slices.Clone(cont), `{}`...), continuation: true},
		{note: "null", data: []byte(`null`), continuation: true},
		{note: "array", data: []byte(`[]`)},
		{note: "an escalation is not a continuation", data: esc, continuation: true},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			var err error
			if tc.continuation {
				_, err = fleet.DecodeContinuation(tc.data)
			} else {
				_, err = fleet.DecodeEscalation(tc.data)
			}
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, fleet.ErrMalformedFollowUp) {
				t.Fatalf("err = %v, want ErrMalformedFollowUp", err)
			}
		})
	}
}
