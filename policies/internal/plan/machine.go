package plan

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/gobwas/glob"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/builtins"
)

// retUp is the block result that unwinds to the function: a return.
const retUp = 1 << 30

// machine is the state of one evaluation.
type machine struct {
	ctx     context.Context
	plan    *Plan
	stack   []*ast.Term
	memo    []*ast.Term
	memoSet []bool
	ret     *ast.Term
	results []*ast.Term
	bctx    topdown.BuiltinContext
	now     time.Time
	steps   int
	// args is a stack of call operands; out and outFn receive a built-in's
	// result; scans holds a reusable state for each depth of nested scans.
	args  []*ast.Term
	out   *ast.Term
	outFn func(*ast.Term) error
	scans []*scanState
	depth int
	// fired, when set, is told each rule whose function returns a value.
	fired func(rule string)
	// consts are the values of the functions of data alone over this
	// evaluation's data (constants.go); nil while fired is set, so that
	// every rule that fires is told.
	consts *constValues
	// globs are the glob.match patterns this machine has compiled
	// (glob.go); they outlive an evaluation, as the machine does.
	globs map[globKey]*glob.Pattern
	// items is the buffer a fused object literal is built from (fuse.go).
	items [][2]*ast.Term
	// dots keeps the evaluation's lookups into the input and the data,
	// and nfixed counts the collections it holds as fixed (dots.go).
	dots   *dotCache
	nfixed int
}

// scanState is one scan in progress, with its callbacks bound once.
type scanState struct {
	m     *machine
	fr    []*ast.Term
	s     *sScan
	up    int
	err   error
	objFn func(k, v *ast.Term) bool
	setFn func(x *ast.Term) bool
}

func (st *scanState) visit(k, v *ast.Term) bool {
	m := st.m
	if m.steps++; m.steps&1023 == 0 {
		if st.err = m.ctx.Err(); st.err != nil {
			return true
		}
	}
	st.fr[st.s.key], st.fr[st.s.value] = k, v
	st.up, _, st.err = m.block(st.fr, st.s.body)
	return st.err != nil || st.up > 0
}

var machines = sync.Pool{New: func() any {
	m := &machine{}
	m.outFn = func(t *ast.Term) error { m.out = t; return nil }
	return m
}}

// Eval runs the plan on input and data and returns the query's single
// result, nil when the query is undefined.
func (pl *Plan) Eval(ctx context.Context, input, data *ast.Term, now time.Time) (res *ast.Term, err error) {
	return pl.eval(ctx, input, data, now, nil, nil)
}

// EvalFired evaluates like Eval and also returns the rules whose
// functions returned a value, in the order they first did, each once. It
// is for explaining a decision, not for deciding: it records every call.
func (pl *Plan) EvalFired(ctx context.Context, input, data *ast.Term, now time.Time) (*ast.Term, []string, error) {
	var fired []string
	seen := map[string]bool{}
	res, err := pl.eval(ctx, input, data, now, func(rule string) {
		if !seen[rule] {
			seen[rule] = true
			fired = append(fired, rule)
		}
	}, nil)
	return res, fired, err
}

// eval runs the plan. When all is set, it receives every result of the
// query, each an object of the query's variables, and eval returns none:
// a query of OPA's test cases may have several.
func (pl *Plan) eval(ctx context.Context, input, data *ast.Term, now time.Time, fired func(string), all *[]*ast.Term) (res *ast.Term, err error) {
	m := machines.Get().(*machine)
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, fmt.Errorf("planned evaluator: %v", r)
		}
		m.release()
	}()
	m.ctx, m.plan, m.fired = ctx, pl, fired
	if fired == nil {
		m.consts = pl.constantsFor(data)
	}
	if cap(m.memo) < pl.memos {
		m.memo, m.memoSet = make([]*ast.Term, pl.memos), make([]bool, pl.memos)
	}
	m.memo, m.memoSet = m.memo[:pl.memos], m.memoSet[:pl.memos]
	m.now = now
	m.bctx = topdown.BuiltinContext{Context: ctx}
	m.args = append(m.args[:0], input, data)
	m.startDots(pl, input, data)
	if _, err := m.call(pl.main, m.args); err != nil {
		return nil, err
	}
	if all != nil {
		*all = append(*all, m.results...)
		return nil, nil
	}
	switch len(m.results) {
	case 0:
		return nil, nil
	case 1:
		obj, ok := m.results[0].Value.(ast.Object)
		if !ok || obj.Len() != 1 {
			return nil, fmt.Errorf("planned evaluator: unexpected result %v", m.results[0])
		}
		var v *ast.Term
		obj.Foreach(func(_, val *ast.Term) { v = val })
		return v, nil
	}
	return nil, fmt.Errorf("planned evaluator: %d results for one query", len(m.results))
}

