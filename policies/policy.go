// Package policies holds gated's default Rego bundle and the evaluator
// that compiles it once and evaluates data.gated.decision for every
// proposal.
//
// The bundle is the *.rego files and data.json of this directory, embedded
// at build time. Stock `opa test policies/` runs the same tests as
// `go test ./policies`.
package policies

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"

	"github.com/gated/gated/engine"
)

//go:embed *.rego data.json
var defaultFS embed.FS

// Query is the policy entry point.
const Query = "data.gated.decision"

// ErrInvalidBundle is wrapped by errors about a bundle that cannot be
// compiled or whose data cannot be read.
var ErrInvalidBundle = errors.New("invalid policy bundle")

// Bundle is a set of Rego modules and the data document they evaluate
// against.
type Bundle struct {
	// Modules maps a file name to Rego source. Files ending in _test.rego
	// are tests: compiled for RunTests, left out of evaluation.
	Modules map[string]string
	// Data is the data document, rooted at data (so data.gated.sops is
	// Data["gated"]["sops"]).
	Data map[string]any
}

// Default returns the embedded default bundle.
func Default() (*Bundle, error) {
	b := &Bundle{Modules: map[string]string{}}
	names, err := fs.Glob(defaultFS, "*.rego")
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		src, err := defaultFS.ReadFile(name)
		if err != nil {
			return nil, err
		}
		b.Modules[name] = string(src)
	}
	raw, err := defaultFS.ReadFile("data.json")
	if err != nil {
		return nil, err
	}
	if err := decodeData(raw, &b.Data); err != nil {
		return nil, fmt.Errorf("%w: data.json: %v", ErrInvalidBundle, err)
	}
	return b, nil
}

func decodeData(raw []byte, into *map[string]any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(into)
}

// Revision is a content hash of the bundle's modules and data: two
// bundles with the same revision decide alike.
func (b *Bundle) Revision() string {
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(b.Modules)) {
		fmt.Fprintf(h, "module %s %d\n%s\n", name, len(b.Modules[name]), b.Modules[name])
	}
	data, _ := json.Marshal(b.Data) // map keys marshal sorted: canonical
	fmt.Fprintf(h, "data %d\n%s", len(data), data)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))[:24]
}

func (b *Bundle) parse(includeTests bool) (map[string]*ast.Module, error) {
	mods := make(map[string]*ast.Module, len(b.Modules))
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(b.Modules)) {
		if !includeTests && strings.HasSuffix(name, "_test.rego") {
			continue
		}
		m, err := ast.ParseModuleWithOpts(name, b.Modules[name], ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		mods[name] = m
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidBundle, errors.Join(errs...))
	}
	return mods, nil
}

// Evaluator evaluates data.gated.decision. It is prepared once and safe for
// concurrent use; it implements engine.Policy.
type Evaluator struct {
	pq       rego.PreparedEvalQuery
	revision string
}

var _ engine.Policy = (*Evaluator)(nil)

// Compile parses, compiles and prepares b. Errors name the file and line.
func Compile(ctx context.Context, b *Bundle) (*Evaluator, error) {
	mods, err := b.parse(false)
	if err != nil {
		return nil, err
	}
	opts := []func(*rego.Rego){
		rego.Query(Query),
		// Keep data as AST values so a rule reading data.gated.config does
		// not convert Go maps on every evaluation.
		rego.Store(inmem.NewFromObjectWithOpts(b.Data, inmem.OptReturnASTValuesOnRead(true))),
		// A builtin error is an evaluation error, and so an error verdict,
		// rather than a silently undefined rule.
		rego.StrictBuiltinErrors(true),
	}
	for _, name := range slices.Sorted(maps.Keys(mods)) {
		opts = append(opts, rego.ParsedModule(mods[name]))
	}
	pq, err := rego.New(opts...).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidBundle, err)
	}
	return &Evaluator{pq: pq, revision: b.Revision()}, nil
}

// Revision is the content hash of the compiled bundle.
func (e *Evaluator) Revision() string { return e.revision }

// Evaluate implements engine.Policy. It returns an error when the decision
// is undefined or not shaped as the contract says; the engine turns that
// into an error verdict.
func (e *Evaluator) Evaluate(ctx context.Context, in engine.PolicyInput) (engine.PolicyDecision, error) {
	start := time.Now()
	rs, err := e.pq.Eval(ctx, rego.EvalParsedInput(InputValue(in)))
	elapsed := time.Since(start)
	if err != nil {
		return engine.PolicyDecision{}, fmt.Errorf("evaluating %s: %w", Query, err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return engine.PolicyDecision{}, fmt.Errorf("%s is undefined for this input", Query)
	}
	d, err := parseDecision(rs[0].Expressions[0].Value)
	if err != nil {
		return engine.PolicyDecision{}, fmt.Errorf("reading %s: %w", Query, err)
	}
	d.Revision = e.revision
	d.Eval = elapsed
	return d, nil
}

// RunTests compiles every module of b, tests included, and runs the tests
// against b's data.
func RunTests(ctx context.Context, b *Bundle) ([]*tester.Result, error) {
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
	ch, err := tester.NewRunner().
		SetStore(store).
		SetModules(mods).
		RaiseBuiltinErrors(true).
		SetDefaultRegoVersion(ast.RegoV1).
		RunTests(ctx, txn)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidBundle, err)
	}
	var results []*tester.Result
	for r := range ch {
		results = append(results, r)
	}
	slices.SortFunc(results, func(a, b *tester.Result) int {
		return strings.Compare(a.Package+"."+a.Name, b.Package+"."+b.Name)
	})
	return results, nil
}
