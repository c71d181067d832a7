package policies

// Parity: the planned evaluator decides in production, topdown is the
// reference the bundle's Rego tests run on. CheckParity runs the bundle's
// tests once more on topdown with a tracer that records every input (and
// every `with data...` override) under which a rule of the bundle's
// non-test modules is evaluated, then decides data.gated.decision for each
// recorded input and data with both evaluators and compares the results.
//
// The recording follows topdown's own bookkeeping: each rule body is a
// query whose parent is the query that referred to it, and each query is
// evaluating one expression at a time (the last one traced as Eval or
// Redo). The data a rule reads is the bundle's, with the `with data...`
// modifiers of the expressions on the chain of queries up to the test
// applied outermost first, as topdown applies them. A `with` on a function
// or on a rule (a mock) changes what the rules compute in a way the
// decision query cannot replay: evaluations under one are counted as
// skipped, not compared.

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// TestInput is one evaluation the bundle's Rego tests make: the input and
// data under which a rule of the bundle's non-test modules was evaluated.
type TestInput struct {
	// Test is the test rule, e.g. data.gated_test.test_read_needs_no_review.
	Test string
	// Input is the input document; nil when the test gave none.
	Input ast.Value
	// Data is the data document the rule read: the bundle's data with the
	// test's `with data...` overrides applied.
	Data ast.Object
	// Overrides lists those overrides as "data.x.y = value", in the order
	// applied; empty when the rule read the bundle's data.
	Overrides []string
}

// ParityReport is what CheckParity found.
type ParityReport struct {
	// Evaluator says which evaluator decides the bundle's proposals. When
	// it is topdown, nothing is compared: the tests ran on it already.
	Evaluator PlanStatus `json:"evaluator"`
	// Compared counts the distinct inputs both evaluators decided.
	Compared int `json:"compared"`
	// Skipped counts the evaluations made under a mocked function or rule,
	// which a decision query cannot replay.
	Skipped int `json:"skipped"`
	// Disagreements are the inputs the evaluators decided differently.
	Disagreements []Disagreement `json:"disagreements"`
}

// Disagreement is an input of a bundle's tests that the planned evaluator
// decides differently from topdown.
type Disagreement struct {
	// Test is the first test that evaluated the input.
	Test string `json:"test"`
	// Input is the input document, as JSON.
	Input string `json:"input"`
	// Overrides are the test's `with data...` overrides, if any.
	Overrides []string `json:"overrides,omitempty"`
	// Topdown and Planned are each evaluator's decision, or its error, or
	// "undefined".
	Topdown string `json:"topdown"`
	Planned string `json:"planned"`
}

// Err is nil when the evaluators agree on every input, else an error
// wrapping ErrInvalidBundle and ErrEvaluatorsDisagree that shows the first
// disagreements.
func (r *ParityReport) Err() error {
	if len(r.Disagreements) == 0 {
		return nil
	}
	const shown = 3
	var b strings.Builder
	for i, d := range r.Disagreements[:min(shown, len(r.Disagreements))] {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(d.String())
	}
	if n := len(r.Disagreements) - shown; n > 0 {
		fmt.Fprintf(&b, "\n  and %d more", n)
	}
	return fmt.Errorf("%w: %w on %d of the %d inputs of the bundle's tests (decide with --policy-evaluator topdown, and report this as a defect in gated):\n%s",
		ErrInvalidBundle, ErrEvaluatorsDisagree, len(r.Disagreements), r.Compared, b.String())
}

// String shows a disagreement on indented lines.
func (d Disagreement) String() string {
	s := fmt.Sprintf("  %s\n    input: %s", d.Test, d.Input)
	for _, o := range d.Overrides {
		s += "\n    with " + o
	}
	return s + "\n    topdown: " + d.Topdown + "\n    planned: " + d.Planned
}

