// Package personas parses reviewer personas: markdown files whose YAML
// frontmatter configures the reviewer and whose body is its system
// prompt. It carries the built-in personas, a registry that serves them
// with the files of a directory on top and reloads that directory as it
// changes, and the composition of a reviewer's system prompt.
package personas

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/gobwas/glob"
	"go.yaml.in/yaml/v3"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/yamlpos"
)

// MaxTurnsLimit is the largest max_turns a persona may ask for.
const MaxTurnsLimit = 50

// DefaultMaxTurns is the max_turns of a persona that sets none.
const DefaultMaxTurns = 5

// MinTimeout is the shortest review timeout a persona may set.
const MinTimeout = 30 * time.Second

// providers are the model providers a persona's model may name, sorted.
var providers = []string{"anthropic", "ollama", "openai", "openai-compatible"}

// Providers lists the providers a persona's model may name, as in
// anthropic/claude-sonnet-4-5 or ollama/llama3.1.
func Providers() []string { return slices.Clone(providers) }

// frontmatter mirrors the YAML keys of a persona file. Its yaml tags are
// the known keys: a field added here is known to the unknown-key check at
// once.
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

// knownKeys are the frontmatter keys, read from frontmatter's yaml tags.
var knownKeys = yamlKeys(reflect.TypeFor[frontmatter]())

// yamlKeys returns the keys the YAML decoder maps onto the fields of the
// struct type t: the tag's name, else the lower-cased field name.
func yamlKeys(t reflect.Type) map[string]bool {
	keys := map[string]bool{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = strings.ToLower(f.Name)
		}
		keys[name] = true
	}
	return keys
}

// Parse reads one persona file. file names the source in messages.
// Warnings (an unknown key) do not stop parsing and are returned as
// file:line: message strings; an error wraps ErrInvalidPersona and lists
// every error-level problem. Check returns the same findings as values.
func Parse(file string, src []byte) (*engine.Persona, []string, error) {
	c := check(file, src)
	var warnings, errs []string
	for _, p := range c.problems {
		if p.IsError() {
			errs = append(errs, p.String())
		} else {
			warnings = append(warnings, p.String())
		}
	}
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("%w: %s", ErrInvalidPersona, strings.Join(errs, "; "))
	}
	return c.persona, warnings, nil
}

// Check reads one persona file and reports every problem it finds, with
// the line it is on where known. The persona is nil when any problem is an
// error. It never returns an error of its own: a file it cannot make sense
// of is an error-level Problem.
func Check(file string, src []byte) (*engine.Persona, []Problem) {
	c := check(file, src)
	return c.persona, c.problems
}

// Revision is a persona's revision: the first 128 bits of the SHA-256 of
// its file as loaded, in hex. Any edit to the file, frontmatter or body,
// changes it; review.started records it, so a replay can tell whether the
// same persona would review again.
func Revision(src []byte) string {
	sum := sha256.Sum256(src)
	return hex.EncodeToString(sum[:16])
}

// checked is the outcome of check.
type checked struct {
	persona  *engine.Persona // nil when a problem is an error
	problems []Problem
	nameLine int // line of the name key, 0 when unknown
}

func (c *checked) add(file string, line int, sev Severity, format string, args ...any) {
	c.problems = append(c.problems, Problem{File: file, Line: line, Severity: sev, Message: fmt.Sprintf(format, args...)})
}

func (c *checked) failed() bool { return slices.ContainsFunc(c.problems, Problem.IsError) }

