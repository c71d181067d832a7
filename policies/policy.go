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
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/policies/internal/plan"
)

//go:embed *.rego data.json
var defaultFS embed.FS

// Query is the policy entry point.
const Query = "data.gated.decision"

// ErrInvalidBundle is wrapped by errors about a bundle that cannot be
// compiled or whose data cannot be read.
var ErrInvalidBundle = errors.New("invalid policy bundle")

// ErrEvaluatorsDisagree is wrapped by Explain's error when the planned
// evaluator and topdown decide a proposal differently: a defect in gated
// to report, worked around with --policy-evaluator topdown.
var ErrEvaluatorsDisagree = errors.New("the planned evaluator and topdown disagree")

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
	compiler *ast.Compiler
	revision string
	catalog  *Catalog
	// plan, when set, evaluates the decision in place of pq (plan.go);
	// data is the data document it reads.
	plan *plan.Plan
	data *ast.Term
	// planned says which evaluator decides, and why not the planned one.
	planned PlanStatus
	// warnings are data.gated.config_warnings at compile time.
	warnings []string
	// readsBudget says a rule can read input.budget (budgetref.go).
	readsBudget bool
	// flows is data.gated.config.flows; readsSession says a rule can read
	// input.session (flows.go).
	flows        *FlowConfig
	readsSession bool
}

// PlanStatus tells which evaluator decides a bundle's proposals.
type PlanStatus struct {
	// Evaluator is "planned" (OPA's plan of the query, interpreted) or
	// "topdown" (OPA's general evaluator).
	Evaluator string `json:"evaluator"`
	// Reason says why a bundle is not planned; empty when it is.
	Reason string `json:"reason,omitempty"`
}

// Evaluator names for PlanStatus and the Evaluator compile option.
const (
	EvaluatorPlanned = "planned"
	EvaluatorTopdown = "topdown"
)

var _ engine.Policy = (*Evaluator)(nil)

// CompileOption changes how Compile checks a bundle.
type CompileOption func(*compileConfig)

type compileConfig struct {
	strict  bool
	topdown bool
}

// Strict compiles in OPA's strict mode, as `opa check --strict` does:
// unused local variables, function arguments and imports, shadowed
// keywords and deprecated built-ins are errors, in the bundle's test files
// as well as in the modules it evaluates.
func Strict() CompileOption { return func(c *compileConfig) { c.strict = true } }

// Topdown keeps every decision on OPA's general evaluator, the one `opa
// eval` uses, instead of the planned evaluator Compile picks when the
// bundle allows it.
func Topdown() CompileOption { return func(c *compileConfig) { c.topdown = true } }

// Entry points besides the decision.
var (
	decisionRef       = ast.MustParseRef(Query)
	configErrorsRef   = ast.MustParseRef("data.gated.config_errors")
	configWarningsRef = ast.MustParseRef("data.gated.config_warnings")
)

// Compile parses, compiles and prepares b, then checks it before anyone
// relies on it: data.gated.decision must be defined, data.gated.config_errors
// (when the bundle defines it) must be empty, and the decision for a few
// sample proposals must have the contract's shape. Errors name the file and
// line where OPA knows them, and wrap ErrInvalidBundle.
func Compile(ctx context.Context, b *Bundle, opts ...CompileOption) (*Evaluator, error) {
	var cfg compileConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.strict {
		if err := checkStrict(b); err != nil {
			return nil, err
		}
	}
	mods, err := b.parse(false)
	if err != nil {
		return nil, err
	}
	compiler := ast.NewCompiler().
		WithStrict(cfg.strict).
		WithDefaultRegoVersion(ast.RegoV1).
		WithEnablePrintStatements(false)
	if compiler.Compile(mods); compiler.Failed() {
		return nil, fmt.Errorf("%w: %w", ErrInvalidBundle, compiler.Errors)
	}
	if len(compiler.GetRulesExact(decisionRef)) == 0 {
		return nil, fmt.Errorf("%w: no rule defines %s (package gated, rule decision)", ErrInvalidBundle, Query)
	}
	// Keep data as AST values so a rule reading data.gated.config does not
	// convert Go maps on every evaluation.
	store := inmem.NewFromObjectWithOpts(b.Data, inmem.OptReturnASTValuesOnRead(true))
	pq, err := rego.New(
		rego.Query(Query),
		rego.Compiler(compiler),
		rego.Store(store),
		// A builtin error is an evaluation error, and so an error verdict,
		// rather than a silently undefined rule.
		rego.StrictBuiltinErrors(true),
	).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidBundle, err)
	}
	catalog, err := catalogOf(b.Data)
	if err != nil {
		return nil, err
	}
	flows, err := flowsOf(b.Data)
	if err != nil {
		return nil, err
	}
	e := &Evaluator{pq: pq, compiler: compiler, revision: b.Revision(), catalog: catalog,
		planned: PlanStatus{Evaluator: EvaluatorTopdown, Reason: "turned off"}, readsBudget: readsBudget(compiler),
		flows: flows, readsSession: readsSession(compiler, flows)}
	if err := checkConfig(ctx, compiler, store); err != nil {
		return nil, err
	}
	if e.warnings, err = configStrings(ctx, compiler, store, configWarningsRef); err != nil {
		return nil, err
	}
	if err := e.checkShape(ctx); err != nil {
		return nil, err
	}
	if !cfg.topdown {
		e.planned = e.usePlan(ctx, b)
	}
	return e, nil
}