// CheckParity runs b's Rego tests (those whose names match filter, a
// regular expression, when it is not empty), records every input and data
// under which they evaluate a rule of b, and decides data.gated.decision
// for each with e's planned evaluator and with topdown. e must be b
// compiled. When topdown decides e's proposals it compares nothing. An
// error means the check could not run; disagreements are in the report
// (see ParityReport.Err).
func CheckParity(ctx context.Context, e *Evaluator, b *Bundle, filter string) (*ParityReport, error) {
	report := &ParityReport{Evaluator: e.Plan(), Disagreements: []Disagreement{}}
	if e.plan == nil {
		return report, nil
	}
	inputs, skipped, err := captureTestInputs(ctx, b, e.compiler, filter)
	if err != nil {
		return nil, err
	}
	report.Skipped = skipped
	now := time.Now()
	queries := map[string]rego.PreparedEvalQuery{"": e.pq}
	for _, in := range inputs {
		key := strings.Join(in.Overrides, "\n")
		pq, ok := queries[key]
		if !ok {
			if pq, err = e.prepareWithData(ctx, in.Data); err != nil {
				return nil, err
			}
			queries[key] = pq
		}
		data := e.data
		if len(in.Overrides) > 0 {
			data = ast.NewTerm(in.Data)
		}
		want, werr := evalQuery(ctx, pq, in.Input, now)
		got, gerr := e.plan.Eval(ctx, termOf(in.Input), data, now)
		report.Compared++
		if decisionsAgree(want, werr, got, gerr) {
			continue
		}
		report.Disagreements = append(report.Disagreements, Disagreement{
			Test: in.Test, Input: valueString(in.Input), Overrides: in.Overrides,
			Topdown: outcomeString(want, werr), Planned: outcomeString(got, gerr),
		})
	}
	return report, nil
}

// prepareWithData prepares the decision query on topdown over data.
func (e *Evaluator) prepareWithData(ctx context.Context, data ast.Object) (rego.PreparedEvalQuery, error) {
	doc, err := ast.JSON(data)
	if err != nil {
		return rego.PreparedEvalQuery{}, fmt.Errorf("converting a test's data: %w", err)
	}
	root, _ := doc.(map[string]any)
	store := inmem.NewFromObjectWithOpts(root, inmem.OptReturnASTValuesOnRead(true))
	pq, err := rego.New(rego.Query(Query), rego.Compiler(e.compiler), rego.Store(store), rego.StrictBuiltinErrors(true)).PrepareForEval(ctx)
	if err != nil {
		return rego.PreparedEvalQuery{}, fmt.Errorf("preparing %s over a test's data: %w", Query, err)
	}
	return pq, nil
}

// evalQuery evaluates pq on topdown; nil and no error when the decision is
// undefined.
func evalQuery(ctx context.Context, pq rego.PreparedEvalQuery, input ast.Value, now time.Time) (*ast.Term, error) {
	opts := []rego.EvalOption{rego.EvalTime(now), rego.EvalGenerateJSON(astResult)}
	if input != nil {
		opts = append(opts, rego.EvalParsedInput(input))
	}
	rs, err := pq.Eval(ctx, opts...)
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return nil, fmt.Errorf("%s: %d results", Query, len(rs))
	}
	v, ok := rs[0].Expressions[0].Value.(ast.Value)
	if !ok {
		return nil, fmt.Errorf("%s: unexpected result type %T", Query, rs[0].Expressions[0].Value)
	}
	return ast.NewTerm(v), nil
}

// decisionsAgree: both failed, both undefined, or the same value.
func decisionsAgree(want *ast.Term, werr error, got *ast.Term, gerr error) bool {
	switch {
	case (werr == nil) != (gerr == nil):
		return false
	case werr != nil:
		return true
	case want == nil || got == nil:
		return want == nil && got == nil
	}
	return ast.Compare(want.Value, got.Value) == 0
}

func outcomeString(t *ast.Term, err error) string {
	switch {
	case err != nil:
		return "error: " + err.Error()
	case t == nil:
		return "undefined"
	}
	return t.String()
}

func valueString(v ast.Value) string {
	if v == nil {
		return "(no input)"
	}
	return v.String()
}

func termOf(v ast.Value) *ast.Term {
	if v == nil {
		return nil
	}
	return ast.NewTerm(v)
}

// TestInputs runs b's Rego tests (those matching filter, when not empty)
// and returns every distinct input and data under which they evaluate a
// rule of b's non-test modules, and how many evaluations ran under a
// mocked function or rule and are left out.
func TestInputs(ctx context.Context, b *Bundle, filter string) ([]TestInput, int, error) {
	mods, err := b.parse(false)
	if err != nil {
		return nil, 0, err
	}
	compiler := ast.NewCompiler().WithDefaultRegoVersion(ast.RegoV1).WithEnablePrintStatements(false)
	if compiler.Compile(mods); compiler.Failed() {
		return nil, 0, fmt.Errorf("%w: %w", ErrInvalidBundle, compiler.Errors)
	}
	return captureTestInputs(ctx, b, compiler, filter)
}

