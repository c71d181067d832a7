package plan

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/test/cases"
	corpus "github.com/open-policy-agent/opa/v1/test/cases/testdata"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/util"
)

// OPA holds its evaluators (topdown, Wasm, the IR's other interpreters)
// to one corpus of cases: a query, modules, data and input each, in YAML
// under v1/test/cases/testdata of the OPA module, which embeds them for
// the Go package there. TestOPAConformanceCases runs every case of the
// Rego v1 corpus of the OPA version gated builds with through topdown and
// through the planned evaluator, and fails on any case the two decide
// differently: held to a suite nobody here wrote, not only to gated's
// bundle and its tests. A case the planned evaluator does not run (a
// built-in outside planAllowed, `with`, a dynamic call) is counted, not
// compared; so is one that does not compile.

// minCompared is the fewest cases the corpus test must compare: OPA
// v1.22.2's Rego v1 corpus has 2,400 cases, and the planned evaluator runs
// 1,390 of them. Fewer than this means the corpus was not found, or
// planning fails where it should not, and the test would be testing next
// to nothing.
const minCompared = 1200

// corpusNow is the evaluation time of every case, for both evaluators.
var corpusNow = time.Date(2026, 12, 24, 12, 0, 0, 0, time.UTC)

// TestOPAConformanceCases compares the planned evaluator with topdown on
// every case of OPA's conformance corpus the planned evaluator runs:
// both fail with an error of the same code, or both give the same set of
// results. Topdown runs with strict built-in errors, as gated runs it.
func TestOPAConformanceCases(t *testing.T) {
	all := loadCorpus(t)
	var compiled, planned, compared, agreed int
	unplanned := map[string]int{}
	for _, tc := range all {
		c, err := prepareCase(t.Context(), tc)
		if err != nil {
			continue
		}
		compiled++
		if c.plan == nil {
			unplanned[c.why]++
			continue
		}
		planned++
		t.Run(tc.Note, func(t *testing.T) {
			compared++
			if c.agree(t) {
				agreed++
			}
		})
	}
	t.Logf("OPA conformance corpus (Rego v1): %d cases, %d do not compile, %d not planned, %d planned, %d compared, %d agree",
		len(all), len(all)-compiled, compiled-planned, planned, compared, agreed)
	// The reasons of ten cases or more, most first; the rest in one line.
	rest, restCases := 0, 0
	for _, why := range slices.SortedFunc(maps.Keys(unplanned), func(a, b string) int {
		return cmp.Or(unplanned[b]-unplanned[a], strings.Compare(a, b))
	}) {
		if n := unplanned[why]; n < 10 {
			rest, restCases = rest+1, restCases+n
			continue
		}
		t.Logf("  not planned, %4d: %s", unplanned[why], why)
	}
	t.Logf("  not planned, %4d: %d other reasons, mostly a built-in outside planAllowed", restCases, rest)
	if compared < minCompared && !isFocused() {
		t.Fatalf("compared %d cases of OPA's corpus, want at least %d: the corpus was not found or the planned evaluator plans far less of it", compared, minCompared)
	}
}

// isFocused reports whether -run picks cases of the corpus test, so that
// fewer are compared on purpose.
func isFocused() bool {
	f := flag.Lookup("test.run")
	return f != nil && strings.Contains(f.Value.String(), "/")
}

