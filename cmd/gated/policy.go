package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gated/gated/internal/server"
	"github.com/gated/gated/policies"
)

// policyCmd is `gated policy`: tools for policy authors that work on a
// bundle without a running gate; only replay reads NATS.
func policyCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "policy",
		Short: "Test, check and try out a policy bundle",
		Long: `policy works on a policy bundle without NATS: the embedded default bundle,
plus a directory of your own (--policies DIR), or your directory alone
(--policies DIR --policies-replace), plus data files (--policy-data FILE).
replay alone reads NATS: the audit stream whose history it decides again.`,
	}
	c.AddCommand(policyTestCmd(), policyEvalCmd(), policyCheckCmd(), policyReplayCmd(), policyShadowCmd())
	return c
}

// loadPolicyBundle reads the bundle that o names, and prints a note about
// the policy directory, if there is one, on errw. args is the optional
// positional DIR of `test` and `check`, the same as --policies DIR.
func loadPolicyBundle(o *server.PolicySource, args []string, errw io.Writer) (*policies.Bundle, []string, error) {
	if len(args) > 0 {
		if o.Dir != "" {
			return nil, nil, usageError("give the policy directory either as an argument or as --policies, not both (%s and %s)", args[0], o.Dir)
		}
		o.Dir = args[0]
	}
	src, note, err := o.Sources()
	if err != nil {
		return nil, nil, fromServer(err)
	}
	if note != "" {
		fmt.Fprintln(errw, "note:", note)
	}
	return policies.LoadFiles(src)
}

// checkFormat refuses an output format other than text or json.
func checkFormat(format string) error {
	if format != "text" && format != "json" {
		return usageError("--format %q: want text or json", format)
	}
	return nil
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(out))
	return err
}

// --- gated policy check -------------------------------------------------------

func policyCheckCmd() *cobra.Command {
	o := &server.PolicySource{}
	strict := true
	c := &cobra.Command{
		Use:   "check [DIR]",
		Short: "Load and compile the bundle in OPA strict mode",
		Long: `check loads the default bundle plus DIR (or DIR alone with --policies-replace)
and the --policy-data files, compiles it in OPA strict mode, as stock
"opa check --strict" does (unused variables, function arguments and imports
are errors, in test files too; --strict=false compiles as the gate does),
runs the bundle's data checks
(data.gated.config_errors) and checks the shape of the decision on sample
proposals. It prints the bundle's warnings (data.gated.config_warnings) on
stderr, such as an SOP action pattern with **, which spans any number of
words of an action; warnings do not fail the check. It does not run the
Rego tests: "gated policy test" does.
Exit status: 0 the bundle is sound, 1 it is not, 2 bad usage.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPolicyCheck(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o, args, strict)
		},
	}
	registerPolicySource(c.Flags(), o)
	c.Flags().BoolVar(&strict, "strict", true, "compile in OPA's strict mode, test files included, as opa check --strict does")
	return c
}

func runPolicyCheck(ctx context.Context, w, errw io.Writer, o *server.PolicySource, args []string, strict bool) error {
	ev, err := checkBundle(ctx, w, errw, o, args, strict)
	var ex *exitError
	switch {
	case err == nil:
		for _, warning := range ev.ConfigWarnings() {
			fmt.Fprintln(errw, "warning:", warning)
		}
		mode := "strict mode"
		if !strict {
			mode = "not strict"
		}
		fmt.Fprintf(w, "ok: revision %s (%s)\n", ev.Revision(), mode)
		if st := ev.Plan(); st.Reason != "" {
			fmt.Fprintf(w, "evaluator: %s (%s)\n", st.Evaluator, st.Reason)
		} else {
			fmt.Fprintf(w, "evaluator: %s\n", st.Evaluator)
		}
		return nil
	case errors.As(err, &ex):
		return err
	}
	fmt.Fprintln(errw, strings.TrimSpace(err.Error()))
	fmt.Fprintln(errw, `policy check failed; fix the problems above (check only compiles: "gated policy test" runs the Rego tests)`)
	return &exitError{code: exitFailure, err: err, silent: true}
}

// checkBundle loads the bundle, lists its files on w and compiles it, in
// strict mode when strict is set.
func checkBundle(ctx context.Context, w, errw io.Writer, o *server.PolicySource, args []string, strict bool) (*policies.Evaluator, error) {
	b, files, err := loadPolicyBundle(o, args, errw)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		fmt.Fprintf(w, "checked %s\n", f)
	}
	opts := o.CompileOptions()
	if strict {
		opts = append(opts, policies.Strict())
	}
	return policies.Compile(ctx, b, opts...)
}
