package main

import "github.com/spf13/cobra"

// benchMovedCmd answers `gated bench`, whose load generator is now a
// command of its own, gated-bench, so that gated's binary does not carry
// it: the stub says where it went and imports nothing of it.
func benchMovedCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "bench",
		Short:              "Moved to gated-bench",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return usageError("bench is a command of its own now: run gated-bench with the same flags (make build builds bin/gated-bench)")
		},
	}
}
