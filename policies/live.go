package policies

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/fswatch"
)

// Live is the policy gated serves: the last good build of a set of
// sources. A build is good when it loads, compiles, passes its own checks
// and passes its own Rego tests, and when the planned evaluator (if it
// decides) decides every input of those tests as topdown does. Reload swaps a good build in atomically;
// a bad one never replaces the running policy.
//
// Live implements engine.Policy; an evaluation in flight keeps the
// Evaluator it started with.
type Live struct {
	src    Sources
	notify func(Reload)

	cur   atomic.Pointer[Evaluator]
	state atomic.Pointer[State]
	mu    sync.Mutex // one build at a time
}

var _ engine.Policy = (*Live)(nil)

// State is what readiness and metrics report about the served policy.
type State struct {
	// Revision is the revision being served.
	Revision string `json:"revision"`
	// LoadedAt is when it was swapped in.
	LoadedAt time.Time `json:"loaded_at"`
	// Files are the sources it was built from.
	Files []string `json:"files"`
	// Tests is the number of Rego tests it passed.
	Tests int `json:"tests"`
	// ParityInputs is the number of distinct inputs of those tests that
	// the planned evaluator and topdown decided alike (0 on topdown).
	ParityInputs int `json:"parity_inputs"`
	// Evaluator says which evaluator decides its proposals, and why not
	// the planned one.
	Evaluator PlanStatus `json:"evaluator"`
	// Stale is true when the latest reload failed: the sources on disk
	// say something other than what is served.
	Stale bool `json:"stale"`
	// LastReload is the most recent reload attempt, nil before the first.
	LastReload *Reload `json:"last_reload,omitempty"`
	// Reloads and Failures count reload attempts since start.
	Reloads  int `json:"reloads"`
	Failures int `json:"failures"`
}

// Reload is one reload attempt.
type Reload struct {
	At time.Time `json:"at"`
	// OK is true when the build was good (whether or not it changed
	// anything).
	OK bool `json:"ok"`
	// Changed is true when a good build with a new revision was swapped in.
	Changed bool `json:"changed"`
	// Revision is the candidate's revision, empty when it did not build.
	Revision string `json:"revision,omitempty"`
	// Previous is the revision served before the attempt.
	Previous string `json:"previous"`
	// Error says why the build was refused.
	Error    string        `json:"error,omitempty"`
	Duration time.Duration `json:"duration_ns"`
	Tests    int           `json:"tests"`
}

// NewLive builds the policy from src. A bad build is an error: gated does
// not start on a policy it cannot trust. notify, when not nil, hears of
// every later reload attempt.
func NewLive(ctx context.Context, src Sources, notify func(Reload)) (*Live, error) {
	l := &Live{src: src, notify: notify}
	b, err := build(ctx, src)
	if err != nil {
		return nil, err
	}
	l.cur.Store(b.eval)
	l.state.Store(&State{Revision: b.eval.Revision(), LoadedAt: time.Now(), Files: b.files, Tests: b.tests, ParityInputs: b.parity, Evaluator: b.eval.Plan()})
	return l, nil
}

// ErrNoGoodBuild is the error of evaluating a candidate policy (see
// NewCandidate) that has not built yet: fix its sources and it is loaded
// on the next reload.
var ErrNoGoodBuild = errors.New("the candidate policy has no good build yet")

// NewCandidate builds a candidate policy from src, one that is evaluated
// beside the served policy (a shadow) and must never stop gated: unlike
// NewLive, a bad first build is not fatal. It returns the Live and the
// build's error, if any; until a reload succeeds the Live has no
// evaluator, its Revision is empty and Evaluate fails with ErrNoGoodBuild.
func NewCandidate(ctx context.Context, src Sources, notify func(Reload)) (*Live, error) {
	l, err := NewLive(ctx, src, notify)
	if err == nil {
		return l, nil
	}
	l = &Live{src: src, notify: notify}
	now := time.Now()
	l.state.Store(&State{Stale: true, LastReload: &Reload{At: now, Error: err.Error()}, Reloads: 1, Failures: 1})
	return l, err
}