func check(file string, src []byte) checked {
	var c checked
	fail := func(line int, format string, args ...any) checked {
		c.add(file, line, SeverityError, format, args...)
		return c
	}
	revision := Revision(src)
	src = bytes.TrimPrefix(src, []byte("\ufeff"))
	rest, ok := cutLine(src, "---")
	if !ok {
		return fail(1, "must start with a --- line opening the YAML frontmatter")
	}
	head, body, closing, ok := splitFrontmatter(rest)
	if !ok {
		return fail(1, "frontmatter is not closed by a --- line")
	}
	// The frontmatter starts on line 2: a node's line n is file line n+1.
	const offset = 1

	var doc yaml.Node
	if err := yaml.Unmarshal(head, &doc); err != nil {
		c.problems = append(c.problems, yamlProblems(file, head, offset, err)...)
		return c
	}
	var top *yaml.Node
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		top = doc.Content[0]
	}
	var fm frontmatter
	values := map[string]*yaml.Node{}
	if top != nil {
		if top.Kind != yaml.MappingNode {
			return fail(top.Line+offset, "frontmatter must be a mapping of keys to values")
		}
		for i := 0; i+1 < len(top.Content); i += 2 {
			key, value := top.Content[i], top.Content[i+1]
			if key.Value == "<<" {
				continue // a YAML merge key: its keys are checked where they are defined
			}
			if !knownKeys[key.Value] {
				c.add(file, key.Line+offset, SeverityWarning, "unknown frontmatter key %q ignored", key.Value)
				continue
			}
			values[key.Value] = value
		}
		// The decoder truncates a number such as 2.5 into an int field; a
		// turn count is whole or it is a mistake.
		if v := values["max_turns"]; v != nil && v.Kind == yaml.ScalarNode && v.ShortTag() == "!!float" {
			return fail(v.Line+offset, "max_turns %q must be a whole number", v.Value)
		}
		if err := top.Decode(&fm); err != nil {
			// A value of the wrong type or a repeated key. The fields it
			// left unset would only add misleading errors: report what
			// the YAML decoder found and stop there.
			c.problems = append(c.problems, yamlProblems(file, head, offset, err)...)
			return c
		}
	}
	line := func(key string, item int) int {
		v := values[key]
		switch {
		case v == nil:
			return 0
		case item >= 0 && v.Kind == yaml.SequenceNode && item < len(v.Content):
			return v.Content[item].Line + offset
		}
		return v.Line + offset
	}
	c.nameLine = line("name", -1)

	p := &engine.Persona{
		Name: fm.Name, Description: fm.Description, WhenToUse: fm.WhenToUse, Model: fm.Model,
		MaxTurns: fm.MaxTurns, PermissionMode: fm.PermissionMode, Background: fm.Background,
		Tools: fm.Tools, DisallowedTools: fm.DisallowedTools, CriticalReminder: strings.TrimSpace(fm.CriticalReminder),
		RequiredGates: fm.RequiredGates, Plugin: fm.Plugin,
		Prompt:   strings.TrimSpace(strings.ReplaceAll(string(body), "\r\n", "\n")),
		Revision: revision,
	}
	// An absent permission_mode stays empty: the policy lets only personas
	// that say read-only review, so forgetting the key cannot grant write.
	if fm.Timeout != "" {
		d, err := time.ParseDuration(fm.Timeout)
		if err != nil || d <= 0 {
			c.add(file, line("timeout", -1), SeverityError, "timeout %q must be a duration such as 90s", fm.Timeout)
		} else {
			p.Timeout = d
		}
	}
	for _, fp := range validate(p) {
		l := line(fp.key, fp.item)
		if fp.key == "" {
			l = closing + 1 // the body starts after the closing ---
		}
		c.add(file, l, SeverityError, "%s", fp.msg)
	}
	if c.failed() {
		return c
	}
	if p.MaxTurns == 0 {
		p.MaxTurns = DefaultMaxTurns
	}
	c.persona = p
	return c
}

// fieldProblem is a validation error about one frontmatter key (key, and
// item for an element of a list, else -1) or, when key is empty, the body.
type fieldProblem struct {
	key  string
	item int
	msg  string
}

