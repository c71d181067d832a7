package personas

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gated/gated/engine"
)

func TestComposeSystemPrompt(t *testing.T) {
	tests := []struct {
		note   string
		base   string
		p      *engine.Persona
		skills []string
		want   string
	}{
		{
			note: "base, body, reminder",
			base: "Base.",
			p:    &engine.Persona{Prompt: "Body.", CriticalReminder: "Reject when unsure."},
			want: "Base.\n\nBody.\n\n<critical-reminder>\nReject when unsure.\n</critical-reminder>",
		},
		{
			note: "no reminder, no block",
			base: "Base.",
			p:    &engine.Persona{Prompt: "Body."},
			want: "Base.\n\nBody.",
		},
		{
			note: "base is trimmed",
			base: "\n  Base.\n\n",
			p:    &engine.Persona{Prompt: "Body."},
			want: "Base.\n\nBody.",
		},
		{
			note: "empty base",
			base: "",
			p:    &engine.Persona{Prompt: "Body.", CriticalReminder: "R."},
			want: "Body.\n\n<critical-reminder>\nR.\n</critical-reminder>",
		},
		{
			note:   "skills come last, each in its own block, in order",
			base:   "Base.",
			p:      &engine.Persona{Prompt: "Body.", CriticalReminder: "R."},
			skills: []string{"Read the runbook first.", "  Check replication lag.\n"},
			want: "Base.\n\nBody.\n\n<critical-reminder>\nR.\n</critical-reminder>" +
				"\n\n<skill>\nRead the runbook first.\n</skill>\n\n<skill>\nCheck replication lag.\n</skill>",
		},
		{
			note:   "a skill follows the body when there is no reminder",
			base:   "Base.",
			p:      &engine.Persona{Prompt: "Body."},
			skills: []string{"S."},
			want:   "Base.\n\nBody.\n\n<skill>\nS.\n</skill>",
		},
		{
			note:   "blank skills are left out",
			base:   "Base.",
			p:      &engine.Persona{Prompt: "Body."},
			skills: []string{"", " \n\t", "S."},
			want:   "Base.\n\nBody.\n\n<skill>\nS.\n</skill>",
		},
		{
			note:   "nil persona keeps base and skills",
			base:   "Base.",
			skills: []string{"S."},
			want:   "Base.\n\n<skill>\nS.\n</skill>",
		},
		{
			note: "reminder is trimmed inside its block",
			base: "Base.",
			p:    &engine.Persona{Prompt: "Body.", CriticalReminder: "\n R. \n"},
			want: "Base.\n\nBody.\n\n<critical-reminder>\nR.\n</critical-reminder>",
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			if got := ComposeSystemPrompt(tc.base, tc.p, tc.skills...); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestComposeSystemPromptBuiltins checks the order of the parts in the
// prompt every built-in persona actually gets.
func TestComposeSystemPromptBuiltins(t *testing.T) {
	r, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range r.Names() {
		t.Run(name, func(t *testing.T) {
			p, _ := r.ByName(name)
			const skill = "Skill text."
			got := ComposeSystemPrompt(BasePrompt, p, skill)
			base := strings.Index(got, BasePrompt)
			body := strings.Index(got, p.Prompt)
			block := strings.Index(got, "<critical-reminder>\n"+p.CriticalReminder+"\n</critical-reminder>")
			sk := strings.Index(got, "<skill>\n"+skill+"\n</skill>")
			if base != 0 || body <= base || block <= body || sk <= block {
				t.Errorf("want base at 0 < body < reminder block < skill, got %d, %d, %d, %d", base, body, block, sk)
			}
			if !strings.HasSuffix(got, "</skill>") {
				t.Errorf("prompt does not end with the skill block: %q", got[max(0, len(got)-80):])
			}
		})
	}
}

func ExampleComposeSystemPrompt() {
	p := &engine.Persona{
		Name:             "dba",
		Prompt:           "You review database changes.",
		CriticalReminder: "Reject when unsure.",
	}
	fmt.Println(ComposeSystemPrompt("You work for gated.", p, "Prefer online schema changes."))
	// Output:
	// You work for gated.
	//
	// You review database changes.
	//
	// <critical-reminder>
	// Reject when unsure.
	// </critical-reminder>
	//
	// <skill>
	// Prefer online schema changes.
	// </skill>
}
