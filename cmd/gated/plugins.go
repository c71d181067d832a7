package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gated/gated/plugins"
	"github.com/gated/gated/plugins/sop"
)

// Where a plugin is configured.
const (
	sourceBundled = "bundled"
	sourceConfig  = "config"
	sourceDir     = "dir"
)

// pluginsCmd is `gated plugins`: inspect and pin reviewer plugins without
// running them.
func pluginsCmd() *cobra.Command {
	var dir string
	c := &cobra.Command{
		Use:   "plugins",
		Short: "List, pin and verify reviewer plugins",
		Long: `plugins inspects the reviewer plugins gated would run, without launching
any. Plugins come from three places:

  bundled  the sop reviewer, compiled into gated
  config   the plugins: list of the --config file, each pinned by its sha256
  dir      executables in --plugins-dir, pinned by the directory's lock file

A plugin directory holds one executable per plugin, named after the plugin
(a-z, 0-9, _ and -, at most 64 characters); dot files, directories and
files nobody may execute are ignored. Its lock file, ` + plugins.LockFileName + `,
pins each executable's SHA-256:

  {"version": 1, "plugins": {"NAME": {"path": "NAME", "sha256": "HEX"}}}

gated serve refuses a directory holding an executable the lock does not
pin, and refuses to launch a plugin whose file no longer has its pinned
digest. After checking a new or updated plugin, re-pin with
"gated plugins lock DIR". "gated plugins test PATH" runs the conformance
checks on a plugin binary before you pin it.`,
	}
	c.PersistentFlags().StringVar(&dir, "plugins-dir", "", "directory of plugin executables pinned by "+plugins.LockFileName)
	_ = c.MarkPersistentFlagDirname("plugins-dir")
	c.AddCommand(pluginsListCmd(&dir), pluginsLockCmd(&dir), pluginsVerifyCmd(&dir), pluginsTestCmd())
	return c
}

// pluginRow is one plugin as list and verify report it.
type pluginRow struct {
	Name   string            `json:"name"`
	Source string            `json:"source"`
	Path   string            `json:"path"`
	Status plugins.PinStatus `json:"status"`
	// SHA256 is the pinned digest; empty when unpinned.
	SHA256 string `json:"sha256,omitempty"`
	// Actual is the file's digest when it differs from the pin.
	Actual string `json:"sha256_actual,omitempty"`
}

