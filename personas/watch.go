package personas

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/gated/gated/internal/fswatch"
)

// defaultDebounce is how long the directory must be quiet before Watch
// reloads, unless WatchOptions.Debounce says otherwise.
const defaultDebounce = 250 * time.Millisecond

// defaultPoll is the interval of Watch's fingerprint check, unless
// WatchOptions.Poll says otherwise.
const defaultPoll = 10 * time.Second

// WatchOptions tune Watch. The zero value is ready to use.
type WatchOptions struct {
	// Debounce is how long the directory must be quiet before a reload:
	// editors and git write a file in several steps. Default
	// 250ms.
	Debounce time.Duration
	// Poll is the interval of a fingerprint check (names, sizes and
	// modification times of the persona files) that catches what file
	// events miss: a directory swapped by a symbolic link, as Kubernetes
	// does with mounted volumes, or a network file system. Default
	// 10s; negative turns it off.
	Poll time.Duration
	// OnReload, when not nil, hears every reload Watch makes, from the
	// Watch goroutine. It must not block for long: reloads wait for it.
	OnReload func(Reload)
}

// Watch reloads the registry whenever its directory changes, until ctx
// ends; then it returns nil. It watches the directory tree (directories
// created later included) and the directory's parent, so that a root
// created or replaced after the start is noticed, and it also compares a
// fingerprint of the files every opts.Poll. Changes are debounced. A
// reload that fails keeps the registry as it was (see Reload).
//
// It returns an error only when watching cannot start: ErrNoRoot for a
// registry without a directory, or an error from the operating system's
// file notification.
func (r *Registry) Watch(ctx context.Context, opts WatchOptions) error {
	if r.root == "" {
		return ErrNoRoot
	}
	if opts.Debounce <= 0 {
		opts.Debounce = defaultDebounce
	}
	if opts.Poll == 0 {
		opts.Poll = defaultPoll
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching persona directory %s: %w", r.root, err)
	}
	defer w.Close()
	dirs, last := r.scan()
	for _, dir := range dirs {
		// A directory may vanish between the scan and the watch; the
		// parent's events and the poll cover that.
		_ = w.Add(dir)
	}
	fswatch.Loop(ctx, w, fswatch.Config{
		Debounce: opts.Debounce,
		Poll:     opts.Poll,
		Scan:     r.scan,
		Event: func(w *fsnotify.Watcher, ev fsnotify.Event) bool {
			if !r.relevant(ev.Name) {
				return false
			}
			if ev.Has(fsnotify.Create) {
				// A new directory is watched at once, so that files
				// written into it right after are not missed; the
				// reload reads whatever it already holds.
				if fi, err := os.Stat(ev.Name); err == nil && fi.IsDir() {
					_ = addTree(w, ev.Name)
				}
			}
			return true
		},
		Reload: func() {
			rep := r.Reload()
			if opts.OnReload != nil {
				opts.OnReload(rep)
			}
		},
	}, last)
	return nil
}

// addTree watches dir and every directory below it that the loader reads.
func addTree(w *fsnotify.Watcher, dir string) error {
	return walkTree(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			return w.Add(path)
		}
		return nil
	})
}

// relevant says whether an event on name can change what the registry
// loads: the root itself, or an entry under it that the loader does not
// skip. Directories and removals count, whatever their name: a directory
// may hold persona files, and a removed entry may have been one.
func (r *Registry) relevant(name string) bool {
	root := filepath.Clean(r.root)
	name = filepath.Clean(name)
	if name == root {
		return true
	}
	rel, err := filepath.Rel(root, name)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return false
	}
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		if strings.HasPrefix(part, ".") {
			return false
		}
	}
	if strings.HasSuffix(name, ".md") {
		return true
	}
	fi, err := os.Stat(name)
	return err != nil || fi.IsDir()
}

// scan walks the directory once. It returns the directories whose events
// matter (the tree, skipping dot directories as the loader does, and the
// root's parent) and a fingerprint: a hash of the directories and of the
// name, size and modification time of every persona file.
func (r *Registry) scan() (dirs []string, fingerprint string) {
	h := sha256.New()
	if parent := filepath.Dir(filepath.Clean(r.root)); parent != "" {
		if fi, err := os.Stat(parent); err == nil && fi.IsDir() {
			dirs = append(dirs, parent)
		}
	}
	err := walkTree(r.root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			fmt.Fprintf(h, "%s error %v\n", path, err)
		case d.IsDir():
			dirs = append(dirs, path)
			fmt.Fprintf(h, "dir %s\n", path)
		case strings.HasSuffix(d.Name(), ".md"):
			// Stat follows a symbolic link to the file it names.
			if fi, err := os.Stat(path); err == nil {
				fmt.Fprintf(h, "%s %d %d\n", path, fi.Size(), fi.ModTime().UnixNano())
			} else {
				fmt.Fprintf(h, "%s error %v\n", path, err)
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintf(h, "walk error %v\n", err)
	}
	return dirs, hex.EncodeToString(h.Sum(nil))
}
