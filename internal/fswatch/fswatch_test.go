package fswatch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// TestLoopReloadsWhenThePollIsShorterThanTheDebounce changes a watched
// file once, with a fingerprint poll more frequent than the debounce: the
// change must be reloaded, once, not held off by every poll that sees it.
func TestLoopReloadsWhenThePollIsShorterThanTheDebounce(t *testing.T) {
	cases := []struct {
		note   string
		events bool // whether file events count, or only the poll sees the change
	}{
		{note: "events and poll", events: true},
		{note: "poll only", events: false},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "policy.rego")
			if err := os.WriteFile(file, []byte("one"), 0o644); err != nil {
				t.Fatal(err)
			}
			scan := func() ([]string, string) {
				b, _ := os.ReadFile(file)
				return []string{dir}, string(b)
			}
			w, err := fsnotify.NewWatcher()
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if err := w.Add(dir); err != nil {
				t.Fatal(err)
			}
			_, fp := scan()
			reloads := make(chan string, 16)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() {
				defer close(done)
				Loop(ctx, w, Config{
					Debounce: 100 * time.Millisecond, Poll: 5 * time.Millisecond, Scan: scan,
					Event:  func(*fsnotify.Watcher, fsnotify.Event) bool { return tc.events },
					Reload: func() { _, fp := scan(); reloads <- fp },
				}, fp)
			}()
			defer func() { cancel(); <-done }()
			if err := os.WriteFile(file, []byte("two"), 0o644); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-reloads:
				if got != "two" {
					t.Errorf("reloaded %q, want two", got)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no reload 10s after the change")
			}
			// One change is one reload: the polls after it see nothing new.
			select {
			case got := <-reloads:
				t.Errorf("a second reload (%q) for one change", got)
			case <-time.After(300 * time.Millisecond):
			}
		})
	}
}
