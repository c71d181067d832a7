// Package fswatch is the reload loop that the policy and persona watchers
// share: file events and a fingerprint poll, debounced into reloads.
package fswatch

import (
	"context"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Config says what one watcher watches and how it reloads.
type Config struct {
	// Debounce is how long the sources must be quiet before a reload.
	Debounce time.Duration
	// Poll is the interval of a fingerprint check; 0 or less turns it off.
	Poll time.Duration
	// Scan walks the sources once: the directories to watch and a
	// fingerprint of everything a reload reads.
	Scan func() (dirs []string, fingerprint string)
	// Event handles one file event. It may add watches (a new directory)
	// and says whether the event can change what a reload reads.
	Event func(w *fsnotify.Watcher, ev fsnotify.Event) bool
	// Reload rebuilds from the sources. It runs on the loop's goroutine.
	Reload func()
}

// Loop runs until ctx ends or w closes, then returns. fingerprint is what
// Scan said when the caller added the first watches.
func Loop(ctx context.Context, w *fsnotify.Watcher, cfg Config, fingerprint string) {
	var pollC <-chan time.Time
	if cfg.Poll > 0 {
		t := time.NewTicker(cfg.Poll)
		defer t.Stop()
		pollC = t.C
	}
	// polled is the last fingerprint a poll saw change.
	polled := fingerprint
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if cfg.Event(w, ev) {
				debounce.Reset(cfg.Debounce)
			}
		case _, ok := <-w.Errors:
			if !ok {
				return
			}
			// An overflow or a broken watch: reread the sources rather
			// than guess what was missed.
			debounce.Reset(cfg.Debounce)
		case <-pollC:
			// A change restarts the debounce once, when a poll first
			// sees it: restarting on every poll that sees the same
			// change would hold the reload off for as long as polls come
			// more often than the debounce.
			if _, fp := cfg.Scan(); fp != fingerprint && fp != polled {
				debounce.Reset(cfg.Debounce)
				polled = fp
			}
		case <-debounce.C:
			// Directories may have come or gone with the change.
			var dirs []string
			dirs, fingerprint = cfg.Scan()
			polled = fingerprint
			for _, dir := range dirs {
				_ = w.Add(dir)
			}
			cfg.Reload()
		}
	}
}
