// Package personas parses reviewer personas: markdown files whose YAML
// frontmatter configures the reviewer and whose body is its system
// prompt. It also carries the built-in personas.
package personas

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gated/gated/engine"
)

// ErrInvalidPersona is wrapped by every parse and validation error.
var ErrInvalidPersona = errors.New("invalid persona")

// MaxTurnsLimit is the largest max_turns a persona may ask for.
const MaxTurnsLimit = 50

// MinTimeout is the shortest review timeout a persona may set.
const MinTimeout = 30 * time.Second

// frontmatter mirrors the YAML keys of a persona file.
type frontmatter struct {
	Name             string   `yaml:"name"`
	Description      string   `yaml:"description"`
	WhenToUse        string   `yaml:"when_to_use"`
	Model            string   `yaml:"model"`
	MaxTurns         int      `yaml:"max_turns"`
	PermissionMode   string   `yaml:"permission_mode"`
	Background       bool     `yaml:"background"`
	Tools            []string `yaml:"tools"`
	DisallowedTools  []string `yaml:"disallowed_tools"`
	CriticalReminder string   `yaml:"critical_reminder"`
	RequiredGates    []string `yaml:"required_gates"`
	Plugin           string   `yaml:"plugin"`
	Timeout          string   `yaml:"timeout"`
}

var knownKeys = map[string]bool{
	"name": true, "description": true, "when_to_use": true, "model": true, "max_turns": true,
	"permission_mode": true, "background": true, "tools": true, "disallowed_tools": true,
	"critical_reminder": true, "required_gates": true, "plugin": true, "timeout": true,
}

// Parse reads one persona file. file names the source in errors. Warnings
// (unknown keys) do not stop parsing; errors do.
func Parse(file string, src []byte) (*engine.Persona, []string, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidPersona, file, fmt.Sprintf(format, args...))
	}
	src = bytes.TrimPrefix(src, []byte("\ufeff"))
	rest, ok := cutLine(src, "---")
	if !ok {
		return nil, nil, fail("must start with a --- line opening the YAML frontmatter")
	}
	head, body, ok := splitFrontmatter(rest)
	if !ok {
		return nil, nil, fail("frontmatter is not closed by a --- line")
	}

	var fm frontmatter
	if err := yaml.Unmarshal(head, &fm); err != nil {
		return nil, nil, fail("frontmatter: %v", err)
	}
	var keys map[string]any
	_ = yaml.Unmarshal(head, &keys)
	var warnings []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if !knownKeys[k] {
			warnings = append(warnings, fmt.Sprintf("%s: unknown frontmatter key %q ignored", file, k))
		}
	}

	p := &engine.Persona{
		Name: fm.Name, Description: fm.Description, WhenToUse: fm.WhenToUse, Model: fm.Model,
		MaxTurns: fm.MaxTurns, PermissionMode: fm.PermissionMode, Background: fm.Background,
		Tools: fm.Tools, DisallowedTools: fm.DisallowedTools, CriticalReminder: strings.TrimSpace(fm.CriticalReminder),
		RequiredGates: fm.RequiredGates, Plugin: fm.Plugin,
		Prompt: strings.TrimSpace(strings.ReplaceAll(string(body), "\r\n", "\n")),
	}
	if !engine.ValidTenant(p.Name) {
		return nil, nil, fail("name %q must match [a-z0-9_-]{1,64}", p.Name)
	}
	if p.MaxTurns < 0 || p.MaxTurns > MaxTurnsLimit {
		return nil, nil, fail("max_turns %d must be between 1 and %d (0 or absent means 5)", p.MaxTurns, MaxTurnsLimit)
	}
	if p.MaxTurns == 0 {
		p.MaxTurns = 5
	}
	if p.Model != "" {
		if prov, model, ok := strings.Cut(p.Model, "/"); !ok || prov == "" || model == "" {
			return nil, nil, fail("model %q must read provider/model, e.g. openai/gpt-4o-mini", p.Model)
		}
	}
	// An absent permission_mode stays empty: the policy lets only personas
	// that say read-only review, so forgetting the key cannot grant write.
	if fm.Timeout != "" {
		d, err := time.ParseDuration(fm.Timeout)
		if err != nil || d <= 0 {
			return nil, nil, fail("timeout %q must be a duration such as 90s", fm.Timeout)
		}
		if d < MinTimeout {
			return nil, nil, fail("timeout %s is below the %s minimum: reviewers need time, and a deadline that always fires blocks every change", d, MinTimeout)
		}
		p.Timeout = d
	}
	if p.Prompt == "" {
		return nil, nil, fail("the body (the system prompt) is empty")
	}
	return p, warnings, nil
}

// splitFrontmatter finds the first line that is exactly --- (trailing
// white space and a CR allowed) and splits around it.
func splitFrontmatter(rest []byte) (head, body []byte, ok bool) {
	for off := 0; off <= len(rest); {
		line := rest[off:]
		next := len(rest)
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line = line[:i]
			next = off + i + 1
		}
		if string(bytes.TrimRight(line, " \t\r")) == "---" {
			return rest[:off], rest[next:], true
		}
		if next == len(rest) {
			break
		}
		off = next
	}
	return nil, nil, false
}

// cutLine removes a first line equal to want (ignoring trailing space).
func cutLine(src []byte, want string) ([]byte, bool) {
	line, rest, _ := bytes.Cut(src, []byte("\n"))
	if string(bytes.TrimRight(line, " \t\r")) != want {
		return nil, false
	}
	return rest, true
}