// captureTestInputs runs b's tests one by one on topdown with a recording
// tracer. rules is b compiled without its tests: a `with` whose target
// overlaps one of its rules is a mock.
func captureTestInputs(ctx context.Context, b *Bundle, rules *ast.Compiler, filter string) ([]TestInput, int, error) {
	var match *regexp.Regexp
	if filter != "" {
		var err error
		if match, err = regexp.Compile(filter); err != nil {
			return nil, 0, fmt.Errorf("test filter %q: %w", filter, err)
		}
	}
	mods, err := b.parse(true)
	if err != nil {
		return nil, 0, err
	}
	compiler := ast.NewCompiler().WithDefaultRegoVersion(ast.RegoV1).WithEnablePrintStatements(false)
	if compiler.Compile(mods); compiler.Failed() {
		return nil, 0, fmt.Errorf("%w: %w", ErrInvalidBundle, compiler.Errors)
	}
	base, err := ast.InterfaceToValue(b.Data)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: data: %w", ErrInvalidBundle, err)
	}
	baseObj, ok := base.(ast.Object)
	if !ok || b.Data == nil {
		baseObj = ast.NewObject()
	}
	store := inmem.NewFromObjectWithOpts(b.Data, inmem.OptReturnASTValuesOnRead(true))
	rec := &recorder{rules: rules, base: baseObj, seen: map[string]bool{}}
	for _, test := range testRules(compiler, match) {
		pq, err := rego.New(rego.Query(test), rego.Compiler(compiler), rego.Store(store)).PrepareForEval(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: preparing %s: %w", ErrInvalidBundle, test, err)
		}
		rec.start(test)
		// A test's own failure or error is the tester's to report; what
		// it evaluated before it stopped is recorded all the same.
		_, _ = pq.Eval(ctx, rego.EvalQueryTracer(rec))
		if err := ctx.Err(); err != nil {
			return nil, 0, fmt.Errorf("running the tests for the parity check: %w", err)
		}
	}
	return rec.inputs, rec.skipped, nil
}

