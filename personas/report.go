package personas

// The reports of `gated personas list` and `gated personas lint`.

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
)

// PersonaListing is one persona in `personas list --format json`.
type PersonaListing struct {
	Name           string `json:"name"`
	Description    string `json:"description,omitempty"`
	Plugin         string `json:"plugin"`
	Model          string `json:"model"`
	PermissionMode string `json:"permission_mode"`
	MaxTurns       int    `json:"max_turns"`
	// Timeout is a Go duration such as 1m30s; empty means the gate's
	// --review-timeout.
	Timeout         string   `json:"timeout"`
	RequiredGates   []string `json:"required_gates"`
	Tools           []string `json:"tools"`
	DisallowedTools []string `json:"disallowed_tools"`
	Origin          string   `json:"origin"`
	Source          string   `json:"source"`
}

func ListingOf(e Entry) PersonaListing {
	p := e.Persona
	l := PersonaListing{
		Name: p.Name, Description: p.Description, Plugin: p.Plugin, Model: p.Model,
		PermissionMode: p.PermissionMode, MaxTurns: p.MaxTurns,
		RequiredGates: nonNil(p.RequiredGates), Tools: nonNil(p.Tools), DisallowedTools: nonNil(p.DisallowedTools),
		Origin: string(e.Origin), Source: e.File,
	}
	if p.Timeout > 0 {
		l.Timeout = p.Timeout.String()
	}
	return l
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// LintReport is what lint found, and the output of --format json.
type LintReport struct {
	// Personas are the names that load, built-ins included.
	Personas []string `json:"personas"`
	// Files are the persona files that load.
	Files    []string  `json:"files"`
	Problems []Problem `json:"problems"`
	Errors   int       `json:"errors"`
	Warnings int       `json:"warnings"`
}

// Add adds problems, keeping them in file and line order.
func (r *LintReport) Add(problems []Problem) {
	for _, p := range problems {
		if p.IsError() {
			r.Errors++
		} else {
			r.Warnings++
		}
	}
	r.Problems = append(r.Problems, problems...)
	slices.SortStableFunc(r.Problems, func(a, b Problem) int {
		return cmp.Or(strings.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
}

func WriteLintText(w io.Writer, r *LintReport) error {
	for _, p := range r.Problems {
		loc := p.File
		if p.Line > 0 {
			loc = fmt.Sprintf("%s:%d", p.File, p.Line)
		}
		fmt.Fprintf(w, "%s: %s: %s\n", loc, p.Severity, p.Message)
	}
	summary := fmt.Sprintf("%d personas load (%d from files)", len(r.Personas), len(r.Files))
	if r.Errors+r.Warnings == 0 {
		_, err := fmt.Fprintf(w, "ok: %s, no problems\n", summary)
		return err
	}
	_, err := fmt.Fprintf(w, "%s; %s, %s\n", summary, plural(r.Errors, "error"), plural(r.Warnings, "warning"))
	return err
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