func (m *machine) release() {
	m.endDots()
	clear(m.stack[:cap(m.stack)])
	m.stack = m.stack[:0]
	clear(m.memo)
	clear(m.memoSet)
	m.results = m.results[:0]
	m.ret, m.ctx, m.plan, m.steps, m.out, m.fired, m.consts = nil, nil, nil, 0, nil, nil, nil
	clear(m.args[:cap(m.args)])
	m.args = m.args[:0]
	for _, st := range m.scans {
		st.fr, st.s, st.err = nil, nil, nil
	}
	m.bctx = topdown.BuiltinContext{}
	machines.Put(m)
}

func (m *machine) call(f *pfunc, args []*ast.Term) (*ast.Term, error) {
	if f.memo >= 0 && m.memoSet[f.memo] {
		return m.memo[f.memo], nil
	}
	if f.shared >= 0 && m.consts != nil {
		if v := m.consts.vals[f.shared].Load(); v != nil {
			if v == undefined {
				v = nil
			}
			m.memo[f.memo], m.memoSet[f.memo] = v, true
			return v, nil
		}
	}
	base := len(m.stack)
	if need := base + f.nlocals; need > cap(m.stack) {
		grown := make([]*ast.Term, base, max(need, 2*cap(m.stack)))
		copy(grown, m.stack)
		m.stack = grown
	}
	m.stack = m.stack[:base+f.nlocals]
	fr := m.stack[base : base+f.nlocals : base+f.nlocals]
	clear(fr)
	for i, p := range f.params {
		fr[p] = args[i]
	}
	var out *ast.Term
	for _, b := range f.blocks {
		up, _, err := m.block(fr, b)
		if err != nil {
			return nil, err
		}
		if up == retUp {
			out = m.ret
			m.ret = nil
			break
		}
		if up > 0 {
			return nil, fmt.Errorf("planned evaluator: %s breaks out of its function", f.name)
		}
	}
	clear(fr)
	m.stack = m.stack[:base]
	if m.fired != nil && out != nil && f.rule != "" {
		m.fired(f.rule)
	}
	if f.memo >= 0 {
		m.memo[f.memo], m.memoSet[f.memo] = out, true
	}
	if f.shared >= 0 && m.consts != nil {
		v := out
		if v == nil {
			v = undefined
		}
		m.consts.vals[f.shared].Store(v)
	}
	return out, nil
}

func (m *machine) val(fr []*ast.Term, o operand) *ast.Term {
	if o.konst != nil {
		return o.konst
	}
	return fr[o.local]
}

