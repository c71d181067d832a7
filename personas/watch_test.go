package personas

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// watcher runs Watch on r until the test ends and hands out its reports.
type watcher struct {
	reloads chan Reload
	count   atomic.Int32
}

func startWatch(t *testing.T, r *Registry, opts WatchOptions) *watcher {
	t.Helper()
	w := &watcher{reloads: make(chan Reload, 256)}
	opts.OnReload = func(rep Reload) {
		w.count.Add(1)
		w.reloads <- rep
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Watch(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Watch: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Watch did not return after its context ended")
		}
	})
	// Let the watcher register its directories before the first change.
	time.Sleep(100 * time.Millisecond)
	return w
}

// await waits for a reload after which cond holds on the registry.
func (w *watcher) await(t *testing.T, r *Registry, what string, cond func(Reload) bool) Reload {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case rep := <-w.reloads:
			if cond(rep) {
				return rep
			}
		case <-deadline:
			t.Fatalf("no reload: %s; personas now %q", what, r.Names())
			return Reload{}
		}
	}
}

func prompt(r *Registry, name string) string {
	p, ok := r.ByName(name)
	if !ok {
		return ""
	}
	return p.Prompt
}

// TestWatchFollowsTheDirectory drives a watched directory through the
// changes an operator makes: a new file, an edit, a broken file, a file in
// a new directory, and a deletion. File events alone must do it: the poll
// is off.
func TestWatchFollowsTheDirectory(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"base.md": persona("Base.", "name: base")})
	r, _, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, r, WatchOptions{Debounce: 20 * time.Millisecond, Poll: -1})

	// A new file.
	writeTree(t, root, map[string]string{"added.md": persona("Added.", "name: added")})
	rep := w.await(t, r, "a new file", func(Reload) bool { return prompt(r, "added") == "Added." })
	if !rep.OK || !rep.Changed || !slices.Contains(rep.Files, filepath.Join(root, "added.md")) {
		t.Errorf("report %+v, want OK, changed, with added.md among the files", rep)
	}

	// An edited file.
	writeTree(t, root, map[string]string{"added.md": persona("Added, then edited.", "name: added")})
	w.await(t, r, "an edit", func(Reload) bool { return prompt(r, "added") == "Added, then edited." })

	// A broken file: reported, skipped, and the others stay.
	broken := filepath.Join(root, "broken.md")
	writeTree(t, root, map[string]string{"broken.md": "---\nname: broken\nmax_turns: 500\n---\nBody.\n"})
	rep = w.await(t, r, "a broken file", func(rep Reload) bool { return len(rep.Errors) > 0 })
	if !rep.OK || rep.Errors[0].File != broken || rep.Errors[0].Line != 3 {
		t.Errorf("report %+v, want OK with an error at %s:3", rep, broken)
	}
	if _, ok := r.ByName("broken"); ok {
		t.Error("the broken persona is served")
	}
	for _, name := range []string{"base", "added", "reviewer", "dba"} {
		if _, ok := r.ByName(name); !ok {
			t.Errorf("%s went missing when another file broke", name)
		}
	}

	// A file in a directory created after the watch started.
	writeTree(t, root, map[string]string{"team/db/nested.md": persona("Nested.", "name: nested")})
	w.await(t, r, "a file in a new directory", func(Reload) bool { return prompt(r, "nested") == "Nested." })
	// And a file added to that directory later, which needs its own watch.
	writeTree(t, root, map[string]string{"team/db/later.md": persona("Later.", "name: later")})
	w.await(t, r, "a later file in the new directory", func(Reload) bool { return prompt(r, "later") == "Later." })

	// A deleted file.
	if err := os.Remove(filepath.Join(root, "added.md")); err != nil {
		t.Fatal(err)
	}
	w.await(t, r, "a deletion", func(Reload) bool { _, ok := r.ByName("added"); return !ok })

	// A deleted directory.
	if err := os.RemoveAll(filepath.Join(root, "team")); err != nil {
		t.Fatal(err)
	}
	w.await(t, r, "a removed directory", func(Reload) bool { _, ok := r.ByName("nested"); return !ok })
}

// TestWatchIgnoresHiddenAndOtherFiles checks that editor droppings and
// files that are not personas do not cause reloads.
func TestWatchIgnoresHiddenAndOtherFiles(t *testing.T) {
	root := t.TempDir()
	r, _, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, r, WatchOptions{Debounce: 20 * time.Millisecond, Poll: -1})
	writeTree(t, root, map[string]string{
		".persona.md.swp": "swap",
		".hidden/x.md":    persona("Hidden.", "name: hidden"),
		"notes.txt":       "text",
	})
	// Then one real change, which must be the first reload.
	time.Sleep(200 * time.Millisecond)
	writeTree(t, root, map[string]string{"real.md": persona("Real.", "name: real")})
	rep := w.await(t, r, "a persona file", func(Reload) bool { return true })
	if !slices.Contains(rep.Personas, "real") {
		t.Errorf("first reload %+v came before the persona file was written", rep)
	}
	if _, ok := r.ByName("hidden"); ok {
		t.Error("a persona under a dot directory is served")
	}
}

