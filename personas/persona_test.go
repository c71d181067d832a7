package personas

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/engine"
)

// fullPersona sets every frontmatter field a persona file may carry.
const fullPersona = `---
name: db-reviewer
description: Reviews database changes.
when_to_use: Schema migrations and failovers.
model: openai/gpt-4o-mini
max_turns: 7
permission_mode: plan
background: true
tools:
  - get_sop_text
  - get_proposal
disallowed_tools:
  - "*_skill"
  - "*_write"
required_gates:
  - sop_covers
  - rollback_known
critical_reminder: >-
  Reject when
  unsure.
plugin: sop
timeout: 90s
---

You review database changes.

Approve only with a known rollback.
`

// fullWant is what fullPersona parses to.
func fullWant() *engine.Persona {
	return &engine.Persona{
		Name:             "db-reviewer",
		Description:      "Reviews database changes.",
		WhenToUse:        "Schema migrations and failovers.",
		Model:            "openai/gpt-4o-mini",
		MaxTurns:         7,
		PermissionMode:   "plan",
		Background:       true,
		Tools:            []string{"get_sop_text", "get_proposal"},
		DisallowedTools:  []string{"*_skill", "*_write"},
		CriticalReminder: "Reject when unsure.",
		RequiredGates:    []string{"sop_covers", "rollback_known"},
		Plugin:           "sop",
		Timeout:          90 * time.Second,
		Prompt:           "You review database changes.\n\nApprove only with a known rollback.",
	}
}

// persona builds a persona file from frontmatter lines and a body.
func persona(body string, frontmatter ...string) string {
	return "---\n" + strings.Join(frontmatter, "\n") + "\n---\n" + body
}