// block runs b. up is how many enclosing blocks to leave as well (0: the
// parent goes on; retUp: a function return); done reports that b ran to
// its end rather than being left at an undefined statement or a break.
func (m *machine) block(fr []*ast.Term, b *pblock) (up int, done bool, err error) {
	for _, s := range b.stmts {
		switch s := s.(type) {
		case *sDot:
			src, key := m.val(fr, s.src), m.val(fr, s.key)
			if src == nil || key == nil {
				return 0, false, nil
			}
			var v *ast.Term
			if s.base {
				v = m.baseLookup(src, key)
			} else {
				v = m.lookup(src, key)
			}
			if v == nil {
				return 0, false, nil
			}
			fr[s.target] = v
		case *sAssign:
			v := m.val(fr, s.src)
			if v == nil {
				return 0, false, nil
			}
			fr[s.target] = v
		case *sCallBuiltin:
			v, err := m.builtin(fr, s)
			if err != nil {
				return 0, false, err
			}
			if v == nil {
				return 0, false, nil
			}
			fr[s.result] = v
		case *sCallFunc:
			var v *ast.Term
			var err error
			if f := s.fn; f.memo >= 0 && m.memoSet[f.memo] {
				v = m.memo[f.memo]
			} else {
				// The input is passed on undefined, as OPA's IR has it:
				// a rule that does not read it still has a value.
				base, ok := m.pushArgs(fr, s.args, len(f.params) >= 2)
				if !ok {
					return 0, false, nil
				}
				v, err = m.call(f, m.args[base:])
				m.popArgs(base)
			}
			if err != nil {
				return 0, false, err
			}
			if v == nil {
				return 0, false, nil
			}
			fr[s.result] = v
		case *sBlock:
			for _, sub := range s.blocks {
				up, _, err := m.block(fr, sub)
				if err != nil || up == retUp {
					return up, false, err
				}
				if up > 0 {
					return up - 1, false, nil
				}
			}
		case *sBreak:
			return s.index, false, nil
		case *sNotEqual:
			a, b := m.val(fr, s.a), m.val(fr, s.b)
			if a == nil || b == nil || ast.ValueEqual(a.Value, b.Value) {
				return 0, false, nil
			}
		case *sEqual:
			a, b := m.val(fr, s.a), m.val(fr, s.b)
			if a == nil || b == nil {
				return 0, false, nil
			}
			if s.baseKey {
				if !baseKeyEqual(a.Value, b.Value) {
					return 0, false, nil
				}
			} else if !ast.ValueEqual(a.Value, b.Value) {
				return 0, false, nil
			}
		case *sIsDefined:
			if fr[s.src] == nil {
				return 0, false, nil
			}
		case *sIsUndefined:
			if fr[s.src] != nil {
				return 0, false, nil
			}
		case *sReset:
			fr[s.target] = nil
		case *sAssignOnce:
			v := m.val(fr, s.src)
			if v == nil {
				return 0, false, nil
			}
			if old := fr[s.target]; old != nil && !ast.ValueEqual(old.Value, v.Value) {
				return 0, false, &topdown.Error{Code: topdown.ConflictErr, Location: s.loc, Message: "complete rules must not produce multiple outputs"}
			}
			fr[s.target] = v
		case *sScan:
			up, err := m.scan(fr, s)
			if err != nil || up == retUp {
				return up, false, err
			}
			if up > 0 {
				return up - 1, false, nil
			}
		case *sNot:
			up, done, err := m.block(fr, s.body)
			if err != nil || up == retUp {
				return up, false, err
			}
			if up > 0 {
				return up - 1, false, nil
			}
			if done {
				return 0, false, nil
			}
		case *sReturn:
			m.ret = fr[s.src]
			return retUp, false, nil
		case *sMakeNull:
			fr[s.target] = ast.InternedNullTerm
		case *sMakeConst:
			fr[s.target] = s.value
		case *sAssignInt:
			fr[s.target] = s.value
		case *sMakeArray:
			fr[s.target] = ast.NewTerm(ast.NewArrayWithCapacity(s.capacity))
		case *sMakeObject:
			fr[s.target] = ast.NewTerm(ast.NewObject())
		case *sMakeSet:
			fr[s.target] = ast.NewTerm(ast.NewSet())
		case *sMakeObjectOf:
			if !m.makeObjectOf(fr, s) {
				return 0, false, nil
			}
		case *sMakeArrayOf:
			if !m.makeArrayOf(fr, s) {
				return 0, false, nil
			}
		case *sAppend:
			v, arr := m.val(fr, s.value), fr[s.array]
			if v == nil || arr == nil {
				return 0, false, nil
			}
			a, ok := arr.Value.(*ast.Array)
			if !ok {
				return 0, false, fmt.Errorf("planned evaluator: append to %s", ast.ValueName(arr.Value))
			}
			// In place, as the plan expects: the array is the one its
			// MakeArrayStmt made for this evaluation.
			*a = *a.Append(v)
		case *sInsert:
			k, v, obj := m.val(fr, s.key), m.val(fr, s.value), fr[s.object]
			if k == nil || v == nil || obj == nil {
				return 0, false, nil
			}
			o, ok := obj.Value.(ast.Object)
			if !ok {
				return 0, false, fmt.Errorf("planned evaluator: insert into %s", ast.ValueName(obj.Value))
			}
			o.Insert(k, v)
		case *sInsertOnce:
			k, v, obj := m.val(fr, s.key), m.val(fr, s.value), fr[s.object]
			if k == nil || v == nil || obj == nil {
				return 0, false, nil
			}
			o, ok := obj.Value.(ast.Object)
			if !ok {
				return 0, false, fmt.Errorf("planned evaluator: insert into %s", ast.ValueName(obj.Value))
			}
			if old := o.Get(k); old != nil {
				if !ast.ValueEqual(old.Value, v.Value) {
					return 0, false, &topdown.Error{Code: topdown.ConflictErr, Location: s.loc, Message: "object keys must be unique"}
				}
				continue
			}
			o.Insert(k, v)
		case *sSetAdd:
			v, set := m.val(fr, s.value), fr[s.set]
			if v == nil || set == nil {
				return 0, false, nil
			}
			st, ok := set.Value.(ast.Set)
			if !ok {
				return 0, false, fmt.Errorf("planned evaluator: add to %s", ast.ValueName(set.Value))
			}
			st.Add(v)
		case *sIsArray:
			if v := m.val(fr, s.src); v == nil || !isArray(v.Value) {
				return 0, false, nil
			}
		case *sIsObject:
			if v := m.val(fr, s.src); v == nil || !isObject(v.Value) {
				return 0, false, nil
			}
		case *sIsSet:
			if v := m.val(fr, s.src); v == nil || !isSet(v.Value) {
				return 0, false, nil
			}
		case *sLen:
			v := m.val(fr, s.src)
			if v == nil {
				return 0, false, nil
			}
			n, ok := length(v.Value)
			if !ok {
				return 0, false, nil
			}
			fr[s.target] = ast.InternedTerm(n)
		case *sResultAdd:
			if v := fr[s.src]; v != nil {
				m.results = append(m.results, v)
			}
		case *sNop:
		default:
			return 0, false, fmt.Errorf("planned evaluator: statement %T", s)
		}
	}
	return 0, true, nil
}

