package policies

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
)

// UserTests returns b without the embedded default bundle's tests. Those
// tests check the default rules against the default data; a user's data
// may rightly change their outcome (a freeze window in force, an action
// denied for a tenant), so a bundle built on the default is judged by its
// author's tests alone. The default's tests run in gated's own test suite
// and with `gated policy test` on no directory.
func (b *Bundle) UserTests() *Bundle {
	out := &Bundle{Modules: make(map[string]string, len(b.Modules)), Data: b.Data}
	for name, src := range b.Modules {
		if strings.HasPrefix(name, defaultPrefix) && strings.HasSuffix(name, "_test.rego") {
			continue
		}
		out.Modules[name] = src
	}
	return out
}

// TestReport is the outcome of a bundle's Rego tests.
type TestReport struct {
	Results []*tester.Result
	// Coverage is the line coverage of the non-test modules by the tests.
	Coverage cover.Report
}

// Failed counts the tests that failed or errored.
func (r *TestReport) Failed() int {
	n := 0
	for _, res := range r.Results {
		if res.Fail || res.Error != nil {
			n++
		}
	}
	return n
}

// RunTests compiles every module of b, tests included, and runs the tests
// against b's data as stock `opa test` does; filter, when not empty, is a
// regular expression that selects tests by name.
func RunTests(ctx context.Context, b *Bundle, filter string) (*TestReport, error) {
	return runTests(ctx, b, filter, true)
}

// runTests runs b's tests, tracing coverage only when asked: a reload
// needs the verdict of the tests, not their coverage.
func runTests(ctx context.Context, b *Bundle, filter string, coverage bool) (*TestReport, error) {
	mods, err := b.parse(true)
	if err != nil {
		return nil, err
	}
	store := inmem.NewFromObject(b.Data)
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		return nil, err
	}
	defer store.Abort(ctx, txn)
	runner := tester.NewRunner().
		SetStore(store).
		SetModules(mods).
		SetDefaultRegoVersion(ast.RegoV1)
	cov := cover.New()
	if coverage {
		runner = runner.SetCoverageQueryTracer(cov)
	}
	if filter != "" {
		if _, err := regexp.Compile(filter); err != nil {
			return nil, fmt.Errorf("test filter %q: %w", filter, err)
		}
		runner = runner.Filter(filter)
	}
	ch, err := runner.RunTests(ctx, txn)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidBundle, err)
	}
	report := &TestReport{}
	for r := range ch {
		report.Results = append(report.Results, r)
	}
	slices.SortFunc(report.Results, func(a, b *tester.Result) int {
		return strings.Compare(a.Package+"."+a.Name, b.Package+"."+b.Name)
	})
	if !coverage {
		return report, nil
	}
	covered := make(map[string]*ast.Module, len(mods))
	for name, m := range mods {
		if !strings.HasSuffix(name, "_test.rego") {
			covered[name] = m
		}
	}
	report.Coverage = cov.Report(covered)
	return report, nil
}
