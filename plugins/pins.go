package plugins

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"text/tabwriter"
)

// Where a plugin is configured.
const (
	sourceBundled = "bundled"
	sourceConfig  = "config"
	sourceDir     = "dir"
)

// pluginRow is one plugin as list and verify report it.
type pluginRow struct {
	Name   string    `json:"name"`
	Source string    `json:"source"`
	Path   string    `json:"path"`
	Status PinStatus `json:"status"`
	// SHA256 is the pinned digest; empty when unpinned.
	SHA256 string `json:"sha256,omitempty"`
	// Actual is the file's digest when it differs from the pin.
	Actual string `json:"sha256_actual,omitempty"`
}

// configRows checks the config file's plugins against their pins.
func configRows(specs []Spec) ([]pluginRow, error) {
	var rows []pluginRow
	for _, s := range specs {
		row := pluginRow{Name: s.Name, Source: sourceConfig, Path: s.Path, SHA256: s.SHA256, Status: StatusOK}
		sum, err := FileSHA256(s.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			row.Status = StatusMissing
		case err != nil:
			return nil, fmt.Errorf("hashing plugin %q: %w", s.Name, err)
		case sum != s.SHA256:
			row.Status, row.Actual = StatusModified, sum
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// dirRows checks a plugin directory against its lock file.
func dirRows(dir string) ([]pluginRow, error) {
	checks, err := VerifyDir(dir)
	if err != nil {
		return nil, err
	}
	rows := make([]pluginRow, 0, len(checks))
	for _, c := range checks {
		row := pluginRow{Name: c.Name, Source: sourceDir, Path: c.Path, Status: c.Status, SHA256: c.Pinned}
		if c.Status != StatusOK {
			row.Actual = c.Actual
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	if sum == "" {
		return "-"
	}
	return sum
}

// List prints every plugin gated serve would run: the bundled reviewer
// named bundled, the config file's specs and the executables of dir, each
// with whether its file matches its pin, as text or (format "json") JSON.
// It launches nothing.
func List(w io.Writer, bundled string, specs []Spec, dir, format string) error {
	b, err := Bundled(bundled)
	if err != nil {
		return err
	}
	rows := []pluginRow{{Name: b.Name, Source: sourceBundled, Path: b.Path, Status: StatusOK, SHA256: b.SHA256}}
	more, err := configRows(specs)
	if err != nil {
		return err
	}
	rows = append(rows, more...)
	var note string
	if dir != "" {
		more, err := dirRows(dir)
		if errors.Is(err, ErrNoLock) {
			// Show what is there: all of it unpinned.
			found, serr := ScanDir(dir)
			if serr != nil {
				return serr
			}
			for _, p := range found {
				more = append(more, pluginRow{Name: p.Name, Source: sourceDir, Path: p.Path, Status: StatusUnpinned})
			}
			note = err.Error()
		} else if err != nil {
			return err
		}
		rows = append(rows, more...)
	}
	if format == "json" {
		if rows == nil {
			rows = []pluginRow{}
		}
		out, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(out))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSOURCE\tSTATUS\tSHA256\tPATH")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Source, r.Status, short(r.SHA256), r.Path)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if note != "" {
		_, err = fmt.Fprintf(w, "note: %s\n", note)
	}
	return err
}

// Pin pins every executable in dir in its lock file and prints what
// changed against the previous pins.
func Pin(w io.Writer, dir string) error {
	// The previous pins, to say what changed. A lock that does not read is
	// being replaced, which is what lock is for.
	prev, _ := ReadLock(dir)
	lock, err := WriteLock(dir)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	names := make([]string, 0, len(lock.Plugins))
	for n := range lock.Plugins {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		e := lock.Plugins[n]
		change := "new"
		if old, ok := prev.Plugins[n]; ok {
			change = "unchanged"
			if old.SHA256 != e.SHA256 {
				change = "changed, was " + short(old.SHA256)
			}
		}
		fmt.Fprintf(tw, "pinned\t%s\t%s\t%s\n", n, e.SHA256, change)
	}
	var dropped []string
	for n := range prev.Plugins {
		if _, ok := lock.Plugins[n]; !ok {
			dropped = append(dropped, n)
		}
	}
	slices.Sort(dropped)
	for _, n := range dropped {
		fmt.Fprintf(tw, "dropped\t%s\t%s\tno longer in the directory\n", n, prev.Plugins[n].SHA256)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "wrote %s: plugins pinned: %d\n", filepath.Join(dir, LockFileName), len(lock.Plugins))
	return err
}

// Verify checks the config file's specs against their digests and dir
// against its lock file, printing one line a plugin. It returns an error
// when any plugin does not match its pin or dir has no lock file.
func Verify(w io.Writer, specs []Spec, dir string) error {
	rows, err := configRows(specs)
	if err != nil {
		return err
	}
	var dirErr error
	if dir != "" {
		more, err := dirRows(dir)
		if err != nil {
			dirErr = err // report the config's plugins first
		}
		rows = append(rows, more...)
	}
	if len(rows) == 0 && dirErr == nil {
		_, err := fmt.Fprintln(w, "no plugins to verify: give --config with a plugins: list, or a plugin directory")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	bad := 0
	for _, r := range rows {
		detail := ""
		switch r.Status {
		case StatusOK:
		case StatusModified:
			bad++
			detail = fmt.Sprintf("pinned %s, file has %s", r.SHA256, r.Actual)
		case StatusMissing:
			bad++
			detail = "pinned " + r.SHA256 + ", no such executable"
		case StatusUnpinned:
			bad++
			detail = "file has " + r.Actual + ", not in " + LockFileName
		}
		if detail != "" {
			detail = "\t" + detail
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s%s\n", r.Status, r.Name, r.Source, r.Path, detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case dirErr != nil:
		return dirErr
	case bad > 0:
		return fmt.Errorf("%d of %d plugins do not match their pins", bad, len(rows))
	}
	return nil
}
