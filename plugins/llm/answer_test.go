package llm

import (
	"slices"
	"strings"
	"testing"

	"github.com/gated/gated/engine"
)

func TestParseAnswer(t *testing.T) {
	tests := []struct {
		note     string
		text     string
		decision engine.Decision
		gates    []engine.Gate
		notes    string
		bad      string // part of the error; "" means it parses
	}{
		{
			note:     "the documented format",
			text:     "Decision: approve\nGates:\n- sop_covers: pass — SOP-001 covers it\n- rollback_known: fail — none written\nNotes: Check it.\nSecond line.",
			decision: engine.DecisionApprove,
			gates:    []engine.Gate{{Name: "sop_covers", Passed: true, Detail: "SOP-001 covers it"}, {Name: "rollback_known", Detail: "none written"}},
			notes:    "Check it.\nSecond line.",
		},
		{
			note:     "markdown, passed/failed, other dashes, CRLF",
			text:     "\r\n**Decision:** Reject\r\n**Gates:**\r\n* **sop_covers**: **passed** - SOP-2\r\n- `rollback_known`: FAILED – no rollback\r\n**Notes:** no",
			decision: engine.DecisionReject,
			gates:    []engine.Gate{{Name: "sop_covers", Passed: true, Detail: "SOP-2"}, {Name: "rollback_known", Detail: "no rollback"}},
			notes:    "no",
		},
		{
			note:     "a verdict that is neither pass nor fail is not a gate report",
			text:     "Decision: approve\n- sop_covers: probably — it looks covered\n- no_parallel_operation: pass\n- a bullet of prose: pass the salt",
			decision: engine.DecisionApprove,
			gates:    []engine.Gate{{Name: "no_parallel_operation", Passed: true}},
		},
		{
			note:     "gate lines after Notes are notes",
			text:     "Decision: approve\nNotes: fine\n- sop_covers: pass",
			decision: engine.DecisionApprove,
			notes:    "fine\n- sop_covers: pass",
		},
		{note: "empty", text: " \n\t", bad: "empty"},
		{note: "prose first", text: "I approve.\nDecision: approve", bad: `"I approve."`},
		{note: "approve with caveats", text: "Decision: approve with caveats", bad: "is not"},
		{note: "over the limit", text: "Decision: approve\n" + strings.Repeat("x", engine.MaxDecisionTextBytes), bad: "byte limit"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			a, err := parseAnswer(tc.text)
			if tc.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tc.bad) {
					t.Fatalf("err = %v, want one saying %q", err, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.decision != tc.decision || !slices.Equal(a.gates, tc.gates) || a.notes != tc.notes {
				t.Errorf("got %q %+v %q\nwant %q %+v %q", a.decision, a.gates, a.notes, tc.decision, tc.gates, tc.notes)
			}
		})
	}
}

// FuzzParseAnswer checks that the reviewer never reads an answer more
// favourably than the host does.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{
		"Decision: approve\nGates:\n- sop_covers: pass — x\nNotes: y",
		"**Decision:** reject\n* `g`: failed – z",
		"Decision: approve with caveats",
		"decision:\u00a0APPROVE",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		a, err := parseAnswer(text)
		if err != nil {
			return
		}
		host, _ := engine.ParseDecision(text)
		if a.decision != host {
			t.Fatalf("reviewer reads %q, host reads %q", a.decision, host)
		}
		for _, g := range a.gates {
			if g.Name == "" || !strings.Contains(text, g.Name) {
				t.Fatalf("gate %+v is not in the text", g)
			}
		}
	})
}
