package main

import (
	"context"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/gated/gated/internal/server"
)

func run(ctx context.Context, args []string) error {
	root := rootCmd()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil && isCobraUsageError(err) {
		return usageError("%v", err)
	}
	return err
}

// rootCmd is gated's command tree.
func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "gated",
		Short:         "gated is the policy gate for fleets of AI agents",
		Long:          "gated decides on the actions AI agents propose over NATS: strict validation, deterministic Rego rules, an out-of-process reviewer, and an audit trail of every step.\n\n" + server.ConfigHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionLine(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.PersistentFlags().String("config", "", "YAML file of flag values and plugins (see gated --help)")
	_ = root.MarkPersistentFlagFilename("config", "yaml", "yml")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError("%v", err) })
	root.AddCommand(serveCmd(), proposeCmd(), versionCmd(), pluginCmd())
	root.AddCommand(policyCmd(), pluginsCmd())
	root.AddCommand(personasCmd())
	root.AddCommand(verdictCmd())
	root.AddCommand(grantsCmd())
	root.AddCommand(auditCmd())
	root.AddCommand(operatorCmd())
	root.AddCommand(benchMovedCmd())
	root.AddCommand(mcpCmd())
	root.AddCommand(budgetsCmd())
	root.AddCommand(reportCmd())
	for _, c := range root.Commands() {
		bindEnv(c)
	}
	setExamples(root)
	return root
}

// isCobraUsageError recognises cobra's own argument errors, which it
// returns as plain errors.
func isCobraUsageError(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "accepts ") ||
		strings.HasPrefix(msg, "requires at least") || strings.HasPrefix(msg, "unknown flag")
}

// bindEnv lets GATED_<FLAG> set any flag the command line leaves unset
// (--nats-url is GATED_NATS_URL), then the --config file any flag both
// leave unset. The file's other content reaches the command through its
// context (server.ConfigFileOf).
func bindEnv(c *cobra.Command) {
	prev := c.PreRunE
	c.PreRunE = func(cmd *cobra.Command, args []string) error {
		var err error
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Changed || err != nil {
				return
			}
			key := "GATED_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
			if v, ok := os.LookupEnv(key); ok {
				if serr := cmd.Flags().Set(f.Name, v); serr != nil {
					err = usageError("%s=%q: %v", key, v, serr)
				}
			}
		})
		if err == nil {
			_, err = server.LoadConfigFile(cmd)
			err = fromServer(err)
		}
		if err == nil && prev != nil {
			err = prev(cmd, args)
		}
		return err
	}
	for _, sub := range c.Commands() {
		bindEnv(sub)
	}
}

func pluginCmd() *cobra.Command {
	c := &cobra.Command{
		Use:    "plugin",
		Short:  "Run a bundled reviewer plugin (launched by gated itself)",
		Hidden: true,
	}
	c.AddCommand(&cobra.Command{
		Use:   "run NAME",
		Short: "Serve a bundled reviewer over the plugin protocol: sop or llm",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return fromServer(server.ServeBundledPlugin(args[0], version))
		},
	})
	return c
}

// newLogger returns a JSON logger, or a console one when stderr is a
// terminal and format is auto.
func newLogger(format, level string) (*zap.Logger, error) {
	log, err := server.NewLogger(format, level)
	return log, fromServer(err)
}