// scan runs s's body for each element of its source; a scalar or an empty
// collection runs it never.
func (m *machine) scan(fr []*ast.Term, s *sScan) (int, error) {
	src := fr[s.src]
	if src == nil {
		return 0, nil
	}
	if c, ok := src.Value.(*ast.Array); ok {
		for i := range c.Len() {
			if m.steps++; m.steps&1023 == 0 {
				if err := m.ctx.Err(); err != nil {
					return 0, err
				}
			}
			fr[s.key], fr[s.value] = ast.InternedTerm(i), c.Elem(i)
			up, _, err := m.block(fr, s.body)
			if err != nil || up > 0 {
				return up, err
			}
		}
		return 0, nil
	}
	if m.depth == len(m.scans) {
		st := &scanState{m: m}
		st.objFn = st.visit
		st.setFn = func(x *ast.Term) bool { return st.visit(x, x) }
		m.scans = append(m.scans, st)
	}
	st := m.scans[m.depth]
	m.depth++
	st.fr, st.s, st.up, st.err = fr, s, 0, nil
	switch c := src.Value.(type) {
	case ast.Object:
		c.Until(st.objFn)
	case ast.Set:
		c.Until(st.setFn)
	}
	m.depth--
	up, err := st.up, st.err
	st.fr, st.s, st.err = nil, nil, nil
	return up, err
}

func (m *machine) builtin(fr []*ast.Term, s *sCallBuiltin) (*ast.Term, error) {
	base, ok := m.pushArgs(fr, s.args, false)
	if !ok {
		return nil, nil
	}
	if s.glob {
		if v, ok := m.globMatch(m.args[base:]); ok {
			m.popArgs(base)
			return v, nil
		}
	}
	if s.time && m.bctx.Time == nil {
		m.bctx.Time = ast.NewTerm(ast.Number(strconv.FormatInt(m.now.UnixNano(), 10)))
	}
	if s.cache && m.bctx.Cache == nil {
		m.bctx.Cache = builtins.Cache{}
	}
	m.bctx.Location = s.loc
	m.out = nil
	err := s.f(m.bctx, m.args[base:len(m.args):len(m.args)], m.outFn)
	out := m.out
	m.out = nil
	m.popArgs(base)
	if err != nil {
		var halt topdown.Halt
		if errors.As(err, &halt) {
			err = halt.Err
		}
		return nil, err
	}
	return out, nil
}

// pushArgs pushes the values of a call's operands and returns where they
// start; ok is false, and nothing is pushed, when one is undefined, but
// for the first when it is the callee's input (input).
func (m *machine) pushArgs(fr []*ast.Term, args []operand, input bool) (base int, ok bool) {
	base = len(m.args)
	for i, a := range args {
		x := m.val(fr, a)
		if x == nil && (i != 0 || !input) {
			m.popArgs(base)
			return base, false
		}
		m.args = append(m.args, x)
	}
	return base, true
}

// popArgs drops the call operands above base.
func (m *machine) popArgs(base int) {
	clear(m.args[base:])
	m.args = m.args[:base]
}