// Evaluate implements engine.Policy with the current evaluator.
func (l *Live) Evaluate(ctx context.Context, in engine.PolicyInput) (engine.PolicyDecision, error) {
	e := l.cur.Load()
	if e == nil {
		return engine.PolicyDecision{}, ErrNoGoodBuild
	}
	return e.Evaluate(ctx, in)
}

// ReadsBudget says whether the current evaluator can read input.budget;
// true when there is none yet.
func (l *Live) ReadsBudget() bool {
	e := l.cur.Load()
	return e == nil || e.ReadsBudget()
}

// ReadsSession says whether the current evaluator can read
// input.session; true when there is none yet.
func (l *Live) ReadsSession() bool {
	e := l.cur.Load()
	return e == nil || e.ReadsSession()
}

// Flows is the current evaluator's flow configuration; nil when there is
// none yet.
func (l *Live) Flows() *FlowConfig {
	if e := l.cur.Load(); e != nil {
		return e.flows
	}
	return nil
}

// Revision is the revision being served; empty for a candidate that has
// not built yet.
func (l *Live) Revision() string {
	e := l.cur.Load()
	if e == nil {
		return ""
	}
	return e.Revision()
}

// Current is the evaluator being served; nil for a candidate that has
// not built yet.
func (l *Live) Current() *Evaluator { return l.cur.Load() }

// State reports the served policy and the latest reload.
func (l *Live) State() State { return *l.state.Load() }

type built struct {
	eval   *Evaluator
	files  []string
	tests  int
	parity int // test inputs both evaluators decided alike
}

// build loads, compiles and tests src.
func build(ctx context.Context, src Sources) (*built, error) {
	b, files, err := LoadFiles(src)
	if err != nil {
		return nil, err
	}
	var opts []CompileOption
	if src.Topdown {
		opts = append(opts, Topdown())
	}
	eval, err := Compile(ctx, b, opts...)
	if err != nil {
		return nil, err
	}
	report, err := runTests(ctx, b.UserTests(), "", false)
	if err != nil {
		return nil, err
	}
	if failed := failures(report); len(failed) > 0 {
		return nil, fmt.Errorf("%w: %d of %d Rego tests fail:\n  %s", ErrInvalidBundle, len(failed), len(report.Results), strings.Join(failed, "\n  "))
	}
	// The tests ran on topdown; the planned evaluator, when it decides,
	// must decide every input they make alike.
	parity, err := CheckParity(ctx, eval, b.UserTests(), "")
	if err != nil {
		return nil, err
	}
	if err := parity.Err(); err != nil {
		return nil, err
	}
	return &built{eval: eval, files: files, tests: len(report.Results), parity: parity.Compared}, nil
}

func failures(r *TestReport) []string {
	var out []string
	for _, res := range r.Results {
		switch {
		case res.Error != nil:
			out = append(out, fmt.Sprintf("%s: %s.%s: error: %v", res.Location, res.Package, res.Name, res.Error))
		case res.Fail:
			out = append(out, fmt.Sprintf("%s: %s.%s: failed", res.Location, res.Package, res.Name))
		}
	}
	return out
}

// Reload rebuilds the policy from its sources and swaps it in when the
// build is good. It returns the attempt, which notify also hears.
func (l *Live) Reload(ctx context.Context) Reload {
	l.mu.Lock()
	defer l.mu.Unlock()
	start := time.Now()
	prev := l.state.Load()
	r := Reload{At: start, Previous: prev.Revision}
	b, err := build(ctx, l.src)
	r.Duration = time.Since(start)
	next := *prev
	next.Reloads++
	if err != nil {
		r.Error = err.Error()
		next.Failures++
		next.Stale = true
	} else {
		r.OK, r.Revision, r.Tests = true, b.eval.Revision(), b.tests
		next.Stale = false
		if r.Revision != prev.Revision {
			r.Changed = true
			l.cur.Store(b.eval)
			next.Revision, next.LoadedAt, next.Files, next.Tests, next.ParityInputs = r.Revision, time.Now(), b.files, b.tests, b.parity
			next.Evaluator = b.eval.Plan()
		}
	}
	next.LastReload = &r
	l.state.Store(&next)
	if l.notify != nil {
		l.notify(r)
	}
	return r
}