// checkStrict compiles every module of b, tests included, in OPA's strict
// mode: the test files are not evaluated by the gate, but `opa check
// --strict` refuses them all the same.
func checkStrict(b *Bundle) error {
	mods, err := b.parse(true)
	if err != nil {
		return err
	}
	compiler := ast.NewCompiler().
		WithStrict(true).
		WithDefaultRegoVersion(ast.RegoV1).
		WithEnablePrintStatements(true).
		WithUseTypeCheckAnnotations(true)
	if compiler.Compile(mods); compiler.Failed() {
		return fmt.Errorf("%w: %w", ErrInvalidBundle, compiler.Errors)
	}
	return nil
}

// checkConfig evaluates data.gated.config_errors, the bundle's own checks
// of its data, and refuses the bundle when any fail.
func checkConfig(ctx context.Context, compiler *ast.Compiler, store storage.Store) error {
	msgs, err := configStrings(ctx, compiler, store, configErrorsRef)
	if err != nil || len(msgs) == 0 {
		return err
	}
	return fmt.Errorf("%w: the policy data fails its checks (%s):\n  %s", ErrInvalidBundle, configErrorsRef, strings.Join(msgs, "\n  "))
}

// configStrings evaluates ref, a set of strings such as
// data.gated.config_errors, to a sorted list; nil when no rule defines it.
func configStrings(ctx context.Context, compiler *ast.Compiler, store storage.Store, ref ast.Ref) ([]string, error) {
	if len(compiler.GetRulesExact(ref)) == 0 {
		return nil, nil
	}
	// Builtin errors stay non-fatal here: a check such as
	// valid_time(x) if time.parse_rfc3339_ns(x) reports a bad value by
	// being undefined.
	rs, err := rego.New(rego.Query(ref.String()), rego.Compiler(compiler), rego.Store(store)).Eval(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: evaluating %s: %w", ErrInvalidBundle, ref, err)
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return nil, nil
	}
	list, ok := rs[0].Expressions[0].Value.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s must be a set of strings, got %T", ErrInvalidBundle, ref, rs[0].Expressions[0].Value)
	}
	msgs := make([]string, 0, len(list))
	for _, x := range list {
		msgs = append(msgs, fmt.Sprint(x))
	}
	slices.Sort(msgs)
	return msgs, nil
}

// ConfigWarnings returns what the bundle's data.gated.config_warnings
// reports about its data: settings that are valid but probably wider
// than meant, such as an SOP action pattern with **. They do not stop the
// bundle from loading; `gated policy check` prints them.
func (e *Evaluator) ConfigWarnings() []string { return slices.Clone(e.warnings) }