// validate checks what a persona must satisfy however it was made: from a
// file or handed to Registry.Replace. MaxTurns 0 is allowed and means
// DefaultMaxTurns.
func validate(p *engine.Persona) []fieldProblem {
	var out []fieldProblem
	bad := func(key string, item int, format string, args ...any) {
		out = append(out, fieldProblem{key: key, item: item, msg: fmt.Sprintf(format, args...)})
	}
	if !gated.ValidTenant(p.Name) {
		bad("name", -1, "name %q must match [a-z0-9_-]{1,64}", p.Name)
	}
	if p.MaxTurns < 0 || p.MaxTurns > MaxTurnsLimit {
		bad("max_turns", -1, "max_turns %d must be between 1 and %d (0 or absent means %d)", p.MaxTurns, MaxTurnsLimit, DefaultMaxTurns)
	}
	if msg := checkModel(p.Model); msg != "" {
		bad("model", -1, "%s", msg)
	}
	for i, pattern := range p.Tools {
		if err := checkPattern(pattern); err != nil {
			bad("tools", i, "tools[%d] %q: %v", i, pattern, err)
		}
	}
	for i, pattern := range p.DisallowedTools {
		if err := checkPattern(pattern); err != nil {
			bad("disallowed_tools", i, "disallowed_tools[%d] %q: %v", i, pattern, err)
		}
	}
	switch {
	case p.Timeout < 0:
		bad("timeout", -1, "timeout %s must be positive", p.Timeout)
	case p.Timeout > 0 && p.Timeout < MinTimeout:
		bad("timeout", -1, "timeout %s is below the %s minimum: reviewers need time, and a deadline that always fires blocks every change", p.Timeout, MinTimeout)
	}
	if strings.TrimSpace(p.Prompt) == "" {
		bad("", -1, "the body (the system prompt) is empty")
	}
	return out
}

// checkModel returns what is wrong with a model reference, or "". An empty
// model leaves the choice to the plugin.
func checkModel(model string) string {
	if model == "" {
		return ""
	}
	prov, name, ok := strings.Cut(model, "/")
	switch {
	case !ok || prov == "" || name == "":
		return fmt.Sprintf("model %q must read provider/model, e.g. openai/gpt-4o-mini", model)
	case strings.ContainsFunc(model, unicode.IsSpace):
		return fmt.Sprintf("model %q must not contain white space", model)
	case !slices.Contains(providers, prov):
		return fmt.Sprintf("model %q names the unknown provider %q: want one of %s", model, prov, strings.Join(providers, ", "))
	}
	return ""
}

// checkPattern compiles a tool pattern as the policy will match it:
// glob.match(pattern, null, tool), a glob without separators.
func checkPattern(pattern string) error {
	if strings.TrimSpace(pattern) == "" {
		return errors.New("empty pattern")
	}
	if _, err := glob.Compile(pattern); err != nil {
		return fmt.Errorf("does not compile as a glob: %w", err)
	}
	return nil
}

// yamlAtLine finds a reference to another line inside a YAML message, as
// in "mapping key "name" already defined at line 1".
var yamlAtLine = regexp.MustCompile(`at line \d+`)

// yamlProblems turns an error decoding the frontmatter head into problems
// on file lines.
func yamlProblems(file string, head []byte, offset int, err error) []Problem {
	errs := yamlpos.Errors(head, err)
	out := make([]Problem, 0, len(errs))
	for _, e := range errs {
		p := Problem{File: file, Severity: SeverityError}
		if e.Line > 0 {
			p.Line = e.Line + offset
		}
		msg := yamlAtLine.ReplaceAllStringFunc(e.Msg, func(m string) string {
			n, _ := strconv.Atoi(strings.TrimPrefix(m, "at line "))
			return "at line " + strconv.Itoa(n+offset)
		})
		p.Message = "frontmatter: " + msg
		out = append(out, p)
	}
	return out
}

// splitFrontmatter finds the first line that is exactly --- (trailing
// white space and a CR allowed) and splits around it. closing is the file
// line of that ---, counting the opening --- as line 1.
func splitFrontmatter(rest []byte) (head, body []byte, closing int, ok bool) {
	for off, n := 0, 2; off <= len(rest); n++ {
		line := rest[off:]
		next := len(rest)
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line = line[:i]
			next = off + i + 1
		}
		if string(bytes.TrimRight(line, " \t\r")) == "---" {
			return rest[:off], rest[next:], n, true
		}
		if next == len(rest) {
			break
		}
		off = next
	}
	return nil, nil, 0, false
}

// cutLine removes a first line equal to want (ignoring trailing space).
func cutLine(src []byte, want string) ([]byte, bool) {
	line, rest, _ := bytes.Cut(src, []byte("\n"))
	if string(bytes.TrimRight(line, " \t\r")) != want {
		return nil, false
	}
	return rest, true
}
