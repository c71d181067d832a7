package main

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gated/gated/internal/server"
	"github.com/gated/gated/policies"
)

type policyTestOptions struct {
	bundle         server.PolicySource
	run            string
	format         string
	verbose        bool
	includeDefault bool
}

func policyTestCmd() *cobra.Command {
	o := &policyTestOptions{}
	c := &cobra.Command{
		Use:   "test [DIR]",
		Short: "Run the bundle's Rego tests, report coverage and check the evaluators agree",
		Long: `test runs the Rego tests (rules named test_* in *_test.rego files) and
reports the line coverage of every non-test file. The tests run on OPA's
topdown evaluator; gated decides with its planned evaluator when the bundle
allows it, so test also records every input (and every with data...
override) under which the tests evaluate the bundle's rules, decides
data.gated.decision for each with both evaluators, and reports any input
they decide differently. gated refuses to serve or reload such a bundle.

With no DIR it tests the embedded default bundle. With DIR it runs DIR's
tests against the default bundle plus DIR (or DIR alone with
--policies-replace): exactly the tests gated runs before it serves or
reloads that policy. The default bundle's own tests assume the default
data, which DIR may rightly change; --include-default runs them as well,
as stock "opa test" on both directories would.

Exit status: 0 every test passed (or none was found) and the evaluators
agree, 1 a test failed or errored, the evaluators disagree, or the bundle
does not load or compile, 2 bad usage.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPolicyTest(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o, args)
		},
	}
	f := c.Flags()
	registerPolicySource(f, &o.bundle)
	f.StringVar(&o.run, "run", "", "run only the tests whose names match this regular expression")
	f.StringVar(&o.format, "format", "text", "text or json")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "list every test, not only the failures")
	f.BoolVar(&o.includeDefault, "include-default", false, "with DIR, also run the default bundle's tests")
	return c
}

func runPolicyTest(ctx context.Context, w, errw io.Writer, o *policyTestOptions, args []string) error {
	if err := checkFormat(o.format); err != nil {
		return err
	}
	if _, err := regexp.Compile(o.run); err != nil {
		return usageError("--run %q: %v", o.run, err)
	}
	b, _, err := loadPolicyBundle(&o.bundle, args, errw)
	if err != nil {
		return err
	}
	userOnly := o.bundle.Dir != "" && !o.includeDefault
	if userOnly {
		b = b.UserTests()
	}
	report, err := policies.RunTests(ctx, b, o.run)
	if err != nil {
		return err
	}
	if userOnly {
		// Coverage is about the files whose tests ran.
		for name := range report.Coverage.Files {
			if strings.HasPrefix(name, "default/") {
				delete(report.Coverage.Files, name)
			}
		}
	}
	// The tests ran on topdown; the parity check decides their inputs with
	// the planned evaluator too, as gated does before it serves the bundle.
	var parity *policies.ParityReport
	var parityErr error
	if len(report.Results) > 0 {
		parity, parityErr = checkParity(ctx, b, &o.bundle, o.run)
	}
	sum := policies.Summarize(report)
	if o.format == "json" {
		doc := policies.TestReportDocument(report, sum)
		doc.Parity = policies.ParityDocument(parity, parityErr)
		err = writeJSON(w, doc)
	} else {
		err = policies.WriteTestText(w, report, sum, o.verbose, o.run)
		if err == nil {
			err = policies.WriteParityText(w, parity, parityErr)
		}
	}
	if err != nil {
		return err
	}
	if bad := sum.Failed + sum.Errored; bad > 0 {
		return &exitError{code: exitFailure, err: fmt.Errorf("%d of %d tests did not pass (%d failed, %d errored)", bad, sum.Total, sum.Failed, sum.Errored)}
	}
	if parityErr != nil {
		return &exitError{code: exitFailure, err: fmt.Errorf("parity check: %w", parityErr)}
	}
	if parity != nil && len(parity.Disagreements) > 0 {
		return &exitError{code: exitFailure, err: fmt.Errorf("%w on %d of %d test inputs", policies.ErrEvaluatorsDisagree, len(parity.Disagreements), parity.Compared)}
	}
	return nil
}

// checkParity compiles b as serve would and compares the planned
// evaluator with topdown on the inputs of b's tests that match filter.
func checkParity(ctx context.Context, b *policies.Bundle, o *server.PolicySource, filter string) (*policies.ParityReport, error) {
	ev, err := policies.Compile(ctx, b, o.CompileOptions()...)
	if err != nil {
		return nil, err
	}
	return policies.CheckParity(ctx, ev, b, filter)
}
