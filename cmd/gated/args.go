package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// wantArgs refuses args unless they are exactly the arguments names
// names, and says by name which are missing: "missing ID: usage: gated
// verdict get TENANT ID".
func wantArgs(c *cobra.Command, args []string, names ...string) error {
	usage := "usage: " + c.CommandPath() + " " + strings.Join(names, " ")
	switch {
	case len(args) < len(names):
		return usageError("missing %s: %s", strings.Join(names[len(args):], " and "), usage)
	case len(args) > len(names):
		return usageError("%d arguments, want %d: %s", len(args), len(names), usage)
	}
	return nil
}
