package main

import (
	"github.com/spf13/cobra"

	"github.com/gated/gated/internal/server"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/plugins/sop"
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
			return plugins.List(cmd.OutOrStdout(), sop.Name, server.ConfigFileOf(cmd.Context()).Plugins, *dir, format)
		},
	}
	c.Flags().StringVar(&format, "format", "text", "text or json")
	return c
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
			return plugins.Pin(cmd.OutOrStdout(), d)
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
			return plugins.Verify(cmd.OutOrStdout(), server.ConfigFileOf(cmd.Context()).Plugins, d)
		},
	}
}
