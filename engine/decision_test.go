package engine_test

import (
	"strings"
	"testing"

	"github.com/gated/gated/engine"
)

func TestParseDecision(t *testing.T) {
	tests := []struct {
		note string
		text string
		want engine.Decision
	}{
		{note: "plain approve", text: "Decision: approve", want: engine.DecisionApprove},
		{note: "bold markdown and capitals", text: "**Decision:** Approve", want: engine.DecisionApprove},
		{note: "upper case after leading blank lines", text: "\n\n   \n\t\ndecision: APPROVE", want: engine.DecisionApprove},
		{note: "code span and underscores", text: "`Decision: _approve_`", want: engine.DecisionApprove},
		{note: "extra spaces and tabs", text: "  Decision:\t  approve  ", want: engine.DecisionApprove},
		{note: "CRLF line endings", text: "Decision: approve\r\nGates:\r\n- sop_covers: pass\r\n", want: engine.DecisionApprove},
		{note: "approve followed by details", text: "Decision: approve\nGates:\n- sop_covers: pass\nNotes: reject if unsure", want: engine.DecisionApprove},
		{note: "text exactly at the limit", text: "Decision: approve\n" + strings.Repeat("x", engine.MaxDecisionTextBytes-len("Decision: approve\n")), want: engine.DecisionApprove},

		{note: "approve with caveats", text: "Decision: approve with caveats", want: engine.DecisionReject},
		{note: "approve with a full stop", text: "Decision: approve.", want: engine.DecisionReject},
		{note: "approve without the decision label", text: "I approve", want: engine.DecisionReject},
		{note: "bare approve", text: "approve", want: engine.DecisionReject},
		{note: "empty", text: "", want: engine.DecisionReject},
		{note: "white space only", text: " \n\t\r\n   \n", want: engine.DecisionReject},
		{note: "explicit reject", text: "Decision: reject", want: engine.DecisionReject},
		{note: "no value", text: "Decision:", want: engine.DecisionReject},
		{note: "maybe", text: "Decision: maybe", want: engine.DecisionReject},
		{note: "approve and reject", text: "Decision: approve reject", want: engine.DecisionReject},
		{note: "not approve", text: "Decision: not approve", want: engine.DecisionReject},
		{note: "text over the limit", text: "Decision: approve\n" + strings.Repeat("x", engine.MaxDecisionTextBytes), want: engine.DecisionReject},
		{note: "approve only on the second non-blank line", text: "Looks safe to me.\n\nDecision: approve", want: engine.DecisionReject},
		{note: "reject then approve", text: "Decision: reject\nDecision: approve", want: engine.DecisionReject},
		{note: "label inside a sentence", text: "My Decision: approve", want: engine.DecisionReject},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			got, why := engine.ParseDecision(tc.text)
			if got != tc.want {
				t.Errorf("ParseDecision(%.80q) = %q (%s), want %q", tc.text, got, why, tc.want)
			}
			if why == "" {
				t.Error("ParseDecision gave no explanation")
			}
		})
	}
}

func FuzzParseDecision(f *testing.F) {
	for _, s := range []string{
		"Decision: approve", "**Decision:** Approve", "\n\ndecision: APPROVE\n", "Decision: approve with caveats",
		"Decision: approve.", "I approve", "", " \n ", "Decision: reject", "Looks fine\nDecision: approve",
		"`Decision`: _approve_", "Decision:\u00a0approve", "Decision: approve\r\nGates:",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got, why := engine.ParseDecision(text)
		if got != engine.DecisionApprove && got != engine.DecisionReject {
			t.Fatalf("ParseDecision returned %q", got)
		}
		if why == "" {
			t.Fatal("ParseDecision gave no explanation")
		}
		if got != engine.DecisionApprove {
			return
		}
		if len(text) > engine.MaxDecisionTextBytes {
			t.Fatalf("approved a text of %d bytes", len(text))
		}
		if line := referenceDecisionLine(text); line != "decision: approve" {
			t.Fatalf("approved %q, whose first non-blank line reads %q", text, line)
		}
	})
}

// referenceDecisionLine is the contract's reading of a reviewer's text: the
// first non-blank line, lower-cased, without the markdown emphasis markers
// *, _ and `, with runs of white space collapsed to one space.
func referenceDecisionLine(text string) string {
	for line := range strings.Lines(text) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		line = strings.ToLower(line)
		line = strings.NewReplacer("*", "", "_", "", "`", "").Replace(line)
		return strings.Join(strings.Fields(line), " ")
	}
	return ""
}