// testRules lists the test rules as OPA's tester finds them: rules whose
// name starts with test_ (a todo_test_ is skipped), in any module, sorted.
func testRules(c *ast.Compiler, match *regexp.Regexp) []string {
	set := map[string]bool{}
	for _, m := range c.Modules {
		for _, r := range m.Rules {
			ref := r.Head.Ref().GroundPrefix()
			for i, t := range ref {
				var name string
				switch v := t.Value.(type) {
				case ast.Var:
					name = string(v)
				case ast.String:
					name = string(v)
				}
				if !strings.HasPrefix(name, "test_") {
					continue
				}
				path := m.Package.Path.Extend(ref[:i+1]).String()
				if match == nil || match.MatchString(path) {
					set[path] = true
				}
				break
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// recorder is the tracer of captureTestInputs. A fresh evaluation (one
// test) starts with start; topdown evaluates one test on one goroutine, so
// the recorder needs no lock.
type recorder struct {
	rules *ast.Compiler
	base  ast.Object

	test    string
	parent  map[uint64]uint64
	current map[uint64]*ast.Expr
	withs   map[exprAt]*withFrame
	gen     int
	fast    map[string]bool // evaluations seen in this test, by input pointer and frames

	seen    map[string]bool // distinct inputs and data, over all tests
	inputs  []TestInput
	skipped int
}

// exprAt is an expression being evaluated by a query.
type exprAt struct {
	query uint64
	expr  *ast.Expr
}

// withFrame is what an expression's `with` modifiers did to data when it
// was last evaluated.
type withFrame struct {
	gen       int
	overrides []override
	mock      bool // a with on a function or a rule
}

type override struct {
	path  []string
	value *ast.Term
}

func (r *recorder) start(test string) {
	r.test = test
	r.parent = map[uint64]uint64{}
	r.current = map[uint64]*ast.Expr{}
	r.withs = map[exprAt]*withFrame{}
	r.fast = map[string]bool{}
}

// Enabled implements topdown.QueryTracer.
func (r *recorder) Enabled() bool { return true }

// Config implements topdown.QueryTracer: the recorder plugs only the
// values of `with` modifiers, through the event.
func (r *recorder) Config() topdown.TraceConfig { return topdown.TraceConfig{} }

// TraceEvent implements topdown.QueryTracer.
func (r *recorder) TraceEvent(evt topdown.Event) {
	if _, ok := r.parent[evt.QueryID]; !ok {
		r.parent[evt.QueryID] = evt.ParentID
	}
	switch evt.Op {
	case topdown.EvalOp, topdown.RedoOp:
		expr, ok := evt.Node.(*ast.Expr)
		if !ok {
			return
		}
		r.current[evt.QueryID] = expr
		if evt.Op == topdown.EvalOp && len(expr.With) > 0 {
			r.withs[exprAt{evt.QueryID, expr}] = r.frame(&evt, expr)
		}
	case topdown.EnterOp:
		rule, ok := evt.Node.(*ast.Rule)
		if !ok || rule.Location == nil || strings.HasSuffix(rule.Location.File, "_test.rego") {
			return
		}
		r.record(&evt)
	}
}

// frame reads the `with` modifiers of expr as evaluated at evt.
func (r *recorder) frame(evt *topdown.Event, expr *ast.Expr) *withFrame {
	r.gen++
	f := &withFrame{gen: r.gen}
	for _, w := range expr.With {
		target, ok := w.Target.Value.(ast.Ref)
		if !ok {
			f.mock = true
			continue
		}
		switch {
		case target.HasPrefix(ast.InputRootRef):
			continue // the event's input already holds it
		case !target.HasPrefix(ast.DefaultRootRef):
			f.mock = true // a built-in function
			continue
		}
		path, ok := stringPath(target[1:])
		value := evt.Plug(w.Value)
		if !ok || !value.IsGround() || len(r.rules.GetRules(target)) > 0 {
			f.mock = true // a rule, a function, or a target we cannot place
			continue
		}
		f.overrides = append(f.overrides, override{path: path, value: value})
	}
	return f
}

func stringPath(ref ast.Ref) ([]string, bool) {
	out := make([]string, len(ref))
	for i, t := range ref {
		s, ok := t.Value.(ast.String)
		if !ok {
			return nil, false
		}
		out[i] = string(s)
	}
	return out, true
}

// record adds the input and data of the rule evaluation that evt enters.
func (r *recorder) record(evt *topdown.Event) {
	var frames []*withFrame
	q := evt.ParentID
	for range len(r.parent) + 1 {
		if expr := r.current[q]; expr != nil && len(expr.With) > 0 {
			if f := r.withs[exprAt{q, expr}]; f != nil {
				frames = append(frames, f)
			}
		}
		p, ok := r.parent[q]
		if !ok || p == q {
			break
		}
		q = p
	}
	input := evt.Input()
	fast := fmt.Sprintf("%p", input)
	for _, f := range frames {
		fast += fmt.Sprintf(" %d", f.gen)
	}
	if r.fast[fast] {
		return
	}
	r.fast[fast] = true
	var overrides []override
	for _, f := range slices.Backward(frames) {
		if f.mock {
			r.skipped++
			return
		}
		overrides = append(overrides, f.overrides...)
	}
	in := TestInput{Test: r.test, Data: r.base}
	if input != nil {
		in.Input = input.Value
	}
	for _, o := range overrides {
		in.Overrides = append(in.Overrides, fmt.Sprintf("data.%s = %v", strings.Join(o.path, "."), o.value))
	}
	key := valueString(in.Input) + "\n" + strings.Join(in.Overrides, "\n")
	if r.seen[key] {
		return
	}
	r.seen[key] = true
	if len(overrides) > 0 {
		data := r.base.Copy()
		for _, o := range overrides {
			data = setPath(data, o.path, o.value)
		}
		in.Data = data
	}
	r.inputs = append(r.inputs, in)
}

// setPath returns obj with the value at path replaced by v, as topdown's
// `with data...` does: objects on the way are copied, and a missing or
// non-object step becomes an object.
func setPath(obj ast.Object, path []string, v *ast.Term) ast.Object {
	if len(path) == 0 {
		if o, ok := v.Value.(ast.Object); ok {
			return o
		}
		return obj // the data root must stay an object; OPA refuses such a with
	}
	out := obj.Copy()
	key := ast.StringTerm(path[0])
	if len(path) == 1 {
		out.Insert(key, v)
		return out
	}
	child := ast.NewObject()
	if t := out.Get(key); t != nil {
		if o, ok := t.Value.(ast.Object); ok {
			child = o
		}
	}
	out.Insert(key, ast.NewTerm(setPath(child, path[1:], v)))
	return out
}
