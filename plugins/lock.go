package plugins

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/gated/gated/internal/digest"
	"github.com/gated/gated/internal/strictjson"
)

// LockFileName is the lock file of a plugin directory. It pins every
// executable in the directory to a SHA-256, so that dropping a binary
// into the directory is not enough to have gated run it.
const LockFileName = "gated-plugins.lock"

// lockVersion is the lock file format this package reads and writes.
const lockVersion = 1

// Errors of plugin directories and their lock files. Each says how to fix
// the problem.
var (
	// ErrNoLock means a plugin directory has no lock file. Check the
	// executables in it, then pin them with `gated plugins lock DIR`.
	ErrNoLock = errors.New("plugin directory has no " + LockFileName)
	// ErrUnpinned means a plugin directory holds an executable its lock
	// file does not pin. gated refuses to run a directory with unreviewed
	// binaries in it: check the new executable, then re-run
	// `gated plugins lock DIR`, or remove it.
	ErrUnpinned = errors.New("executable is not pinned in " + LockFileName)
	// ErrBadName means a plugin name does not match [a-z0-9_-]{1,64}.
	// Rename the executable (or the configured plugin).
	ErrBadName = errors.New("plugin name must be 1 to 64 of a-z, 0-9, _ and -")
)

var nameRE = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// CheckName returns an error wrapping ErrBadName unless name is a valid
// plugin name: 1 to 64 lower-case letters, digits, '_' or '-'. Personas
// refer to plugins by this name.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%q: %w", name, ErrBadName)
	}
	return nil
}

// DirPlugin is an executable found in a plugin directory.
type DirPlugin struct {
	// Name is the file name, which is also the plugin's name.
	Name string
	// Path is the executable's path: the directory joined with Name.
	Path string
}

