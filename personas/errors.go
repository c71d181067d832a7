package personas

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidPersona is wrapped by every parse and validation error,
	// from Parse and from Registry.Replace. Check lists the problems one by
	// one instead.
	ErrInvalidPersona = errors.New("invalid persona")

	// ErrUnreadableRoot is wrapped when the persona directory exists but
	// cannot be read: it is not a directory, or it or one of its
	// subdirectories cannot be listed. A reload that hits it keeps the
	// registry it had; fix the permissions or the path.
	ErrUnreadableRoot = errors.New("persona directory cannot be read")

	// ErrNoRoot is returned by Watch on a registry that has no directory:
	// there is nothing to watch. Build the registry with New or Load and a
	// directory.
	ErrNoRoot = errors.New("persona registry has no directory to watch")
)

// Severity says whether a Problem stops a persona from loading.
type Severity string

const (
	// SeverityWarning is a problem the persona loads despite: an unknown
	// key, a duplicate that is skipped while the first file stays, a file
	// that replaces a built-in.
	SeverityWarning Severity = "warning"
	// SeverityError is a problem that keeps the persona out of the
	// registry.
	SeverityError Severity = "error"
)

// Problem is one finding about a persona file.
type Problem struct {
	// File names the source: a path, or builtin:NAME.md for a built-in.
	File string `json:"file"`
	// Line is the 1-based line the problem is on, 0 when it is about the
	// file as a whole.
	Line     int      `json:"line,omitempty"`
	Severity Severity `json:"severity"`
	Message  string   `json:"message"`
}

// String reads file:line: message, the form editors and CI annotators
// recognise.
func (p Problem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Message)
	}
	return fmt.Sprintf("%s: %s", p.File, p.Message)
}

// IsError says whether the problem keeps the persona out.
func (p Problem) IsError() bool { return p.Severity == SeverityError }
