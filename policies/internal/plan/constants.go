package plan

import (
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
)

// A rule of data alone, such as a default setting or a set literal like
// baseline_denied_names, has the same value in every evaluation over the
// same data document: OPA's planner still lays it out as a function of
// input and data, which each evaluation would build anew. The machine
// computes such a function once per data document and keeps its value
// for the evaluations after.
//
// A function is of data alone when it never uses its input parameter,
// except to pass it on as the input of a callee that is itself of data
// alone, and neither it nor a callee reads the evaluation time. Input
// reaches a function only through that parameter, so a function that
// passes this check cannot see the input, whatever it computes. Its value
// is shared by later evaluations, so this is done only for a plan that
// changes no collection but one it has just made (literals.go): none
// changes a value another function returned.

// constValues are the values of the functions of data alone over one data
// document. Concurrent evaluations share it: each slot is written once
// (two evaluations that race compute the same value) and then only read.
type constValues struct {
	data *ast.Term
	// vals holds each function's value; a function that is undefined
	// over data holds undefined.
	vals []atomic.Pointer[ast.Term]
}

// undefined stands for a function that has no value over the data.
var undefined = ast.NewTerm(ast.Null{})

// constantsFor returns the values kept for data, starting them anew when
// data is another document than the one they were computed on.
func (pl *Plan) constantsFor(data *ast.Term) *constValues {
	if pl.consts == 0 {
		return nil
	}
	cv := pl.values.Load()
	if cv != nil && cv.data == data {
		return cv
	}
	fresh := &constValues{data: data, vals: make([]atomic.Pointer[ast.Term], pl.consts)}
	pl.values.CompareAndSwap(cv, fresh)
	return fresh
}

// markConstants sets the shared index of every function of data alone
// and returns how many there are.
func markConstants(funcs []*pfunc) int {
	const (
		unknown = iota
		visiting
		inputFree
		dependent
	)
	state := make(map[*pfunc]int, len(funcs))
	var check func(f *pfunc) bool
	check = func(f *pfunc) bool {
		switch state[f] {
		case inputFree:
			return true
		case dependent, visiting:
			// Rego has no recursion; a cycle is taken as dependent.
			return false
		}
		state[f] = visiting
		free := len(f.params) >= 2 && usesInputOnlyToPass(f, f.params[0], check)
		state[f] = dependent
		if free {
			state[f] = inputFree
		}
		return free
	}
	n := 0
	for _, f := range funcs {
		// A function of input and data alone (a rule, not a user function
		// with arguments) whose body cannot see the input.
		if len(f.params) == 2 && check(f) {
			f.shared = n
			n++
		}
	}
	return n
}

// usesInputOnlyToPass reports whether f's blocks use local in only as
// the first argument of calls to functions that check accepts, and call
// no built-in that reads the evaluation time.
func usesInputOnlyToPass(f *pfunc, in int, check func(*pfunc) bool) bool {
	ok := true
	uses := func(os ...operand) {
		for _, o := range os {
			if o.konst == nil && o.local == in {
				ok = false
			}
		}
	}
	local := func(ls ...int) {
		for _, l := range ls {
			if l == in {
				ok = false
			}
		}
	}
	var walk func(b *pblock)
	walk = func(b *pblock) {
		for _, s := range b.stmts {
			if !ok {
				return
			}
			switch s := s.(type) {
			case *sReturn:
				local(s.src)
			case *sCallFunc:
				for i, a := range s.args {
					if a.konst == nil && a.local == in && (i != 0 || len(s.fn.params) < 2) {
						ok = false
					}
				}
				if ok && !check(s.fn) {
					ok = false
				}
			case *sCallBuiltin:
				uses(s.args...)
				if s.time {
					ok = false
				}
			case *sBlock:
				for _, sub := range s.blocks {
					walk(sub)
				}
			case *sBreak, *sReset, *sMakeNull, *sMakeConst, *sAssignInt,
				*sMakeArray, *sMakeObject, *sMakeSet, *sNop:
			case *sDot:
				uses(s.src, s.key)
			case *sLen:
				uses(s.src)
			case *sScan:
				local(s.src)
				walk(s.body)
			case *sNot:
				walk(s.body)
			case *sAssign:
				uses(s.src)
			case *sAssignOnce:
				uses(s.src)
			case *sEqual:
				uses(s.a, s.b)
			case *sNotEqual:
				uses(s.a, s.b)
			case *sIsArray:
				uses(s.src)
			case *sIsObject:
				uses(s.src)
			case *sIsSet:
				uses(s.src)
			case *sIsDefined:
				local(s.src)
			case *sIsUndefined:
				local(s.src)
			case *sAppend:
				uses(s.value)
			case *sMakeObjectOf:
				uses(s.values...)
			case *sMakeArrayOf:
				uses(s.values...)
			case *sInsert:
				uses(s.key, s.value)
			case *sInsertOnce:
				uses(s.key, s.value)
			case *sSetAdd:
				uses(s.value)
			case *sResultAdd:
				local(s.src)
			default:
				// A statement this check does not know keeps the function
				// out of the cache.
				ok = false
			}
		}
	}
	for _, b := range f.blocks {
		walk(b)
	}
	return ok
}