func TestParse(t *testing.T) {
	tests := []struct {
		note string
		src  string
		// check inspects a successful parse; nil when an error is expected.
		check func(t *testing.T, p *engine.Persona)
		// wantErr is a fragment the error must contain besides the file name.
		wantErr string
		// wantWarn lists fragments, one per expected warning.
		wantWarn []string
	}{
		{
			note: "full persona maps every field",
			src:  fullPersona,
			check: func(t *testing.T, p *engine.Persona) {
				want := fullWant()
				want.Revision = Revision([]byte(fullPersona))
				if !reflect.DeepEqual(p, want) {
					t.Errorf("got  %#v\nwant %#v", p, want)
				}
			},
		},
		{
			note: "minimal persona gets defaults",
			src:  persona("Review the change.\n", "name: minimal"),
			check: func(t *testing.T, p *engine.Persona) {
				want := &engine.Persona{Name: "minimal", MaxTurns: 5, Prompt: "Review the change.",
					Revision: Revision([]byte(persona("Review the change.\n", "name: minimal")))}
				if !reflect.DeepEqual(p, want) {
					t.Errorf("got  %#v\nwant %#v", p, want)
				}
			},
		},
		{
			note:    "missing opening ---",
			src:     "name: x\n---\nBody.\n",
			wantErr: "must start with a ---",
		},
		{
			note:    "text before the opening ---",
			src:     "# Title\n---\nname: x\n---\nBody.\n",
			wantErr: "must start with a ---",
		},
		{
			note:    "empty file",
			src:     "",
			wantErr: "must start with a ---",
		},
		{
			note:    "unclosed frontmatter",
			src:     "---\nname: x\nBody.\n",
			wantErr: "not closed",
		},
		{
			note:    "bad YAML",
			src:     persona("Body.", "name: [x"),
			wantErr: "frontmatter",
		},
		{
			note:    "frontmatter is a list, not a mapping",
			src:     persona("Body.", "- name: x"),
			wantErr: "frontmatter",
		},
		{
			note:    "name uppercase",
			src:     persona("Body.", "name: Reviewer"),
			wantErr: `name "Reviewer"`,
		},
		{
			note:    "name empty",
			src:     persona("Body.", `name: ""`),
			wantErr: `name ""`,
		},
		{
			note:    "name missing",
			src:     persona("Body.", "description: no name"),
			wantErr: `name ""`,
		},
		{
			note:    "name with a space",
			src:     persona("Body.", "name: db reviewer"),
			wantErr: `name "db reviewer"`,
		},
		{
			note:    "name longer than 64",
			src:     persona("Body.", "name: "+strings.Repeat("a", 65)),
			wantErr: "name",
		},
		{
			note: "name of 64 characters",
			src:  persona("Body.", "name: "+strings.Repeat("a", 64)),
			check: func(t *testing.T, p *engine.Persona) {
				if len(p.Name) != 64 {
					t.Errorf("name length %d, want 64", len(p.Name))
				}
			},
		},
		{
			note:  "max_turns 0 defaults to 5",
			src:   persona("Body.", "name: x", "max_turns: 0"),
			check: wantMaxTurns(5),
		},
		{
			note:  "max_turns 1 is kept",
			src:   persona("Body.", "name: x", "max_turns: 1"),
			check: wantMaxTurns(1),
		},
		{
			note:  "max_turns 50 is kept",
			src:   persona("Body.", "name: x", "max_turns: 50"),
			check: wantMaxTurns(50),
		},
		{
			note:    "max_turns -1",
			src:     persona("Body.", "name: x", "max_turns: -1"),
			wantErr: "max_turns -1",
		},
		{
			note:    "max_turns 51",
			src:     persona("Body.", "name: x", "max_turns: 51"),
			wantErr: "max_turns 51",
		},
		{
			note:    "max_turns not a number",
			src:     persona("Body.", "name: x", "max_turns: many"),
			wantErr: "frontmatter",
		},
		{
			note:    "max_turns with a fraction",
			src:     persona("Body.", "name: x", "max_turns: 2.5"),
			wantErr: `max_turns "2.5" must be a whole number`,
		},
		{
			note:    "max_turns in exponent form",
			src:     persona("Body.", "name: x", "max_turns: 1e1"),
			wantErr: `max_turns "1e1" must be a whole number`,
		},
		{
			note:    "max_turns as a quoted string",
			src:     persona("Body.", "name: x", `max_turns: "7"`),
			wantErr: "cannot unmarshal",
		},
		{
			note:  "max_turns null is absent",
			src:   persona("Body.", "name: x", "max_turns: ~"),
			check: wantMaxTurns(5),
		},
		{
			note:  "max_turns in hexadecimal is still a whole number",
			src:   persona("Body.", "name: x", "max_turns: 0x0a"),
			check: wantMaxTurns(10),
		},
		{
			note:    "model without slash",
			src:     persona("Body.", "name: x", "model: gpt-4o-mini"),
			wantErr: `model "gpt-4o-mini"`,
		},
		{
			note:    "model without provider",
			src:     persona("Body.", "name: x", "model: /gpt-4o-mini"),
			wantErr: `model "/gpt-4o-mini"`,
		},
		{
			note:    "model without model",
			src:     persona("Body.", "name: x", "model: openai/"),
			wantErr: `model "openai/"`,
		},
		{
			note: "model empty means the reviewer's default",
			src:  persona("Body.", "name: x", `model: ""`),
			check: func(t *testing.T, p *engine.Persona) {
				if p.Model != "" {
					t.Errorf("model %q, want empty", p.Model)
				}
			},
		},
		{
			note:    "timeout soon",
			src:     persona("Body.", "name: x", "timeout: soon"),
			wantErr: `timeout "soon"`,
		},
		{
			note:    "timeout without a unit",
			src:     persona("Body.", "name: x", "timeout: 90"),
			wantErr: `timeout "90"`,
		},
		{
			note:    "timeout zero",
			src:     persona("Body.", "name: x", "timeout: 0s"),
			wantErr: `timeout "0s"`,
		},
		{
			note:    "timeout negative",
			src:     persona("Body.", "name: x", "timeout: -5s"),
			wantErr: `timeout "-5s"`,
		},
		{
			note:    "timeout below 30s refused",
			src:     persona("Body.", "name: x", "timeout: 10s"),
			wantErr: "below the 30s minimum",
		},
		{
			note: "timeout 2m",
			src:  persona("Body.", "name: x", "timeout: 2m"),
			check: func(t *testing.T, p *engine.Persona) {
				if p.Timeout != 2*time.Minute {
					t.Errorf("timeout %v, want 2m", p.Timeout)
				}
			},
		},
		{
			note:    "empty body",
			src:     persona("", "name: x"),
			wantErr: "body",
		},
		{
			note:    "body only whitespace",
			src:     persona("\n  \n\t\n", "name: x"),
			wantErr: "body",
		},
		{
			note:    "closing --- at end of file",
			src:     "---\nname: x\n---",
			wantErr: "body",
		},
		{
			note: "unknown key is a warning naming the key",
			src:  persona("Body.", "name: x", "colour: blue"),
			check: func(t *testing.T, p *engine.Persona) {
				if p.Name != "x" {
					t.Errorf("name %q, want x", p.Name)
				}
			},
			wantWarn: []string{`"colour"`},
		},
		{
			note:     "misspelt key is a warning and the field stays unset",
			src:      persona("Body.", "name: x", "maxturns: 9"),
			check:    wantMaxTurns(5),
			wantWarn: []string{`"maxturns"`},
		},
		{
			note: "permission_mode empty stays empty, so the policy refuses the persona as a reviewer",
			src:  persona("Body.", "name: x", `permission_mode: ""`),
			check: func(t *testing.T, p *engine.Persona) {
				if p.PermissionMode != "" {
					t.Errorf("permission_mode %q, want empty", p.PermissionMode)
				}
			},
		},
		{
			note: "permission_mode is kept as written",
			src:  persona("Body.", "name: x", "permission_mode: default"),
			check: func(t *testing.T, p *engine.Persona) {
				if p.PermissionMode != "default" {
					t.Errorf("permission_mode %q, want default", p.PermissionMode)
				}
			},
		},
		{
			note: "UTF-8 BOM before --- is accepted",
			src:  "\ufeff" + fullPersona,
			check: func(t *testing.T, p *engine.Persona) {
				want := fullWant()
				want.Revision = Revision([]byte("\ufeff" + fullPersona))
				if !reflect.DeepEqual(p, want) {
					t.Errorf("got  %#v\nwant %#v", p, want)
				}
			},
		},
		{
			note: "trailing spaces after the opening ---",
			src:  "--- \t\nname: x\n---\nBody.\n",
			check: func(t *testing.T, p *engine.Persona) {
				if p.Name != "x" || p.Prompt != "Body." {
					t.Errorf("got name %q prompt %q, want x and Body.", p.Name, p.Prompt)
				}
			},
		},
		{
			note: "a --- rule in the body stays in the body",
			src:  persona("Part one.\n\n---\n\nPart two.\n", "name: x"),
			check: func(t *testing.T, p *engine.Persona) {
				if want := "Part one.\n\n---\n\nPart two."; p.Prompt != want {
					t.Errorf("prompt %q, want %q", p.Prompt, want)
				}
			},
		},
		{
			note:    "model with an unknown provider",
			src:     persona("Body.", "name: x", "model: azure/gpt-4o"),
			wantErr: `unknown provider "azure"`,
		},
		{
			note:    "model provider is case-sensitive",
			src:     persona("Body.", "name: x", "model: OpenAI/gpt-4o"),
			wantErr: `unknown provider "OpenAI"`,
		},
		{
			note:    "model with white space",
			src:     persona("Body.", "name: x", `model: "openai/gpt 4o"`),
			wantErr: "white space",
		},
		{
			note: "model of an OpenAI-compatible server may contain slashes",
			src:  persona("Body.", "name: x", "model: openai-compatible/meta-llama/Llama-3.1-8B-Instruct"),
			check: func(t *testing.T, p *engine.Persona) {
				if p.Model != "openai-compatible/meta-llama/Llama-3.1-8B-Instruct" {
					t.Errorf("model %q", p.Model)
				}
			},
		},
		{
			note:    "disallowed_tools pattern that does not compile",
			src:     persona("Body.", "name: x", "disallowed_tools:", `  - "*_skill"`, `  - "[abc"`),
			wantErr: `disallowed_tools[1] "[abc": does not compile`,
		},
		{
			note:    "tools pattern with an unclosed brace",
			src:     persona("Body.", "name: x", "tools:", `  - "{get_sop_text,get_proposal"`),
			wantErr: `tools[0] "{get_sop_text,get_proposal": does not compile`,
		},
		{
			note:    "tools pattern with a trailing backslash",
			src:     persona("Body.", "name: x", `tools: ["get_\\"]`),
			wantErr: "trailing backslash",
		},
		{
			note:    "empty tool pattern",
			src:     persona("Body.", "name: x", `disallowed_tools: [""]`),
			wantErr: "empty pattern",
		},
		{
			note: "wildcards, classes and alternatives compile",
			src:  persona("Body.", "name: x", `disallowed_tools: ["*_skill", "get_?", "[a-c]*", "{host,db}_write", "[!g]*"]`),
			check: func(t *testing.T, p *engine.Persona) {
				if len(p.DisallowedTools) != 5 {
					t.Errorf("disallowed_tools %q, want 5 patterns", p.DisallowedTools)
				}
			},
		},
		{
			note: "critical_reminder is trimmed",
			src:  persona("Body.", "name: x", "critical_reminder: |", "  Reject when unsure.", ""),
			check: func(t *testing.T, p *engine.Persona) {
				if p.CriticalReminder != "Reject when unsure." {
					t.Errorf("critical_reminder %q, want %q", p.CriticalReminder, "Reject when unsure.")
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			const file = "personas/team/case.md"
			p, warnings, err := Parse(file, []byte(tc.src))
			if tc.check == nil {
				wantParseError(t, file, p, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			tc.check(t, p)
			wantWarnings(t, file, warnings, tc.wantWarn)
		})
	}
}

// TestParseCRLF checks that a file saved with Windows line endings yields
// the persona its LF twin does.
func TestParseCRLF(t *testing.T) {
	crlf := strings.ReplaceAll(fullPersona, "\n", "\r\n")
	p, warnings, err := Parse("crlf.md", []byte(crlf))
	if err != nil {
		t.Fatalf("Parse of a CRLF file: %v", err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings %q, want none", warnings)
	}
	want := fullWant()
	// The body is compared modulo line endings: the model reads the same
	// text either way. Every frontmatter field must match exactly.
	if got := strings.ReplaceAll(p.Prompt, "\r\n", "\n"); got != want.Prompt {
		t.Errorf("prompt %q, want %q (modulo line endings)", p.Prompt, want.Prompt)
	}
	p.Prompt = want.Prompt
	want.Revision = Revision([]byte(crlf))
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got  %#v\nwant %#v", p, want)
	}
}

// wantParseError checks that err is a persona error naming file and, when
// fragment is set, containing it.
func wantParseError(t *testing.T, file string, p *engine.Persona, err error, fragment string) {
	t.Helper()
	if err == nil {
		t.Fatalf("Parse succeeded with %#v, want an error", p)
	}
	if !errors.Is(err, ErrInvalidPersona) {
		t.Errorf("error %q does not wrap ErrInvalidPersona", err)
	}
	if !strings.Contains(err.Error(), file) {
		t.Errorf("error %q does not name the file %s", err, file)
	}
	if fragment != "" && !strings.Contains(err.Error(), fragment) {
		t.Errorf("error %q does not mention %q", err, fragment)
	}
	if p != nil {
		t.Errorf("persona %#v returned with an error", p)
	}
}

// wantWarnings checks that there is exactly one warning per fragment and
// that each names the file.
func wantWarnings(t *testing.T, file string, warnings, fragments []string) {
	t.Helper()
	if len(warnings) != len(fragments) {
		t.Fatalf("warnings %q, want %d mentioning %q", warnings, len(fragments), fragments)
	}
	for _, frag := range fragments {
		found := false
		for _, w := range warnings {
			if strings.Contains(w, frag) && strings.Contains(w, file) {
				found = true
			}
		}
		if !found {
			t.Errorf("no warning names %s and %s in %q", file, frag, warnings)
		}
	}
}

func wantMaxTurns(n int) func(*testing.T, *engine.Persona) {
	return func(t *testing.T, p *engine.Persona) {
		t.Helper()
		if p.MaxTurns != n {
			t.Errorf("max_turns %d, want %d", p.MaxTurns, n)
		}
	}
}

func TestFrontmatterDelimiterMustBeExact(t *testing.T) {
	tests := []struct {
		note   string
		src    string
		prompt string // empty: must fail
	}{
		{note: "four dashes do not close", src: "---\nname: x\n----\nbody\n"},
		{note: "dashes with trailing text do not close", src: "---\nname: x\n---trailing\nbody\n"},
		{note: "empty frontmatter is closed but has no name", src: "---\n---\nbody\n"},
		{note: "CRLF body is normalised", src: "---\nname: x\n---\r\nbody\r\nmore\r\n", prompt: "body\nmore"},
		{note: "a markdown rule in the body stays in the body", src: "---\nname: x\n---\nabove\n---\nbelow\n", prompt: "above\n---\nbelow"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			p, _, err := Parse("f.md", []byte(tc.src))
			if tc.prompt == "" {
				if err == nil {
					t.Fatalf("parsed %q, want an error", tc.src)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Prompt != tc.prompt {
				t.Fatalf("prompt %q, want %q", p.Prompt, tc.prompt)
			}
		})
	}
}

func TestParseModelProviders(t *testing.T) {
	for _, prov := range Providers() {
		t.Run(prov, func(t *testing.T) {
			model := prov + "/some-model"
			p, _, err := Parse("f.md", []byte(persona("Body.", "name: x", "model: "+model)))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if p.Model != model {
				t.Errorf("model %q, want %q", p.Model, model)
			}
		})
	}
	if got := Providers(); !slices.Equal(got, []string{"anthropic", "ollama", "openai", "openai-compatible"}) {
		t.Errorf("Providers() = %q", got)
	}
}