// ScanDir lists the plugins in dir, sorted by name. A plugin is a regular
// file (or a symbolic link to one) with an execute bit set. Dot files,
// the lock file, directories and files nobody may execute are skipped, so
// a README can sit next to the plugins. An executable whose name is not a
// valid plugin name is an error wrapping ErrBadName.
func ScanDir(dir string) ([]DirPlugin, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading plugin directory: %w", err)
	}
	var out []DirPlugin
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || name == LockFileName {
			continue
		}
		path := filepath.Join(dir, name)
		fi, err := os.Stat(path) // follows a symbolic link
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // a dangling link is not a plugin
			}
			return nil, fmt.Errorf("reading plugin directory: %w", err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		if err := CheckName(name); err != nil {
			return nil, fmt.Errorf("executable %s in plugin directory: %w", path, err)
		}
		out = append(out, DirPlugin{Name: name, Path: path})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Lock is the content of a plugin directory's lock file.
type Lock struct {
	// Version is the format, lockVersion.
	Version int `json:"version"`
	// Plugins maps a plugin name to its pin.
	Plugins map[string]LockEntry `json:"plugins"`
}

// LockEntry pins one plugin.
type LockEntry struct {
	// Path is the executable's file name, relative to the directory.
	Path string `json:"path"`
	// SHA256 is the hex digest the executable must have.
	SHA256 string `json:"sha256"`
}

// WriteLock hashes every executable in dir (see ScanDir) and replaces the
// lock file with pins for exactly those. The file is written to a
// temporary name first and renamed, so a reader never sees half of it.
// It returns what it wrote.
func WriteLock(dir string) (Lock, error) {
	found, err := ScanDir(dir)
	if err != nil {
		return Lock{}, err
	}
	lock := Lock{Version: lockVersion, Plugins: make(map[string]LockEntry, len(found))}
	for _, p := range found {
		sum, err := FileSHA256(p.Path)
		if err != nil {
			return Lock{}, fmt.Errorf("hashing plugin %q: %w", p.Name, err)
		}
		lock.Plugins[p.Name] = LockEntry{Path: p.Name, SHA256: sum}
	}
	data, err := encodeLock(lock)
	if err != nil {
		return Lock{}, err
	}
	tmp, err := os.CreateTemp(dir, "."+LockFileName+".*")
	if err != nil {
		return Lock{}, fmt.Errorf("writing %s: %w", LockFileName, err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return Lock{}, fmt.Errorf("writing %s: %w", LockFileName, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return Lock{}, fmt.Errorf("writing %s: %w", LockFileName, err)
	}
	if err := tmp.Close(); err != nil {
		return Lock{}, fmt.Errorf("writing %s: %w", LockFileName, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, LockFileName)); err != nil {
		return Lock{}, fmt.Errorf("writing %s: %w", LockFileName, err)
	}
	return lock, nil
}

// encodeLock renders a lock deterministically: keys sorted, two-space
// indent, trailing newline, so that re-locking an unchanged directory
// leaves the file byte for byte the same and diffs stay small.
func encodeLock(l Lock) ([]byte, error) {
	if l.Plugins == nil {
		l.Plugins = map[string]LockEntry{}
	}
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", LockFileName, err)
	}
	return append(data, '\n'), nil
}

// ReadLock reads and checks dir's lock file. A missing file is an error
// wrapping ErrNoLock; malformed JSON is reported with its line and
// column; an unknown version, an unknown field, a bad name, a path that
// leaves the directory or a digest that is not 64 hex digits is an error
// naming the entry.
func ReadLock(dir string) (Lock, error) {
	path := filepath.Join(dir, LockFileName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(dir); serr != nil {
			return Lock{}, fmt.Errorf("reading plugin directory: %w", serr)
		}
		return Lock{}, fmt.Errorf("%s: %w: check its executables, then run `gated plugins lock %s`", dir, ErrNoLock, dir)
	}
	if err != nil {
		return Lock{}, fmt.Errorf("reading %s: %w", path, err)
	}
	return decodeLock(path, data)
}

func decodeLock(path string, data []byte) (Lock, error) {
	var l Lock
	if err := strictjson.Decode(data, &l); err != nil {
		if errors.Is(err, strictjson.ErrTrailingData) {
			return Lock{}, fmt.Errorf("%s: unexpected data after the lock document", path)
		}
		if line, col, ok := strictjson.ErrorPosition(data, err); ok {
			return Lock{}, fmt.Errorf("%s:%d:%d: %v", path, line, col, err)
		}
		return Lock{}, fmt.Errorf("%s: %w", path, err)
	}
	if l.Version != lockVersion {
		return Lock{}, fmt.Errorf("%s: version %d is not supported (want %d); re-create it with `gated plugins lock`", path, l.Version, lockVersion)
	}
	if l.Plugins == nil {
		l.Plugins = map[string]LockEntry{}
	}
	for name, e := range l.Plugins {
		if err := CheckName(name); err != nil {
			return Lock{}, fmt.Errorf("%s: plugin %w", path, err)
		}
		if e.Path != name {
			return Lock{}, fmt.Errorf("%s: plugin %q: path %q must be the plugin's own file name %q", path, name, e.Path, name)
		}
		if !digest.ValidSHA256(e.SHA256) {
			return Lock{}, fmt.Errorf("%s: plugin %q: sha256 %q must be 64 lower-case hex digits", path, name, e.SHA256)
		}
	}
	return l, nil
}

// PinStatus is how an executable compares with its pin.
type PinStatus string

// The statuses of a PinCheck.
const (
	// StatusOK means the executable has its pinned digest.
	StatusOK PinStatus = "ok"
	// StatusModified means the executable's digest differs from its pin.
	StatusModified PinStatus = "modified"
	// StatusUnpinned means the directory holds an executable the lock
	// does not mention.
	StatusUnpinned PinStatus = "unpinned"
	// StatusMissing means the lock pins a plugin whose executable is gone.
	StatusMissing PinStatus = "missing"
)

// PinCheck is the result of comparing one plugin with its pin.
type PinCheck struct {
	// Name is the plugin's name.
	Name string `json:"name"`
	// Path is the executable's path.
	Path string `json:"path"`
	// Status says whether the executable matches its pin.
	Status PinStatus `json:"status"`
	// Pinned is the digest the lock records; empty when unpinned.
	Pinned string `json:"sha256,omitempty"`
	// Actual is the executable's digest; empty when missing.
	Actual string `json:"sha256_actual,omitempty"`
}

// OK reports whether the plugin matches its pin.
func (c PinCheck) OK() bool { return c.Status == StatusOK }

// VerifyDir compares every executable in dir with dir's lock file and
// returns one PinCheck per plugin in either, sorted by name. Only problems
// reading the directory or the lock (including ErrNoLock) are errors; a
// mismatch is a PinCheck whose Status is not StatusOK.
func VerifyDir(dir string) ([]PinCheck, error) {
	lock, err := ReadLock(dir)
	if err != nil {
		return nil, err
	}
	found, err := ScanDir(dir)
	if err != nil {
		return nil, err
	}
	var checks []PinCheck
	seen := make(map[string]bool, len(found))
	for _, p := range found {
		seen[p.Name] = true
		sum, err := FileSHA256(p.Path)
		if err != nil {
			return nil, fmt.Errorf("hashing plugin %q: %w", p.Name, err)
		}
		c := PinCheck{Name: p.Name, Path: p.Path, Actual: sum, Status: StatusUnpinned}
		if e, ok := lock.Plugins[p.Name]; ok {
			c.Pinned = e.SHA256
			c.Status = StatusModified
			if e.SHA256 == sum {
				c.Status = StatusOK
			}
		}
		checks = append(checks, c)
	}
	for name, e := range lock.Plugins {
		if !seen[name] {
			checks = append(checks, PinCheck{Name: name, Path: filepath.Join(dir, e.Path), Status: StatusMissing, Pinned: e.SHA256})
		}
	}
	sort.Slice(checks, func(i, j int) bool { return checks[i].Name < checks[j].Name })
	return checks, nil
}

// DirSpecs returns a Spec for every plugin dir's lock file pins, sorted by
// name, with SHA256 taken from the lock rather than from the file: a
// binary changed after locking is then refused when the host launches it
// (ErrChecksum). An executable the lock does not pin is an error wrapping
// ErrUnpinned, and a pinned executable that is gone is an error too, so
// that gated does not start with a directory nobody reviewed. Path is
// absolute.
func DirSpecs(dir string) ([]Spec, error) {
	lock, err := ReadLock(dir)
	if err != nil {
		return nil, err
	}
	found, err := ScanDir(dir)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolving plugin directory: %w", err)
	}
	var unpinned []string
	present := make(map[string]bool, len(found))
	for _, p := range found {
		present[p.Name] = true
		if _, ok := lock.Plugins[p.Name]; !ok {
			unpinned = append(unpinned, p.Name)
		}
	}
	if len(unpinned) > 0 {
		return nil, fmt.Errorf("plugin directory %s: %s: %w; check it, then run `gated plugins lock %s`, or remove it",
			dir, strings.Join(unpinned, ", "), ErrUnpinned, dir)
	}
	names := make([]string, 0, len(lock.Plugins))
	for name := range lock.Plugins {
		names = append(names, name)
	}
	sort.Strings(names)
	specs := make([]Spec, 0, len(names))
	for _, name := range names {
		e := lock.Plugins[name]
		if !present[name] {
			return nil, fmt.Errorf("plugin directory %s: plugin %q is pinned in %s but %s is not an executable there; restore it or re-run `gated plugins lock %s`",
				dir, name, LockFileName, e.Path, dir)
		}
		specs = append(specs, Spec{Name: name, Path: filepath.Join(abs, e.Path), SHA256: e.SHA256})
	}
	return specs, nil
}