// loadCorpus reads every case of the Rego v1 corpus embedded in the OPA
// module, sorted by note.
func loadCorpus(t *testing.T) []cases.TestCase {
	t.Helper()
	var out []cases.TestCase
	err := fs.WalkDir(corpus.V1, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		bs, err := corpus.V1.ReadFile(path)
		if err != nil {
			return err
		}
		var set cases.Set
		if err := util.Unmarshal(bs, &set); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, tc := range set.Cases {
			tc.Filename = path
			out = append(out, tc)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading OPA's conformance corpus: %v", err)
	}
	slices.SortStableFunc(out, func(a, b cases.TestCase) int { return strings.Compare(a.Note, b.Note) })
	return out
}

// corpusCase is a case of the corpus made ready for both evaluators.
type corpusCase struct {
	tc    cases.TestCase
	input *ast.Term
	data  *ast.Term
	pq    rego.PreparedEvalQuery
	// pqErr is topdown's failure to compile a case the planned
	// evaluator runs: a disagreement of its own.
	pqErr error
	// plan is nil when the planned evaluator does not run the case, and
	// why says why.
	plan *Plan
	why  string
}

// prepareCase parses tc and plans it and, when the planned evaluator runs
// it, compiles it for topdown. It fails when the case does not compile
// (many cases test compile errors).
func prepareCase(ctx context.Context, tc cases.TestCase) (*corpusCase, error) {
	c := &corpusCase{tc: tc}
	opts := ast.ParserOptions{RegoVersion: ast.RegoV1}
	if tc.ExperimentalKeywords {
		opts.Capabilities = ast.CapabilitiesForThisVersion(ast.CapabilitiesExperimentalKeywords(true))
	}
	// OPA's compiler compiles copies of the modules: both evaluators can
	// be given the same.
	mods := map[string]*ast.Module{}
	for i, src := range tc.Modules {
		name := fmt.Sprintf("test-%d.rego", i)
		m, err := ast.ParseModuleWithOpts(name, src, opts)
		if err != nil {
			return nil, err
		}
		mods[name] = m
	}
	var err error
	switch {
	case tc.InputTerm != nil:
		if c.input, err = ast.ParseTerm(*tc.InputTerm); err != nil {
			return nil, err
		}
	case tc.Input != nil:
		v, err := ast.InterfaceToValue(*tc.Input)
		if err != nil {
			return nil, err
		}
		c.input = ast.NewTerm(v)
	}
	data := map[string]any{}
	if tc.Data != nil {
		data = *tc.Data
	}
	dv, err := ast.InterfaceToValue(data)
	if err != nil {
		return nil, err
	}
	c.data = ast.NewTerm(dv)
	ropts := []func(*rego.Rego){rego.Query(tc.Query), rego.SetRegoVersion(ast.RegoV1), rego.StrictBuiltinErrors(true),
		rego.Store(inmem.NewFromObject(data))}
	for _, name := range slices.Sorted(maps.Keys(mods)) {
		ropts = append(ropts, rego.ParsedModule(mods[name]))
	}
	c.plan, err = Compile(ctx, tc.Query, mods)
	if err != nil {
		c.plan, c.why = nil, unplannedReason(err)
		if !errors.Is(err, ErrUnsupported) {
			// The case does not compile, or compiles and OPA's
			// planner fails on it: topdown tells which.
			if _, err := rego.New(ropts...).PrepareForEval(ctx); err != nil {
				return nil, err
			}
		}
		return c, nil
	}
	c.pq, c.pqErr = rego.New(ropts...).PrepareForEval(ctx)
	return c, nil
}

// unplannedReason shortens a planning error to what it is about, so that
// the cases not planned can be counted by reason.
func unplannedReason(err error) string {
	msg := err.Error()
	if errors.Is(err, ErrUnsupported) {
		if _, after, ok := strings.Cut(msg, ErrUnsupported.Error()+": "); ok {
			msg = after
		}
		if i := strings.Index(msg, " called with"); i >= 0 {
			msg = msg[:i]
		}
		return msg
	}
	return "OPA's planner: " + msg
}

// agree evaluates the case with both evaluators and reports whether
// they agree, failing t when they do not.
func (c *corpusCase) agree(t *testing.T) bool {
	t.Helper()
	if c.pqErr != nil {
		t.Errorf("planned, but topdown does not compile the case: %v", c.pqErr)
		return false
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	eopts := []rego.EvalOption{rego.EvalTime(corpusNow), rego.EvalGenerateJSON(astResult)}
	if c.input != nil {
		eopts = append(eopts, rego.EvalParsedInput(c.input.Value))
	}
	rs, werr := c.pq.Eval(ctx, eopts...)
	var got []*ast.Term
	_, gerr := c.plan.eval(ctx, c.input, c.data, corpusNow, nil, &got)
	switch {
	case werr != nil && gerr != nil:
		if wc, gc := errorCode(werr), errorCode(gerr); wc != gc {
			t.Errorf("errors of another code\n  topdown: %v\n  planned: %v", werr, gerr)
			return false
		}
		return true
	case werr != nil || gerr != nil:
		t.Errorf("topdown error: %v\nplanned error: %v\nplanned results: %v", werr, gerr, got)
		return false
	}
	want := ast.NewSet()
	for _, r := range rs {
		obj := ast.NewObject()
		for k, v := range r.Bindings {
			obj.Insert(ast.StringTerm(k), ast.NewTerm(v.(ast.Value)))
		}
		want.Add(ast.NewTerm(obj))
	}
	have := ast.NewSet(got...)
	if want.Compare(have) != 0 {
		t.Errorf("results differ\n  topdown: %v\n  planned: %v", want, have)
		return false
	}
	return true
}

// errorCode is the code of err's topdown error (eval_conflict_error,
// eval_builtin_error, ...), empty when it has none. The two evaluators
// word a conflict differently and may place it at another of the rules
// that conflict; the code is what a caller tells errors apart by.
func errorCode(err error) string {
	var te *topdown.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return ""
}