// TestWatchDebounces checks that a burst of writes costs a few reloads,
// not one per write.
func TestWatchDebounces(t *testing.T) {
	root := t.TempDir()
	r, _, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, r, WatchOptions{Debounce: 300 * time.Millisecond, Poll: -1})
	const n = 30
	for i := range n {
		writeTree(t, root, map[string]string{fmt.Sprintf("p%02d.md", i): persona("Burst.", fmt.Sprintf("name: p%02d", i))})
	}
	w.await(t, r, "the whole burst", func(Reload) bool { return r.Snapshot().Len() == n+len(builtinNames) })
	time.Sleep(500 * time.Millisecond)
	if got := w.count.Load(); got > 3 {
		t.Errorf("%d reloads for a burst of %d writes, want at most 3", got, n)
	}
}

// TestWatchRootCreatedLater starts on a directory that does not exist yet:
// the built-ins serve until it appears, and its parent's events bring it
// in.
func TestWatchRootCreatedLater(t *testing.T) {
	root := filepath.Join(t.TempDir(), "personas")
	r, rep, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || r.Snapshot().Len() != len(builtinNames) {
		t.Fatalf("report %+v, names %q: want the built-ins", rep, r.Names())
	}
	w := startWatch(t, r, WatchOptions{Debounce: 20 * time.Millisecond, Poll: -1})
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	writeTree(t, root, map[string]string{"late.md": persona("Late.", "name: late")})
	w.await(t, r, "a file in a root created later", func(Reload) bool { return prompt(r, "late") == "Late." })
}

// TestWatchPollCatchesMissedEvents uses a root whose parent does not exist
// at the start, so no file event can report it: only the poll can.
func TestWatchPollCatchesMissedEvents(t *testing.T) {
	root := filepath.Join(t.TempDir(), "a", "b", "personas")
	r, _, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, r, WatchOptions{Debounce: 10 * time.Millisecond, Poll: 50 * time.Millisecond})
	writeTree(t, root, map[string]string{"polled.md": persona("Polled.", "name: polled")})
	w.await(t, r, "a change only the poll sees", func(Reload) bool { return prompt(r, "polled") == "Polled." })
}

// TestWatchFailedReloadKeepsTheRegistry replaces the watched directory by
// a file: the reload fails, reports why, and the personas stay.
func TestWatchFailedReloadKeepsTheRegistry(t *testing.T) {
	root := filepath.Join(t.TempDir(), "personas")
	writeTree(t, root, map[string]string{"kept.md": persona("Kept.", "name: kept")})
	r, _, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, r, WatchOptions{Debounce: 50 * time.Millisecond, Poll: -1})
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := w.await(t, r, "a failed reload", func(rep Reload) bool { return !rep.OK })
	if !strings.Contains(rep.Error, "not a directory") || !slices.Contains(rep.Personas, "kept") {
		t.Errorf("report %+v, want the failure and the personas kept", rep)
	}
	if prompt(r, "kept") != "Kept." {
		t.Error("a failed reload dropped a persona")
	}
}

func TestWatchNeedsARoot(t *testing.T) {
	r, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Watch(t.Context(), WatchOptions{}); !errors.Is(err, ErrNoRoot) {
		t.Errorf("err = %v, want ErrNoRoot", err)
	}
}

func TestRelevant(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"dir/x.md": "x", "notes.txt": "x"})
	r := &Registry{root: root}
	tests := []struct {
		note string
		name string
		want bool
	}{
		{"the root itself", root, true},
		{"a persona file", filepath.Join(root, "p.md"), true},
		{"a nested persona file", filepath.Join(root, "dir", "x.md"), true},
		{"a directory", filepath.Join(root, "dir"), true},
		{"something removed, maybe a directory", filepath.Join(root, "gone"), true},
		{"a text file", filepath.Join(root, "notes.txt"), false},
		{"a hidden file", filepath.Join(root, ".x.md"), false},
		{"under a hidden directory", filepath.Join(root, ".git", "x.md"), false},
		{"a sibling of the root", filepath.Join(filepath.Dir(root), "other.md"), false},
		{"a sibling whose name starts like the root", root + "-old", false},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			if got := r.relevant(tc.name); got != tc.want {
				t.Errorf("relevant(%s) = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}
