package personas

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gated/gated/engine"
)

//go:embed builtin/*.md
var builtinFS embed.FS

// Origin says where a persona in the registry came from.
type Origin string

const (
	// OriginBuiltin is a persona compiled into gated.
	OriginBuiltin Origin = "builtin"
	// OriginFile is a persona read from the registry's directory.
	OriginFile Origin = "file"
	// OriginReplaced is a persona put in place by Registry.Replace.
	OriginReplaced Origin = "replaced"
)

// Entry is one persona of a snapshot and where it came from.
type Entry struct {
	// Persona is shared by every reader of the snapshot: never modify it.
	Persona *engine.Persona
	Origin  Origin
	// File is the source: a path under the registry's directory, or
	// builtin/NAME.md inside the gated binary; empty for OriginReplaced.
	File string
}

// Snapshot is the registry's content at one moment. It never changes:
// reloads, Replace and Remove build a new one and swap it in, so a reader
// that holds a snapshot sees one consistent set of personas. It implements
// engine.Personas and engine.PersonaLister.
type Snapshot struct {
	byName map[string]Entry
	names  []string // sorted
}

var (
	_ engine.Personas      = (*Snapshot)(nil)
	_ engine.PersonaLister = (*Snapshot)(nil)
)

func newSnapshot(byName map[string]Entry) *Snapshot {
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return &Snapshot{byName: byName, names: names}
}

// ByName returns the named persona, or false when there is none.
func (s *Snapshot) ByName(name string) (*engine.Persona, bool) {
	e, ok := s.byName[name]
	return e.Persona, ok
}

// Persona implements engine.Personas; it is ByName.
func (s *Snapshot) Persona(name string) (*engine.Persona, bool) { return s.ByName(name) }

// Names lists the personas by name, sorted. It implements
// engine.PersonaLister.
func (s *Snapshot) Names() []string { return slices.Clone(s.names) }

// Entry returns the named persona with its origin.
func (s *Snapshot) Entry(name string) (Entry, bool) {
	e, ok := s.byName[name]
	return e, ok
}

// Entries lists every persona with its origin, sorted by name.
func (s *Snapshot) Entries() []Entry {
	out := make([]Entry, len(s.names))
	for i, n := range s.names {
		out[i] = s.byName[n]
	}
	return out
}

// Len is the number of personas.
func (s *Snapshot) Len() int { return len(s.names) }

// with returns a copy of s in which name is e, or absent when e is nil.
func (s *Snapshot) with(name string, e *Entry) *Snapshot {
	next := make(map[string]Entry, len(s.byName)+1)
	for n, old := range s.byName {
		next[n] = old
	}
	if e == nil {
		delete(next, name)
	} else {
		next[name] = *e
	}
	return newSnapshot(next)
}

// Registry serves personas by name: the built-in personas, then the
// persona files under its directory (a file may replace a built-in of the
// same name), then the changes made with Replace and Remove. Readers never
// wait: every read loads the current immutable Snapshot, and every change
// builds a whole new one and swaps it in atomically, so a review in flight
// never sees a half-loaded registry. The personas it returns are shared
// and must not be modified.
//
// Registry implements engine.Personas and engine.PersonaLister.
type Registry struct {
	root string
	cur  atomic.Pointer[Snapshot]

	mu sync.Mutex // serialises the writers: Reload, Replace, Remove
	// edits are Replace's personas and Remove's names (a nil entry), by
	// name. They outlast reloads. Guarded by mu.
	edits map[string]*Entry
}

var (
	_ engine.Personas      = (*Registry)(nil)
	_ engine.PersonaLister = (*Registry)(nil)
)