// WatchOptions tune Watch.
type WatchOptions struct {
	// Debounce is how long the sources must be quiet before a reload;
	// editors write a file in several steps. Default 250ms.
	Debounce time.Duration
	// Poll is the interval of a fingerprint check that catches what file
	// events miss (a directory replaced by a symlink swap, a network file
	// system). Default 10s; negative disables it.
	Poll time.Duration
}

// Watch reloads the policy whenever its sources change, until ctx ends.
// It watches the policy directory (recursively) and the directories of the
// data files, and also compares a fingerprint of the sources every
// opts.Poll. It returns an error only when watching cannot start.
func (l *Live) Watch(ctx context.Context, opts WatchOptions) error {
	if opts.Debounce <= 0 {
		opts.Debounce = 250 * time.Millisecond
	}
	if opts.Poll == 0 {
		opts.Poll = 10 * time.Second
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching policy sources: %w", err)
	}
	defer w.Close()
	dirs, last := l.scan()
	for _, dir := range dirs {
		if err := w.Add(dir); err != nil {
			return fmt.Errorf("watching %s: %w", dir, err)
		}
	}
	fswatch.Loop(ctx, w, fswatch.Config{
		Debounce: opts.Debounce,
		Poll:     opts.Poll,
		Scan:     l.scan,
		Event: func(w *fsnotify.Watcher, ev fsnotify.Event) bool {
			if ev.Has(fsnotify.Create) && l.src.Dir != "" {
				// A new directory under the policy directory is watched too.
				if fi, err := os.Stat(ev.Name); err == nil && fi.IsDir() {
					_ = addTree(w, ev.Name)
				}
			}
			return l.relevant(ev.Name)
		},
		Reload: func() { l.Reload(ctx) },
	}, last)
	return nil
}

func addTree(w *fsnotify.Watcher, root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			return w.Add(path)
		}
		return nil
	})
}

// relevant says whether an event on name can change the policy.
func (l *Live) relevant(name string) bool {
	for _, f := range l.src.DataFiles {
		if filepath.Clean(f) == filepath.Clean(name) {
			return true
		}
	}
	if l.src.Dir == "" {
		return false
	}
	rel, err := filepath.Rel(l.src.Dir, name)
	if err != nil || strings.HasPrefix(rel, "..") {
		return false
	}
	base := filepath.Base(name)
	if strings.HasPrefix(base, ".") {
		return false
	}
	// A name without an extension may be a directory that came or went.
	return kindOf(base) != otherFile || filepath.Ext(base) == ""
}

// scan walks the sources once. It returns the directories whose events
// matter (the policy tree, skipping dot directories as the loader does,
// and the directories of the data files) and a fingerprint: a hash of the
// name, size and modification time of every source file.
func (l *Live) scan() (dirs []string, fingerprint string) {
	h := sha256.New()
	stat := func(path string) {
		if fi, err := os.Stat(path); err == nil {
			fmt.Fprintf(h, "%s %d %d\n", path, fi.Size(), fi.ModTime().UnixNano())
		} else {
			fmt.Fprintf(h, "%s missing\n", path)
		}
	}
	if l.src.Dir != "" {
		err := filepath.WalkDir(l.src.Dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if strings.HasPrefix(d.Name(), ".") && path != l.src.Dir {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			switch {
			case d.IsDir():
				dirs = append(dirs, path)
			case l.relevant(path):
				stat(path)
			}
			return nil
		})
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fmt.Fprintf(h, "%s missing\n", l.src.Dir)
		case err != nil:
			fmt.Fprintf(h, "walk error %v\n", err)
		}
	}
	for _, f := range l.src.DataFiles {
		dirs = append(dirs, filepath.Dir(f))
		stat(f)
	}
	return dirs, hex.EncodeToString(h.Sum(nil))
}