// configRows checks the config file's plugins against their pins.
func configRows(cfg *fileConfig) ([]pluginRow, error) {
	var rows []pluginRow
	for _, s := range cfg.plugins {
		row := pluginRow{Name: s.Name, Source: sourceConfig, Path: s.Path, SHA256: s.SHA256, Status: plugins.StatusOK}
		sum, err := plugins.FileSHA256(s.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			row.Status = plugins.StatusMissing
		case err != nil:
			return nil, fmt.Errorf("hashing plugin %q: %w", s.Name, err)
		case sum != s.SHA256:
			row.Status, row.Actual = plugins.StatusModified, sum
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// dirRows checks a plugin directory against its lock file.
func dirRows(dir string) ([]pluginRow, error) {
	checks, err := plugins.VerifyDir(dir)
	if err != nil {
		return nil, err
	}
	rows := make([]pluginRow, 0, len(checks))
	for _, c := range checks {
		row := pluginRow{Name: c.Name, Source: sourceDir, Path: c.Path, Status: c.Status, SHA256: c.Pinned}
		if c.Status != plugins.StatusOK {
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

// --- gated plugins list ---------------------------------------------------------

func pluginsListCmd(dir *string) *cobra.Command {
	var format string
	c := &cobra.Command{
		Use:   "list",
		Short: "List every configured plugin and whether its file matches its pin",
		Long: `list prints every plugin gated serve would run with the same --config and
--plugins-dir: name, source (bundled, config or dir), status (ok, modified,
missing, or unpinned for a directory executable the lock does not pin),
pinned sha256 and path. It launches nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			return runPluginsList(cmd.OutOrStdout(), configFrom(cmd.Context()), *dir, format)
		},
	}
	c.Flags().StringVar(&format, "format", "text", "text or json")
	return c
}

func runPluginsList(w io.Writer, cfg *fileConfig, dir, format string) error {
	bundled, err := plugins.Bundled(sop.Name)
	if err != nil {
		return err
	}
	rows := []pluginRow{{Name: bundled.Name, Source: sourceBundled, Path: bundled.Path, Status: plugins.StatusOK, SHA256: bundled.SHA256}}
	more, err := configRows(cfg)
	if err != nil {
		return err
	}
	rows = append(rows, more...)
	var note string
	if dir != "" {
		more, err := dirRows(dir)
		if errors.Is(err, plugins.ErrNoLock) {
			// Show what is there: all of it unpinned.
			found, serr := plugins.ScanDir(dir)
			if serr != nil {
				return serr
			}
			for _, p := range found {
				more = append(more, pluginRow{Name: p.Name, Source: sourceDir, Path: p.Path, Status: plugins.StatusUnpinned})
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
		return writeJSON(w, rows)
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

// --- gated plugins lock ---------------------------------------------------------

func pluginsLockCmd(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "lock [DIR]",
		Short: "Pin every executable in a plugin directory",
		Long: `lock hashes every executable in DIR (default --plugins-dir) and writes
DIR/` + plugins.LockFileName + ` pinning exactly those. Check new and updated
executables before you lock them: gated runs what the lock pins.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := pluginDirArg(*dir, args)
			if err != nil {
				return err
			}
			return runPluginsLock(cmd.OutOrStdout(), d)
		},
	}
}

// pluginDirArg is the optional DIR argument, else --plugins-dir.
func pluginDirArg(flag string, args []string) (string, error) {
	if len(args) > 0 {
		return args[0], nil
	}
	if flag == "" {
		return "", usageError("name the plugin directory: DIR or --plugins-dir")
	}
	return flag, nil
}

func runPluginsLock(w io.Writer, dir string) error {
	// The previous pins, to say what changed. A lock that does not read is
	// being replaced, which is what lock is for.
	prev, _ := plugins.ReadLock(dir)
	lock, err := plugins.WriteLock(dir)
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
	_, err = fmt.Fprintf(w, "wrote %s: plugins pinned: %d\n", filepath.Join(dir, plugins.LockFileName), len(lock.Plugins))
	return err
}

// --- gated plugins verify -------------------------------------------------------

func pluginsVerifyCmd(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "verify [DIR]",
		Short: "Check plugin files against their pins",
		Long: `verify checks every plugin of the --config file against its sha256, and
the plugin directory DIR (default --plugins-dir) against its lock file. It
prints one line per plugin: ok, modified (with both digests), missing, or
unpinned (an executable the lock does not pin).

Exit status: 0 every plugin matches its pin, 1 any does not (or the
directory has no lock file), 2 bad usage or configuration.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d := *dir
			if len(args) > 0 {
				d = args[0]
			}
			return runPluginsVerify(cmd.OutOrStdout(), configFrom(cmd.Context()), d)
		},
	}
}

func runPluginsVerify(w io.Writer, cfg *fileConfig, dir string) error {
	rows, err := configRows(cfg)
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
		case plugins.StatusOK:
		case plugins.StatusModified:
			bad++
			detail = fmt.Sprintf("pinned %s, file has %s", r.SHA256, r.Actual)
		case plugins.StatusMissing:
			bad++
			detail = "pinned " + r.SHA256 + ", no such executable"
		case plugins.StatusUnpinned:
			bad++
			detail = "file has " + r.Actual + ", not in " + plugins.LockFileName
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
		return &exitError{code: exitFailure, err: dirErr}
	case bad > 0:
		return &exitError{code: exitFailure, err: fmt.Errorf("%d of %d plugins do not match their pins", bad, len(rows))}
	}
	return nil
}