// Reload is the report of one load of a registry's personas.
type Reload struct {
	At   time.Time `json:"at"`
	Root string    `json:"root,omitempty"`
	// OK is false when the directory could not be read: the registry kept
	// what it had, and Error says why.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Changed is true when the swap changed any persona or where it came
	// from.
	Changed bool `json:"changed"`
	// Files are the persona files that loaded, in load order.
	Files []string `json:"files,omitempty"`
	// Personas are the names served after the load.
	Personas []string `json:"personas"`
	// Warnings are problems the files loaded despite; Errors are problems
	// that kept a file out (the others still loaded).
	Warnings []Problem     `json:"warnings,omitempty"`
	Errors   []Problem     `json:"errors,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// Messages lists the warnings and errors as file:line: message strings,
// errors marked "(skipped)".
func (r Reload) Messages() []string {
	var out []string
	for _, p := range r.Warnings {
		out = append(out, p.String())
	}
	for _, p := range r.Errors {
		out = append(out, p.String()+" (skipped)")
	}
	return out
}

// New returns a registry of the built-in personas plus every *.md file
// under root, recursively, with the report of that first load.
//
// Files load in lexical path order, and the first file to claim a name
// keeps it: later ones are skipped with a warning. A file may replace a
// built-in persona of the same name (with a warning, since it changes
// what a fresh gated would do). A file that does not parse is skipped
// with an error-level problem; the others load. Names starting with a dot
// (editor files, .git) are ignored. An empty root gives the built-ins
// alone, and so does a root that does not exist: it may be created later,
// and Watch picks it up.
//
// The error wraps ErrUnreadableRoot when root exists but cannot be read,
// or ErrInvalidPersona when a built-in persona is broken.
func New(root string) (*Registry, Reload, error) {
	r := &Registry{root: root, edits: map[string]*Entry{}}
	snap, rep, err := r.build(nil)
	if err != nil {
		rep.Error = err.Error()
		return nil, rep, err
	}
	r.cur.Store(snap)
	return r, rep, nil
}

// Load is New with the report flattened to messages: the warnings and
// the errors of files that were skipped.
func Load(root string) (*Registry, []string, error) {
	r, rep, err := New(root)
	if err != nil {
		return nil, rep.Messages(), fmt.Errorf("loading personas from %s: %w", root, err)
	}
	return r, rep.Messages(), nil
}

// Builtin returns a registry of the built-in personas alone. Each call
// parses them afresh, so registries never share a persona.
func Builtin() (*Registry, error) {
	r, _, err := New("")
	return r, err
}

// Root is the directory the registry loads, empty for built-ins alone.
func (r *Registry) Root() string { return r.root }

// Snapshot returns the current content. Hold it to make several lookups
// against one consistent set of personas.
func (r *Registry) Snapshot() *Snapshot { return r.cur.Load() }

// ByName returns the named persona, or false when there is none.
func (r *Registry) ByName(name string) (*engine.Persona, bool) { return r.cur.Load().ByName(name) }

// Persona implements engine.Personas; it is ByName.
func (r *Registry) Persona(name string) (*engine.Persona, bool) { return r.cur.Load().ByName(name) }

// Names lists the registered personas, sorted. It implements
// engine.PersonaLister.
func (r *Registry) Names() []string { return r.cur.Load().Names() }

// Reload reads the built-ins and the directory again and swaps the result
// in whole. When the directory cannot be read (ErrUnreadableRoot) the
// registry keeps what it had and the report says why (OK false). Replace
// and Remove changes are applied on top of what was read.
func (r *Registry) Reload() Reload {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.cur.Load()
	snap, rep, err := r.build(prev)
	if err != nil {
		rep.OK, rep.Error, rep.Personas = false, err.Error(), prev.Names()
		return rep
	}
	if rep.Changed {
		r.cur.Store(snap)
	}
	return rep
}

// Replace puts a copy of p in the registry under p.Name, in place of any
// persona of that name, and keeps it there across reloads until Remove.
// MaxTurns 0 becomes DefaultMaxTurns. The error wraps ErrInvalidPersona
// when p is nil or fails the checks a persona file must pass; the registry
// is then unchanged.
func (r *Registry) Replace(p *engine.Persona) error {
	if p == nil {
		return fmt.Errorf("%w: Replace needs a persona, got nil", ErrInvalidPersona)
	}
	cp := clonePersona(p)
	if cp.MaxTurns == 0 {
		cp.MaxTurns = DefaultMaxTurns
	}
	if probs := validate(cp); len(probs) > 0 {
		msgs := make([]string, len(probs))
		for i, fp := range probs {
			msgs[i] = fp.msg
		}
		return fmt.Errorf("%w: replacing %q: %s", ErrInvalidPersona, p.Name, strings.Join(msgs, "; "))
	}
	e := &Entry{Persona: cp, Origin: OriginReplaced}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.edits[cp.Name] = e
	r.cur.Store(r.cur.Load().with(cp.Name, e))
	return nil
}

// Remove takes the named persona out of the registry and keeps it out
// across reloads, even when a file or a built-in defines it, until Replace
// puts one back. It reports whether the persona was there.
func (r *Registry) Remove(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.cur.Load()
	_, had := cur.byName[name]
	r.edits[name] = nil
	if had {
		r.cur.Store(cur.with(name, nil))
	}
	return had
}

// build loads the built-ins, the directory and the edits into a new
// snapshot. prev, when not nil, is what the report compares against.
// Callers hold mu, or own r exclusively.
func (r *Registry) build(prev *Snapshot) (*Snapshot, Reload, error) {
	start := time.Now()
	rep := Reload{At: start, Root: r.root}
	byName, err := loadBuiltins()
	if err != nil {
		return nil, rep, err
	}
	if r.root != "" {
		if err := loadDir(r.root, byName, &rep); err != nil {
			rep.Duration = time.Since(start)
			return nil, rep, err
		}
	}
	for name, e := range r.edits {
		if e == nil {
			delete(byName, name)
		} else {
			byName[name] = *e
		}
	}
	snap := newSnapshot(byName)
	rep.OK = true
	rep.Personas = snap.Names()
	rep.Changed = prev == nil || !reflect.DeepEqual(prev.byName, snap.byName)
	rep.Duration = time.Since(start)
	return snap, rep, nil
}

// loadBuiltins parses the embedded personas.
func loadBuiltins() (map[string]Entry, error) {
	byName := map[string]Entry{}
	files, err := fs.Glob(builtinFS, "builtin/*.md")
	if err != nil {
		return nil, err
	}
	for _, file := range files {
		src, err := builtinFS.ReadFile(file)
		if err != nil {
			return nil, err
		}
		p, _, err := Parse(file, src)
		if err != nil {
			return nil, err
		}
		if _, dup := byName[p.Name]; dup {
			return nil, fmt.Errorf("%w: built-in persona %q defined twice", ErrInvalidPersona, p.Name)
		}
		byName[p.Name] = Entry{Persona: p, Origin: OriginBuiltin, File: path.Join("builtin", path.Base(file))}
	}
	return byName, nil
}

// loadDir adds the persona files under root to byName, reporting into
// rep. A root that does not exist adds nothing; one that cannot be read,
// in whole or in part, is an error wrapping ErrUnreadableRoot, since a
// partial view would drop personas that are still there.
func loadDir(root string, byName map[string]Entry, rep *Reload) error {
	info, err := os.Stat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%w: %w", ErrUnreadableRoot, err)
	case !info.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrUnreadableRoot, root)
	}
	first := map[string]string{} // persona name -> the file that defined it
	return walkTree(root, func(file string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked: the next event reloads
			}
			return fmt.Errorf("%w: %w", ErrUnreadableRoot, err)
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".md") {
			return nil
		}
		src, err := os.ReadFile(file)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			rep.Errors = append(rep.Errors, Problem{File: file, Severity: SeverityError, Message: err.Error()})
			return nil
		}
		c := check(file, src)
		for _, p := range c.problems {
			if p.IsError() {
				rep.Errors = append(rep.Errors, p)
			} else {
				rep.Warnings = append(rep.Warnings, p)
			}
		}
		if c.persona == nil {
			return nil
		}
		name := c.persona.Name
		if prev, dup := first[name]; dup {
			rep.Warnings = append(rep.Warnings, Problem{File: file, Line: c.nameLine, Severity: SeverityWarning,
				Message: fmt.Sprintf("persona %q is already defined by %s (skipped)", name, prev)})
			return nil
		}
		if e, ok := byName[name]; ok && e.Origin == OriginBuiltin {
			rep.Warnings = append(rep.Warnings, Problem{File: file, Line: c.nameLine, Severity: SeverityWarning,
				Message: fmt.Sprintf("replaces the built-in persona %q", name)})
		}
		first[name] = file
		byName[name] = Entry{Persona: c.persona, Origin: OriginFile, File: file}
		rep.Files = append(rep.Files, file)
		return nil
	})
}

// walkTree walks root like filepath.WalkDir, but follows root itself when
// it is a symbolic link (a mounted volume often is one) and skips every
// entry below root whose name starts with a dot.
func walkTree(root string, fn fs.WalkDirFunc) error {
	start := root
	if fi, err := os.Lstat(root); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		start = root + string(filepath.Separator)
	}
	return filepath.WalkDir(start, func(file string, d fs.DirEntry, err error) error {
		if file != start && d != nil && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		return fn(file, d, err)
	})
}

func clonePersona(p *engine.Persona) *engine.Persona {
	cp := *p
	cp.Tools = slices.Clone(p.Tools)
	cp.DisallowedTools = slices.Clone(p.DisallowedTools)
	cp.RequiredGates = slices.Clone(p.RequiredGates)
	return &cp
}