// sampleInputs are proposals every bundle must decide with a well-formed
// decision: a reviewed write, a read, a proposal with no persona, and the
// second round of a run with criteria of every kind. A bundle that does
// not decide runs (no decision.run) is refused here rather than on the
// first run proposal.
func sampleInputs() []engine.PolicyInput {
	write := &gated.Proposal{
		V: 1, ID: "gated-compile-check", Tenant: "gated-check", Kind: gated.KindAction,
		Action: "host_restart_service", Class: gated.ClassWrite, BlastRadius: gated.BlastSingleDevice,
		Target: map[string]any{"service": "nginx", "tags": []any{"production"}}, Reason: "compile-time check",
		RequestedBy: &gated.RequestedBy{Agent: "gated-check"},
	}
	read := *write
	read.Action, read.Class = "host_list_services", gated.ClassRead
	persona := &engine.Persona{Name: "reviewer", PermissionMode: "read-only", Tools: []string{"get_sop_text"}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	run := &gated.Proposal{
		V: 1, ID: "gated-compile-check-run", Tenant: "gated-check", Kind: gated.KindRun,
		Action: "agent_run", Class: gated.ClassWrite, BlastRadius: gated.BlastSingleDevice,
		Reason: "compile-time check", RequestedBy: &gated.RequestedBy{Agent: "gated-check-orchestrator"},
		Criteria: []gated.Criterion{
			{ID: "tests", Required: true, Kind: gated.CriterionCommandResult,
				Params:   map[string]any{"exit_code": 0},
				Evidence: map[string]any{"command": "go test ./...", "exit_code": 0}},
			{ID: "changelog", Required: true, Kind: gated.CriterionFileContains,
				Params:   map[string]any{"path": "CHANGELOG.md", "pattern": "(?m)^- "},
				Evidence: map[string]any{"path": "CHANGELOG.md", "content": "- a fix"}},
			{ID: "design", Kind: gated.CriterionAIReview},
			{ID: "signoff", Required: true, Kind: gated.CriterionManual},
		},
		Run: &gated.Run{
			RunID: "gated-check-run", Status: gated.RunCompleted, Round: 2, Worker: "gated-check-worker",
			PriorReviews: []gated.PriorReview{{Round: 1, Findings: []gated.Finding{{ID: "r1-f1", Body: "add a changelog entry", Status: gated.FindingResolved}}}},
		},
	}
	record := &gated.RunRecord{Tenant: "gated-check", RunID: "gated-check-run", Rounds: []gated.RunRound{{
		Round: 1, ProposalID: "gated-compile-check-run-1", Outcome: gated.OutcomeRejected, Next: gated.NextContinuation,
		Findings: []gated.Finding{{ID: "r1-f1", Body: "add a changelog entry"}}, DecidedAt: now.Add(-time.Hour), Sent: true,
	}}}
	runPersona := &engine.Persona{Name: "run-reviewer", PermissionMode: "read-only", Tools: []string{"get_proposal"}}
	return []engine.PolicyInput{
		{Proposal: write, Persona: persona, Now: now},
		{Proposal: &read, Persona: persona, Now: now},
		{Proposal: write, Now: now},
		{Proposal: run, Persona: runPersona, RunRecord: record, Now: now},
	}
}

func (e *Evaluator) checkShape(ctx context.Context) error {
	for _, in := range sampleInputs() {
		if _, err := e.Evaluate(ctx, in); err != nil {
			what := string(in.Proposal.Class) + " action"
			if in.Proposal.Kind == gated.KindRun {
				what = "run"
			}
			return fmt.Errorf("%w: a sample %s proposal (persona %v): %w", ErrInvalidBundle, what, in.Persona != nil, err)
		}
	}
	return nil
}

// Revision is the content hash of the compiled bundle.
func (e *Evaluator) Revision() string { return e.revision }

// Catalog returns the SOP and tool catalog of the bundle's data.
func (e *Evaluator) Catalog() *Catalog { return e.catalog }

// astResult hands back the decision as OPA's own value: no conversion to
// Go maps on the hot path.
func astResult(t *ast.Term, _ *rego.EvalContext) (any, error) { return t.Value, nil }

// Evaluate implements engine.Policy. It returns an error when the decision
// is undefined or not shaped as the contract says; the engine turns that
// into an error verdict.
func (e *Evaluator) Evaluate(ctx context.Context, in engine.PolicyInput) (engine.PolicyDecision, error) {
	if in.BudgetUnread && e.readsBudget {
		// It would see zeros for counters it can read: refuse, and the
		// engine reads them.
		return engine.PolicyDecision{}, engine.ErrBudgetUnread
	}
	if in.SessionUnread && e.readsSession {
		return engine.PolicyDecision{}, engine.ErrSessionUnread
	}
	if e.plan == nil {
		return e.evaluate(ctx, in)
	}
	start := time.Now()
	v, err := e.evalPlan(ctx, in)
	if err != nil {
		return engine.PolicyDecision{}, err
	}
	return e.decision(v, in, start)
}

// evalPlan evaluates the decision with the planned evaluator.
func (e *Evaluator) evalPlan(ctx context.Context, in engine.PolicyInput) (ast.Value, error) {
	now := in.Now
	if now.IsZero() {
		now = time.Now()
		in.Now = now
	}
	t, err := e.plan.Eval(ctx, ast.NewTerm(InputValue(in)), e.data, now)
	if err != nil {
		return nil, fmt.Errorf("evaluating %s: %w", Query, err)
	}
	if t == nil {
		return nil, fmt.Errorf("%s is undefined for this input", Query)
	}
	return t.Value, nil
}

// evaluate evaluates the decision with topdown.
func (e *Evaluator) evaluate(ctx context.Context, in engine.PolicyInput, extra ...rego.EvalOption) (engine.PolicyDecision, error) {
	start := time.Now()
	v, err := e.evalTopdown(ctx, in, extra...)
	if err != nil {
		return engine.PolicyDecision{}, err
	}
	return e.decision(v, in, start)
}

func (e *Evaluator) evalTopdown(ctx context.Context, in engine.PolicyInput, extra ...rego.EvalOption) (ast.Value, error) {
	opts := append([]rego.EvalOption{rego.EvalParsedInput(InputValue(in)), rego.EvalGenerateJSON(astResult)}, extra...)
	rs, err := e.pq.Eval(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("evaluating %s: %w", Query, err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return nil, fmt.Errorf("%s is undefined for this input", Query)
	}
	v, ok := rs[0].Expressions[0].Value.(ast.Value)
	if !ok {
		return nil, fmt.Errorf("%s: unexpected result type %T", Query, rs[0].Expressions[0].Value)
	}
	return v, nil
}

// decision reads the decision value v for in.
func (e *Evaluator) decision(v ast.Value, in engine.PolicyInput, start time.Time) (engine.PolicyDecision, error) {
	kind := gated.KindAction
	if in.Proposal != nil && in.Proposal.Kind != "" {
		kind = in.Proposal.Kind
	}
	d, err := parseDecision(v, kind)
	if err != nil {
		return engine.PolicyDecision{}, fmt.Errorf("reading %s: %w", Query, err)
	}
	d.Revision = e.revision
	d.Eval = time.Since(start)
	return d, nil
}
