package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/gated/gated/plugins"
)

// pluginsTestCmd is the conformance run a third party does before it
// ships a plugin.
func pluginsTestCmd() *cobra.Command {
	var (
		sha      string
		args     []string
		env      []string
		format   string
		deadline time.Duration
		timeout  time.Duration
		verbose  bool
	)
	c := &cobra.Command{
		Use:   "test PATH",
		Short: "Run the conformance checks on a reviewer plugin binary",
		Long: `test starts the plugin at PATH as gated would (pinned, over gRPC with mutual
TLS, no shell, a minimal environment) and checks the handshake, Describe, an
approval, a rejection whose reason tries to talk the reviewer into approving,
a refused tool call, a deadline, a run review with a finding still open (a
plugin that does not review runs passes by refusing it), a malformed request
and shutdown. It prints
PASS or FAIL per check and exits 0 only when every check passes.

Without --sha256 the binary is pinned to its own checksum, which is printed so
you can put it in gated's configuration.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if format != "text" && format != "json" {
				return usageError("--format %q: want text or json", format)
			}
			path, err := filepath.Abs(a[0])
			if err != nil {
				return usageError("%s: %v", a[0], err)
			}
			if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
				return usageError("%s is not an executable file", a[0])
			}
			actual, err := plugins.FileSHA256(path)
			if err != nil {
				return err
			}
			if sha == "" {
				sha = actual
			}
			name := strings.ToLower(strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)))
			log := zap.NewNop()
			if verbose {
				if log, err = newLogger("console", "debug"); err != nil {
					return err
				}
			}
			spec := plugins.Spec{Name: name, Path: path, Args: args, Env: env, SHA256: sha}
			checks := plugins.Conformance(cmd.Context(), log, spec, plugins.ConformanceOptions{ReviewTimeout: timeout, Deadline: deadline})
			failed := 0
			for _, c := range checks {
				if !c.Passed {
					failed++
				}
			}
			w := cmd.OutOrStdout()
			if format == "json" {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				if err := enc.Encode(map[string]any{"path": path, "sha256": actual, "checks": checks, "failed": failed}); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(w, "plugin %s\nsha256 %s\n\n", path, actual)
				for _, c := range checks {
					state := "PASS"
					if !c.Passed {
						state = "FAIL"
					}
					fmt.Fprintf(w, "%s  %-18s %s\n", state, c.Name, c.Detail)
				}
				fmt.Fprintf(w, "\n%d of %d checks passed\n", len(checks)-failed, len(checks))
			}
			if failed > 0 {
				return &exitError{code: exitFailure, err: fmt.Errorf("%d conformance checks failed", failed), silent: format == "text"}
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&sha, "sha256", "", "pin the binary to this checksum (default: its own)")
	f.StringArrayVar(&args, "arg", nil, "argument passed to the plugin (repeatable)")
	f.StringArrayVar(&env, "env", nil, "KEY=VALUE added to the plugin's environment (repeatable)")
	f.StringVar(&format, "format", "text", "text or json")
	f.DurationVar(&deadline, "deadline", time.Second, "deadline of the deadline check")
	f.DurationVar(&timeout, "review-timeout", 30*time.Second, "deadline of every other review")
	f.BoolVarP(&verbose, "verbose", "v", false, "show the host's and the plugin's log")
	return c
}
