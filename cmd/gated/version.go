package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version and revision are stamped at build time by the Makefile:
// -ldflags "-X main.version=... -X main.revision=...". Without them the
// version is the module's, when go install fetched a tagged one, and the
// revision the one the go command recorded of the checkout, if any.
var (
	version  = "dev"
	revision = ""
)

// versionLine is what gated version and gated --version print: the
// version, the source revision it was built from, the Go release that
// built it, and the protocols it speaks.
func versionLine() string {
	v, rev, modified := version, revision, false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case rev == "" && s.Key == "vcs.revision":
				rev = s.Value[:min(len(s.Value), 12)]
			case revision == "" && s.Key == "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	switch {
	case rev == "":
		rev = "unknown"
	case modified:
		rev += "-modified"
	}
	return fmt.Sprintf("gated %s (revision %s, %s, %s/%s, plugin protocol 1, wire schema v1)", v, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Long:  "version prints gated's version, the source revision it was built from, the Go release that built it and the protocols it speaks, as gated --version does.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), versionLine())
			return nil
		},
	}
}
