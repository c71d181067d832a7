// Package plan interprets OPA's plan of a query: it decides gated's
// data.gated.decision from the IR that OPA's planner (the one behind OPA's
// Wasm target) lays out, over ast values with OPA's own built-in functions.
// That is its one job; choosing between it and topdown, and checking that
// both decide alike, is the policies package's.
//
// OPA still parses, type-checks and compiles the bundle and plans the
// query; what is replaced is topdown, the general evaluator that unifies
// terms and keeps bindings for every expression. The plan has already
// settled the control flow: each rule is a function, each body a block of
// lookups, comparisons, loops and calls.
//
// The statements it knows are those the planner emits for the language
// minus `with` (WithStmt) and dynamic calls into virtual documents
// (CallDynamicStmt): a plan that uses either, a void or unknown built-in,
// or a built-in outside planAllowed is refused with ErrUnsupported.
package plan

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// planAllowed lists the built-ins the planned evaluator calls: pure
// functions of their operands (plus time.now_ns, which reads the
// evaluation time). Built-ins that reach the network, the environment or
// evaluation state (http.send, opa.runtime, trace, print, rand.*) keep a
// bundle on topdown, where they have the context they expect.
var planAllowed = func() map[string]bool {
	names := []string{
		// comparison and arithmetic
		"equal", "neq", "lt", "lte", "gt", "gte", "plus", "minus", "mul", "div", "rem",
		"abs", "round", "ceil", "floor", "numbers.range", "numbers.range_step",
		// membership, aggregates, sets
		"internal.member_2", "internal.member_3", "count", "sum", "product", "max", "min", "sort",
		"and", "or", "intersection", "union",
		// arrays and objects
		"array.concat", "array.slice", "array.reverse",
		"object.get", "object.union", "object.union_n", "object.remove", "object.filter", "object.keys", "object.subset",
		// types
		"is_number", "is_string", "is_boolean", "is_array", "is_set", "is_object", "is_null", "type_name",
		// strings
		"concat", "contains", "startswith", "endswith", "lower", "upper", "split", "substring", "trim",
		"trim_left", "trim_right", "trim_prefix", "trim_suffix", "trim_space", "replace", "indexof",
		"format_int", "sprintf", "strings.replace_n", "strings.count", "strings.any_prefix_match",
		"strings.any_suffix_match", "to_number",
		// patterns
		"glob.match", "regex.match", "regex.is_valid", "regex.find_n", "regex.split",
		// encoding
		"json.marshal", "json.unmarshal", "json.is_valid",
		// time
		"time.now_ns", "time.parse_ns", "time.parse_rfc3339_ns", "time.parse_duration_ns",
		"time.date", "time.clock", "time.weekday", "time.add_date", "time.diff",
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}()

// Plan is an interpretable plan: the IR with names resolved, constants
// built and locals counted.
type Plan struct {
	funcs []*pfunc
	main  *pfunc // the query plan; params are input and data
	memos int    // functions of input and data alone, memoised per evaluation
	// consts counts the functions of data alone (constants.go), whose
	// values are kept from one evaluation to the next; values holds them
	// for the data document they were computed on.
	consts int
	values atomic.Pointer[constValues]
	// fresh: every function changes only collections it has just made
	// (literals.go), so the machine may keep lookups into the input and
	// the data (dots.go).
	fresh bool
}

type pfunc struct {
	name string
	// rule is the reference of the rule the function evaluates, such as
	// data.gated.deny, when it evaluates one; empty for helpers.
	rule    string
	params  []int
	ret     int
	blocks  []*pblock
	nlocals int
	memo    int // index into the memo table, or -1
	// shared is the function's index among the functions of data alone,
	// or -1 (constants.go).
	shared int
}

type pblock struct{ stmts []pstmt }

// operand is a local or a constant.
type operand struct {
	local int
	konst *ast.Term
}

type pstmt interface{}

type (
	sReturn   struct{ src int }
	sCallFunc struct {
		fn     *pfunc
		args   []operand
		result int
	}
	sCallBuiltin struct {
		f      topdown.BuiltinFunc
		args   []operand
		result int
		loc    *ast.Location
		// time and cache: the built-in reads the evaluation time or the
		// per-evaluation built-in cache, which are then made for it.
		time, cache bool
		// glob: the built-in is glob.match, which the machine computes
		// itself when it can (glob.go).
		glob bool
	}
	sBlock struct{ blocks []*pblock }
	sBreak struct{ index int }
	sDot   struct {
		src, key operand
		target   int
		// base: src is a collection of the base data, read as OPA's
		// store reads it for topdown (basedata.go).
		base bool
	}
	sLen struct {
		src    operand
		target int
	}
	sScan struct {
		src, key, value int
		body            *pblock
	}
	sNot       struct{ body *pblock }
	sAssignInt struct {
		value  *ast.Term
		target int
	}
	sAssign struct {
		src    operand
		target int
	}
	sAssignOnce struct {
		src    operand
		target int
		loc    *ast.Location
	}
	sReset     struct{ target int }
	sMakeNull  struct{ target int }
	sMakeConst struct {
		value  *ast.Term
		target int
	}
	sMakeArray  struct{ capacity, target int }
	sMakeObject struct{ target int }
	sMakeSet    struct{ target int }
	sEqual      struct {
		a, b operand
		// baseKey: a is the key of a scan of the base data and b a key
		// bound before it, compared as OPA's store reads a key
		// (basedata.go).
		baseKey bool
	}
	sNotEqual    struct{ a, b operand }
	sIsArray     struct{ src operand }
	sIsObject    struct{ src operand }
	sIsSet       struct{ src operand }
	sIsDefined   struct{ src int }
	sIsUndefined struct{ src int }
	sAppend      struct {
		value operand
		array int
	}
	sInsert struct {
		key, value operand
		object     int
	}
	sInsertOnce struct {
		key, value operand
		object     int
		loc        *ast.Location
	}
	sSetAdd struct {
		value operand
		set   int
	}
	sResultAdd struct{ src int }
	sNop       struct{}
)

// planner turns an ir.Policy into a Plan.
type planner struct {
	pol     *ir.Policy
	byName  map[string]*pfunc
	strs    []*ast.Term
	files   []string
	nlocals int
	memos   int
}

func newPlan(pol *ir.Policy) (*Plan, error) {
	if pol == nil || pol.Plans == nil || len(pol.Plans.Plans) != 1 {
		return nil, fmt.Errorf("%w: want exactly one plan", ErrUnsupported)
	}
	p := &planner{pol: pol, byName: map[string]*pfunc{}}
	if pol.Static != nil {
		for _, s := range pol.Static.Strings {
			p.strs = append(p.strs, ast.StringTerm(s.Value))
		}
		for _, f := range pol.Static.Files {
			p.files = append(p.files, f.Value)
		}
	}
	out := &Plan{}
	var funcs []*ir.Func
	if pol.Funcs != nil {
		funcs = pol.Funcs.Funcs
	}
	// Declare every function first: a call may name one defined later.
	for _, f := range funcs {
		pf := &pfunc{name: f.Name, ret: int(f.Return), memo: -1, shared: -1}
		if len(f.Path) > 1 {
			pf.rule = "data." + strings.Join(f.Path[1:], ".")
		}
		for _, l := range f.Params {
			pf.params = append(pf.params, int(l))
		}
		if len(pf.params) == 2 {
			pf.memo = p.memos
			p.memos++
		}
		p.byName[f.Name] = pf
		out.funcs = append(out.funcs, pf)
	}
	for i, f := range funcs {
		pf := out.funcs[i]
		if err := p.body(pf, f.Blocks); err != nil {
			return nil, fmt.Errorf("function %s: %w", f.Name, err)
		}
	}
	plan := pol.Plans.Plans[0]
	main := &pfunc{name: plan.Name, params: []int{int(ir.Input), int(ir.Data)}, ret: int(ir.Data), memo: -1, shared: -1}
	if err := p.body(main, plan.Blocks); err != nil {
		return nil, fmt.Errorf("plan %s: %w", plan.Name, err)
	}
	out.main = main
	if err := markBase(append(slices.Clone(out.funcs), main)); err != nil {
		return nil, err
	}
	// Values kept beyond one statement (a folded literal, a rule's value
	// kept across evaluations) are shared, so both are done only for a
	// plan that changes no collection but one it has just made.
	if all := append(slices.Clone(out.funcs), main); changesOnlyFreshAll(all) {
		foldLiterals(all)
		out.consts = markConstants(out.funcs)
		out.fresh = true
	}
	fuseLiterals(append(slices.Clone(out.funcs), main))
	out.memos = p.memos
	return out, nil
}

// body converts the blocks of f and counts its locals.
func (p *planner) body(f *pfunc, blocks []*ir.Block) error {
	p.nlocals = max(f.ret, slicesMax(f.params)) + 1
	for _, b := range blocks {
		pb, err := p.block(b)
		if err != nil {
			return err
		}
		f.blocks = append(f.blocks, pb)
	}
	f.nlocals = p.nlocals
	return nil
}

func slicesMax(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func (p *planner) local(l ir.Local) int {
	p.nlocals = max(p.nlocals, int(l)+1)
	return int(l)
}

func (p *planner) operand(o ir.Operand) (operand, error) {
	switch v := o.Value.(type) {
	case ir.Local:
		return operand{local: p.local(v)}, nil
	case ir.Bool:
		return operand{konst: ast.InternedTerm(bool(v))}, nil
	case ir.StringIndex:
		if int(v) < 0 || int(v) >= len(p.strs) {
			return operand{}, fmt.Errorf("%w: string index %d out of range", ErrUnsupported, v)
		}
		return operand{konst: p.strs[v]}, nil
	}
	return operand{}, fmt.Errorf("%w: operand %v", ErrUnsupported, o.Value)
}

func (p *planner) location(l *ir.Location) *ast.Location {
	loc := &ast.Location{Row: l.Row, Col: l.Col}
	if l.File >= 0 && l.File < len(p.files) {
		loc.File = p.files[l.File]
	}
	return loc
}

func (p *planner) block(b *ir.Block) (*pblock, error) {
	out := &pblock{stmts: make([]pstmt, 0, len(b.Stmts))}
	for _, s := range b.Stmts {
		ps, err := p.stmt(s)
		if err != nil {
			return nil, err
		}
		out.stmts = append(out.stmts, ps)
	}
	return out, nil
}

func (p *planner) operands(os []ir.Operand) ([]operand, error) {
	out := make([]operand, len(os))
	for i, o := range os {
		var err error
		if out[i], err = p.operand(o); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (p *planner) stmt(s ir.Stmt) (pstmt, error) {
	var err error
	op := func(o ir.Operand) operand {
		var x operand
		if err == nil {
			x, err = p.operand(o)
		}
		return x
	}
	var out pstmt
	switch s := s.(type) {
	case *ir.ReturnLocalStmt:
		out = &sReturn{src: p.local(s.Source)}
	case *ir.CallStmt:
		args, aerr := p.operands(s.Args)
		if aerr != nil {
			return nil, aerr
		}
		if fn, ok := p.byName[s.Func]; ok {
			if len(args) != len(fn.params) {
				return nil, fmt.Errorf("%w: %s called with %d arguments, takes %d", ErrUnsupported, s.Func, len(args), len(fn.params))
			}
			out = &sCallFunc{fn: fn, args: args, result: p.local(s.Result)}
			break
		}
		decl, ok := ast.BuiltinMap[s.Func]
		if !ok || !planAllowed[s.Func] {
			return nil, fmt.Errorf("%w: built-in %s", ErrUnsupported, s.Func)
		}
		f := topdown.GetBuiltin(s.Func)
		if f == nil || decl.Decl.Result() == nil || decl.Decl.Arity() != len(args) {
			return nil, fmt.Errorf("%w: built-in %s", ErrUnsupported, s.Func)
		}
		out = &sCallBuiltin{f: f, args: args, result: p.local(s.Result), loc: p.location(&s.Location),
			time: s.Func == "time.now_ns", cache: strings.HasPrefix(s.Func, "numbers.range"), glob: s.Func == ast.GlobMatch.Name}
	case *ir.BlockStmt:
		bs := &sBlock{}
		for _, b := range s.Blocks {
			pb, berr := p.block(b)
			if berr != nil {
				return nil, berr
			}
			bs.blocks = append(bs.blocks, pb)
		}
		out = bs
	case *ir.BreakStmt:
		out = &sBreak{index: int(s.Index)}
	case *ir.DotStmt:
		out = &sDot{src: op(s.Source), key: op(s.Key), target: p.local(s.Target)}
	case *ir.LenStmt:
		out = &sLen{src: op(s.Source), target: p.local(s.Target)}
	case *ir.ScanStmt:
		body, berr := p.block(s.Block)
		if berr != nil {
			return nil, berr
		}
		out = &sScan{src: p.local(s.Source), key: p.local(s.Key), value: p.local(s.Value), body: body}
	case *ir.NotStmt:
		body, berr := p.block(s.Block)
		if berr != nil {
			return nil, berr
		}
		out = &sNot{body: body}
	case *ir.AssignIntStmt:
		out = &sAssignInt{value: ast.InternedTerm(int(s.Value)), target: p.local(s.Target)}
	case *ir.AssignVarStmt:
		out = &sAssign{src: op(s.Source), target: p.local(s.Target)}
	case *ir.AssignVarOnceStmt:
		out = &sAssignOnce{src: op(s.Source), target: p.local(s.Target), loc: p.location(&s.Location)}
	case *ir.ResetLocalStmt:
		out = &sReset{target: p.local(s.Target)}
	case *ir.MakeNullStmt:
		out = &sMakeNull{target: p.local(s.Target)}
	case *ir.MakeNumberIntStmt:
		out = &sMakeConst{value: ast.InternedTerm(int(s.Value)), target: p.local(s.Target)}
	case *ir.MakeNumberRefStmt:
		if s.Index < 0 || s.Index >= len(p.strs) {
			return nil, fmt.Errorf("%w: number constant %d out of range", ErrUnsupported, s.Index)
		}
		out = &sMakeConst{value: ast.NewTerm(ast.Number(p.strs[s.Index].Value.(ast.String))), target: p.local(s.Target)}
	case *ir.MakeArrayStmt:
		out = &sMakeArray{capacity: int(s.Capacity), target: p.local(s.Target)}
	case *ir.MakeObjectStmt:
		out = &sMakeObject{target: p.local(s.Target)}
	case *ir.MakeSetStmt:
		out = &sMakeSet{target: p.local(s.Target)}
	case *ir.EqualStmt:
		out = &sEqual{a: op(s.A), b: op(s.B)}
	case *ir.NotEqualStmt:
		out = &sNotEqual{a: op(s.A), b: op(s.B)}
	case *ir.IsArrayStmt:
		out = &sIsArray{src: op(s.Source)}
	case *ir.IsObjectStmt:
		out = &sIsObject{src: op(s.Source)}
	case *ir.IsSetStmt:
		out = &sIsSet{src: op(s.Source)}
	case *ir.IsDefinedStmt:
		out = &sIsDefined{src: p.local(s.Source)}
	case *ir.IsUndefinedStmt:
		out = &sIsUndefined{src: p.local(s.Source)}
	case *ir.ArrayAppendStmt:
		out = &sAppend{value: op(s.Value), array: p.local(s.Array)}
	case *ir.ObjectInsertStmt:
		out = &sInsert{key: op(s.Key), value: op(s.Value), object: p.local(s.Object)}
	case *ir.ObjectInsertOnceStmt:
		out = &sInsertOnce{key: op(s.Key), value: op(s.Value), object: p.local(s.Object), loc: p.location(&s.Location)}
	case *ir.SetAddStmt:
		out = &sSetAdd{value: op(s.Value), set: p.local(s.Set)}
	case *ir.ResultSetAddStmt:
		out = &sResultAdd{src: p.local(s.Value)}
	case *ir.NopStmt:
		out = &sNop{}
	default:
		return nil, fmt.Errorf("%w: statement %T", ErrUnsupported, s)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// planTarget is the rego target under which Compile asks OPA for the
// query's plan: OPA compiles and plans the query and hands the IR to
// planCapture, which converts it for the machine (machine.go).
const planTarget = "gated-plan"

type planCapture struct{}

type planKey struct{}

func (planCapture) IsTarget(t string) bool { return t == planTarget }

func (planCapture) PrepareForEval(ctx context.Context, pol *ir.Policy, _ ...rego.PrepareOption) (rego.TargetPluginEval, error) {
	into, _ := ctx.Value(planKey{}).(**Plan)
	if into == nil {
		return nil, errors.New("the gated-plan target is used through plan.Compile only")
	}
	pl, err := newPlan(pol)
	if err != nil {
		return nil, err
	}
	*into = pl
	return planUnused{}, nil
}

// planUnused stands in for rego's own use of the target: Plan.Eval drives
// the plan directly, without rego's per-evaluation set-up.
type planUnused struct{}

func (planUnused) Eval(context.Context, *rego.EvalContext, ast.Value) (ast.Value, error) {
	return nil, errors.New("the gated-plan target is evaluated through Plan.Eval only")
}

var registerPlanTarget = sync.OnceFunc(func() { rego.RegisterPlugin(planTarget, planCapture{}) })

// Compile has OPA compile modules (Rego v1, tests left out by the caller)
// for its IR planner and plan query, then converts the plan. It fails with
// an error wrapping ErrUnsupported when the plan uses what the machine
// does not run, and with OPA's own error when the modules do not compile.
func Compile(ctx context.Context, query string, modules map[string]*ast.Module) (*Plan, error) {
	registerPlanTarget()
	opts := []func(*rego.Rego){rego.Query(query), rego.Target(planTarget), rego.SetRegoVersion(ast.RegoV1)}
	for _, name := range slices.Sorted(maps.Keys(modules)) {
		opts = append(opts, rego.ParsedModule(modules[name]))
	}
	var pl *Plan
	if _, err := rego.New(opts...).PrepareForEval(context.WithValue(ctx, planKey{}, &pl)); err != nil {
		return nil, err
	}
	if pl == nil {
		return nil, fmt.Errorf("%w: OPA produced no plan", ErrUnsupported)
	}
	return pl, nil
}
