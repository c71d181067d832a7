package policies

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/gated/gated/engine"
)

// Fired is a rule whose body succeeded during an evaluation.
type Fired struct {
	// Rule is the rule's reference, e.g. data.gated.deny.
	Rule string `json:"rule"`
	// Location is file:line of the rule.
	Location string `json:"location"`
	// Default is true for a rule's default value.
	Default bool `json:"default,omitempty"`
}

// Explain evaluates like Evaluate and also reports every rule that fired,
// in evaluation order without repeats. It is slower than Evaluate: it
// traces the evaluation.
//
// When the planned evaluator decides this bundle, Explain also asks it and
// fails with ErrEvaluatorsDisagree unless both decide alike.
func (e *Evaluator) Explain(ctx context.Context, in engine.PolicyInput) (engine.PolicyDecision, []Fired, error) {
	x, err := e.explain(ctx, in, false)
	return x.Decision, x.Fired, err
}

// Explanation is a decision with how both evaluators reached it.
type Explanation struct {
	// Decision is topdown's decision.
	Decision engine.PolicyDecision
	// Fired are the rules whose bodies succeeded in topdown's evaluation.
	Fired []Fired
	// Evaluator is the evaluator that decides this bundle's proposals
	// (EvaluatorPlanned or EvaluatorTopdown).
	Evaluator string
	// Planned are the rules the planned evaluator evaluated to a value, in
	// the order it first did, when it decides this bundle; nil otherwise.
	Planned []string
	// Trace is topdown's full trace of the evaluation, every step with its
	// file and line, as `opa eval --explain full` prints it.
	Trace string
}

// ExplainFull evaluates in on both evaluators, as Explain does, and also
// returns topdown's full trace and the rules the planned evaluator
// evaluated. It fails with ErrEvaluatorsDisagree unless both decide alike;
// the explanation holds what each found all the same.
func (e *Evaluator) ExplainFull(ctx context.Context, in engine.PolicyInput) (*Explanation, error) {
	return e.explain(ctx, in, true)
}

func (e *Evaluator) explain(ctx context.Context, in engine.PolicyInput, full bool) (*Explanation, error) {
	tracer := topdown.NewBufferTracer()
	if in.Now.IsZero() {
		in.Now = time.Now() // one time for both evaluators
	}
	x := &Explanation{Evaluator: e.planned.Evaluator}
	start := time.Now()
	v, err := e.evalTopdown(ctx, in, rego.EvalQueryTracer(tracer))
	if err == nil {
		x.Decision, err = e.decision(v, in, start)
	}
	if err == nil && e.plan != nil {
		var pv ast.Value
		var perr error
		if full {
			var t *ast.Term
			t, x.Planned, perr = e.plan.EvalFired(ctx, ast.NewTerm(InputValue(in)), e.data, in.Now)
			if perr == nil && t == nil {
				perr = fmt.Errorf("%s is undefined for this input", Query)
			}
			if t != nil {
				pv = t.Value
			}
		} else {
			pv, perr = e.evalPlan(ctx, in)
		}
		switch {
		case perr != nil:
			err = fmt.Errorf("%w: topdown decides, the planned evaluator fails: %w", ErrEvaluatorsDisagree, perr)
		case ast.Compare(pv, v) != 0:
			err = fmt.Errorf("%w:\n  topdown: %v\n  planned: %v", ErrEvaluatorsDisagree, v, pv)
		}
	}
	seen := map[string]bool{}
	for _, ev := range *tracer {
		rule, ok := ev.Node.(*ast.Rule)
		if !ok || ev.Op != topdown.ExitOp || rule.Location == nil {
			continue
		}
		f := Fired{Rule: rule.Head.Ref().String(), Location: fmt.Sprintf("%s:%d", rule.Location.File, rule.Location.Row), Default: rule.Default}
		if rule.Module != nil {
			f.Rule = rule.Path().String()
		}
		if key := f.Location; !seen[key] {
			seen[key] = true
			x.Fired = append(x.Fired, f)
		}
	}
	if full {
		var buf strings.Builder
		topdown.PrettyTraceWithLocation(&buf, *tracer)
		x.Trace = buf.String()
	}
	return x, err
}
