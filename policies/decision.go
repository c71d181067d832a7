package policies

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// parseDecision reads the decision document on a proposal of the given
// kind. A user rule that breaks its shape is an error, never a silent
// pass.
func parseDecision(v ast.Value, kind gated.Kind) (engine.PolicyDecision, error) {
	var d engine.PolicyDecision
	obj, ok := v.(ast.Object)
	if !ok {
		return d, fmt.Errorf("decision is %s, want an object", ast.ValueName(v))
	}
	denies := obj.Get(keyTerm("deny"))
	if denies == nil {
		return d, fmt.Errorf("decision.deny is missing, want an array or set of {\"rule\", \"message\"}")
	}
	var derr error
	err := each(denies.Value, "decision.deny", func(i int, x *ast.Term) {
		m, ok := x.Value.(ast.Object)
		var rule, msg ast.String
		var rok, mok bool
		if ok {
			rule, rok = valueOf[ast.String](m, "rule")
			msg, mok = valueOf[ast.String](m, "message")
		}
		if derr == nil && (!ok || !rok || !mok || rule == "") {
			derr = fmt.Errorf("decision.deny[%d] must be {\"rule\": string, \"message\": string}, got %v", i, x)
			return
		}
		d.Denies = append(d.Denies, gated.Deny{Rule: string(rule), Message: string(msg)})
	})
	if err != nil {
		return d, err
	}
	if derr != nil {
		return d, derr
	}
	reviewTerm := obj.Get(keyTerm("review"))
	if reviewTerm == nil {
		return d, fmt.Errorf("decision.review is missing, want an object")
	}
	review, ok := reviewTerm.Value.(ast.Object)
	if !ok {
		return d, fmt.Errorf("decision.review is %s, want an object", ast.ValueName(reviewTerm.Value))
	}
	required, ok := valueOf[ast.Boolean](review, "required")
	if !ok {
		return d, fmt.Errorf("decision.review.required must be a boolean")
	}
	d.Review.Required = bool(required)
	persona, err := optional[ast.String](review, "persona", "decision.review.persona")
	if err != nil {
		return d, err
	}
	d.Review.Persona = string(persona)
	why, err := optional[ast.String](review, "why", "decision.review.why")
	if err != nil {
		return d, err
	}
	d.Review.Why = string(why)
	rule, err := optional[ast.String](review, "rule", "decision.review.rule")
	if err != nil {
		return d, err
	}
	d.Review.Rule = string(rule)
	blocked, err := optional[ast.String](review, "blocked", "decision.review.blocked")
	if err != nil {
		return d, err
	}
	if blocked != "" && !required {
		return d, fmt.Errorf("decision.review.blocked is set but decision.review.required is false: only a required review can be blocked")
	}
	d.Review.Blocked = string(blocked)
	if q := review.Get(keyTerm("quorum")); q != nil {
		num, isNum := q.Value.(ast.Number)
		n, isInt := num.Int()
		if !isNum || !isInt || n < 0 || n > 16 {
			return d, fmt.Errorf("decision.review.quorum %v must be an integer between 0 and 16", q)
		}
		d.Review.Quorum = n
	}
	if required && d.Review.Quorum < 1 {
		d.Review.Quorum = 1
	}
	// personas: further reviewers for a quorum, best first. An array keeps
	// the policy's order; a set arrives sorted.
	if d.Review.Personas, err = stringList(review, "personas", "decision.review.personas"); err != nil {
		return d, err
	}
	if d.Review.Also, err = stringList(review, "also", "decision.review.also"); err != nil {
		return d, err
	}
	if len(d.Review.Also) > 0 && !required {
		return d, fmt.Errorf("decision.review.also is set but decision.review.required is false: only a required review has reviewers")
	}
	if d.ReviewerTools, err = stringList(obj, "reviewer_tools", "decision.reviewer_tools"); err != nil {
		return d, err
	}
	if d.DeniedTools, err = stringList(obj, "denied_tools", "decision.denied_tools"); err != nil {
		return d, err
	}
	skipped, err := optional[ast.Boolean](obj, "skipped", "decision.skipped")
	if err != nil {
		return d, err
	}
	d.Skipped = bool(skipped)
	if sopTerm := obj.Get(keyTerm("sop")); sopTerm != nil {
		switch sop := sopTerm.Value.(type) {
		case ast.Null:
		case ast.Object:
			s := &gated.SOP{}
			id, _ := valueOf[ast.String](sop, "id")
			title, _ := valueOf[ast.String](sop, "title")
			rollback, _ := valueOf[ast.String](sop, "rollback")
			s.ID, s.Title, s.Rollback = string(id), string(title), string(rollback)
			s.Actions, _ = stringList(sop, "actions", "decision.sop.actions")
			s.Steps, _ = stringList(sop, "steps", "decision.sop.steps")
			if s.ID == "" {
				return d, fmt.Errorf("decision.sop has no id")
			}
			d.SOP = s
		default:
			return d, fmt.Errorf("decision.sop is %s, want an object or null", ast.ValueName(sopTerm.Value))
		}
	}
	if d.Run, err = parseRun(obj.Get(keyTerm("run")), kind); err != nil {
		return d, err
	}
	if d.Holds, err = parseHolds(obj.Get(keyTerm("hold"))); err != nil {
		return d, err
	}
	if len(d.Holds) > 0 && kind == gated.KindRun {
		return d, fmt.Errorf("decision.hold has %d entries for a proposal of kind run: a run is held for an operator by its manual criteria (decision.run.manual), not by decision.hold", len(d.Holds))
	}
	if d.Run != nil && d.Run.Reviewed != d.Review.Required {
		return d, fmt.Errorf("decision.run.reviewed is %v but decision.review.required is %v: a run is reviewed exactly when its review is required", d.Run.Reviewed, d.Review.Required)
	}
	return d, nil
}

// maxHoldDeadline bounds a hold's deadline: a hold is for a person to
// answer, not a queue to forget.
const maxHoldDeadline = 30 * 24 * time.Hour

// parseHolds reads decision.hold: absent, null, or an array or set of
// {"rule": string, "why": string, "deadline": duration string}; rule is
// required, deadline optional ("" is none).
func parseHolds(t *ast.Term) ([]gated.Hold, error) {
	if t == nil {
		return nil, nil
	}
	if _, isNull := t.Value.(ast.Null); isNull {
		return nil, nil
	}
	var out []gated.Hold
	var herr error
	err := each(t.Value, "decision.hold", func(i int, x *ast.Term) {
		if herr != nil {
			return
		}
		h, err := parseHold(x)
		if err != nil {
			herr = fmt.Errorf("decision.hold[%d]: %w", i, err)
			return
		}
		out = append(out, h)
	})
	if err != nil {
		return nil, err
	}
	return out, herr
}

func parseHold(x *ast.Term) (gated.Hold, error) {
	var h gated.Hold
	m, ok := x.Value.(ast.Object)
	if !ok {
		return h, fmt.Errorf("%s, want {\"rule\": string, \"why\": string, \"deadline\": duration}", ast.ValueName(x.Value))
	}
	for _, k := range m.Keys() {
		switch k.Value {
		case ast.String("rule"), ast.String("why"), ast.String("deadline"):
		default:
			return h, fmt.Errorf("unknown key %v: a hold has rule, why and deadline", k)
		}
	}
	rule, ok := valueOf[ast.String](m, "rule")
	if !ok || rule == "" {
		return h, fmt.Errorf("rule must be a non-empty string, got %v", x)
	}
	why, err := optional[ast.String](m, "why", "why")
	if err != nil {
		return h, err
	}
	deadline, err := optional[ast.String](m, "deadline", "deadline")
	if err != nil {
		return h, err
	}
	h.Rule, h.Why = string(rule), string(why)
	if deadline != "" {
		d, err := time.ParseDuration(string(deadline))
		if err != nil || d <= 0 || d > maxHoldDeadline {
			return h, fmt.Errorf("deadline %q must be a duration such as \"30m\", above zero and at most %s", string(deadline), maxHoldDeadline)
		}
		h.Deadline = d
	}
	return h, nil
}

// maxRunRounds bounds decision.run.max_rounds, as config_errors bounds
// run_review.max_rounds.
const maxRunRounds = 100

// reviewPolicies are the values of decision.run.review_policy.
var reviewPolicies = []string{"none", "on_success", "on_failure", "always"}

// parseRun reads decision.run: null or absent for an action, an object
// for a run. Limits left out or zero take their defaults.
func parseRun(t *ast.Term, kind gated.Kind) (*gated.RunPolicy, error) {
	if kind != gated.KindRun {
		if t == nil {
			return nil, nil
		}
		if _, isNull := t.Value.(ast.Null); !isNull {
			return nil, fmt.Errorf("decision.run is %s, want null for a proposal of kind %s", ast.ValueName(t.Value), kindName(kind))
		}
		return nil, nil
	}
	if t == nil {
		return nil, fmt.Errorf("decision.run is missing: a proposal of kind run needs the policy's run section (see run reviews in docs/POLICIES.md)")
	}
	obj, ok := t.Value.(ast.Object)
	if !ok {
		return nil, fmt.Errorf("decision.run is %s, want an object for a proposal of kind run", ast.ValueName(t.Value))
	}
	run := &gated.RunPolicy{MaxRounds: engine.DefaultMaxRounds}
	reviewed, ok := valueOf[ast.Boolean](obj, "reviewed")
	if !ok {
		return nil, fmt.Errorf("decision.run.reviewed must be a boolean")
	}
	run.Reviewed = bool(reviewed)
	why, err := optional[ast.String](obj, "why", "decision.run.why")
	if err != nil {
		return nil, err
	}
	run.Why = string(why)
	policy, err := optional[ast.String](obj, "review_policy", "decision.run.review_policy")
	if err != nil {
		return nil, err
	}
	if policy != "" && !slices.Contains(reviewPolicies, string(policy)) {
		return nil, fmt.Errorf("decision.run.review_policy %q must be one of %s", string(policy), strings.Join(reviewPolicies, ", "))
	}
	run.ReviewPolicy = string(policy)
	if n, present, err := intField(obj, "max_rounds", "decision.run.max_rounds", 1, maxRunRounds); err != nil {
		return nil, err
	} else if present {
		run.MaxRounds = n
	}
	if run.Criteria, err = parseCriteria(obj); err != nil {
		return nil, err
	}
	if run.MissingWork, err = stringList(obj, "missing_work", "decision.run.missing_work"); err != nil {
		return nil, err
	}
	if run.Manual, err = stringList(obj, "manual", "decision.run.manual"); err != nil {
		return nil, err
	}
	continuable, err := optional[ast.Boolean](obj, "continuable", "decision.run.continuable")
	if err != nil {
		return nil, err
	}
	run.Continuable = bool(continuable)
	if run.Limits, err = parseLimits(obj.Get(keyTerm("limits"))); err != nil {
		return nil, err
	}
	accepted, err := optional[ast.String](obj, "accepted_status", "decision.run.accepted_status")
	if err != nil {
		return nil, err
	}
	if accepted != "" && accepted != gated.RunFailed && accepted != gated.RunCanceled {
		return nil, fmt.Errorf("decision.run.accepted_status %q must be empty, %s or %s", string(accepted), gated.RunFailed, gated.RunCanceled)
	}
	run.AcceptedStatus = string(accepted)
	return run, nil
}

func kindName(k gated.Kind) string {
	if k == "" {
		return string(gated.KindAction)
	}
	return string(k)
}

// intField reads an optional integer from lo to hi.
func intField(obj ast.Object, key, name string, lo, hi int) (n int, present bool, err error) {
	t := obj.Get(keyTerm(key))
	if t == nil {
		return 0, false, nil
	}
	num, isNum := t.Value.(ast.Number)
	n, isInt := num.Int()
	if !isNum || !isInt || n < lo || n > hi {
		return 0, false, fmt.Errorf("%s %v must be an integer from %d to %d", name, t, lo, hi)
	}
	return n, true, nil
}

// parseCriteria reads decision.run.criteria: the policy's judgements, each
// {id, pass, reason, kind, required, judged_by: "policy"}.
func parseCriteria(obj ast.Object) ([]gated.CriterionEval, error) {
	t := obj.Get(keyTerm("criteria"))
	if t == nil {
		return nil, nil
	}
	if _, isNull := t.Value.(ast.Null); isNull {
		return nil, nil
	}
	var out []gated.CriterionEval
	var cerr error
	seen := map[string]bool{}
	err := each(t.Value, "decision.run.criteria", func(i int, x *ast.Term) {
		if cerr != nil {
			return
		}
		c, err := parseCriterion(x)
		switch {
		case err != nil:
			cerr = fmt.Errorf("decision.run.criteria[%d]: %w", i, err)
		case seen[c.ID]:
			cerr = fmt.Errorf("decision.run.criteria[%d]: criterion %q is judged twice", i, c.ID)
		default:
			seen[c.ID] = true
			out = append(out, c)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, cerr
}

func parseCriterion(x *ast.Term) (gated.CriterionEval, error) {
	var c gated.CriterionEval
	m, ok := x.Value.(ast.Object)
	if !ok {
		return c, fmt.Errorf("%s, want {\"id\": string, \"pass\": boolean, ...}", ast.ValueName(x.Value))
	}
	id, ok := valueOf[ast.String](m, "id")
	if !ok || id == "" {
		return c, fmt.Errorf("id must be a non-empty string, got %v", x)
	}
	pass, ok := valueOf[ast.Boolean](m, "pass")
	if !ok {
		return c, fmt.Errorf("criterion %q: pass must be a boolean", string(id))
	}
	name := fmt.Sprintf("criterion %q: ", string(id))
	reason, err := optional[ast.String](m, "reason", name+"reason")
	if err != nil {
		return c, err
	}
	kind, err := optional[ast.String](m, "kind", name+"kind")
	if err != nil {
		return c, err
	}
	required, err := optional[ast.Boolean](m, "required", name+"required")
	if err != nil {
		return c, err
	}
	judge, err := optional[ast.String](m, "judged_by", name+"judged_by")
	if err != nil {
		return c, err
	}
	if judge != "" && judge != gated.JudgedByPolicy {
		return c, fmt.Errorf("criterion %q: judged_by %q: the policy judges criteria as %q", string(id), string(judge), gated.JudgedByPolicy)
	}
	return gated.CriterionEval{
		ID: string(id), Pass: bool(pass), Reason: string(reason), Kind: string(kind),
		Required: bool(required), JudgedBy: gated.JudgedByPolicy,
	}, nil
}

// parseLimits reads decision.run.limits; a limit left out or zero takes
// its default, and none exceeds its ceiling (gated.RunLimits.WithDefaults).
func parseLimits(t *ast.Term) (gated.RunLimits, error) {
	var l gated.RunLimits
	if t == nil {
		return l.WithDefaults(), nil
	}
	if _, isNull := t.Value.(ast.Null); isNull {
		return l.WithDefaults(), nil
	}
	obj, ok := t.Value.(ast.Object)
	if !ok {
		return l, fmt.Errorf("decision.run.limits is %s, want an object", ast.ValueName(t.Value))
	}
	fields := []struct {
		key  string
		into *int
	}{{"max_items", &l.MaxItems}, {"max_item_bytes", &l.MaxItemBytes}, {"max_guidance_bytes", &l.MaxGuidanceBytes}}
	for _, k := range obj.Keys() {
		switch k.Value {
		case ast.String("max_items"), ast.String("max_item_bytes"), ast.String("max_guidance_bytes"):
		default:
			return l, fmt.Errorf("decision.run.limits has an unknown key %v: want max_items, max_item_bytes, max_guidance_bytes", k)
		}
	}
	for _, f := range fields {
		n, _, err := intField(obj, f.key, "decision.run.limits."+f.key, 0, math.MaxInt32)
		if err != nil {
			return l, err
		}
		*f.into = n
	}
	return l.WithDefaults(), nil
}

// each calls f for every element of an array or set.
func each(v ast.Value, name string, f func(int, *ast.Term)) error {
	switch c := v.(type) {
	case *ast.Array:
		for i := range c.Len() {
			f(i, c.Elem(i))
		}
	case ast.Set:
		for i, t := range c.Slice() {
			f(i, t)
		}
	default:
		return fmt.Errorf("%s is %s, want an array or a set", name, ast.ValueName(v))
	}
	return nil
}

// stringList reads an optional array or set of strings; name is the
// field's path for the error.
func stringList(obj ast.Object, key, name string) ([]string, error) {
	t := obj.Get(keyTerm(key))
	if t == nil {
		return nil, nil
	}
	if _, isNull := t.Value.(ast.Null); isNull {
		return nil, nil
	}
	var out []string
	bad := false
	err := each(t.Value, name, func(_ int, x *ast.Term) {
		s, ok := x.Value.(ast.String)
		if !ok {
			bad = true
			return
		}
		out = append(out, string(s))
	})
	if err != nil || bad {
		return nil, fmt.Errorf("%s must be an array of strings, got %v", name, t)
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}

// valueOf reads key from obj as a T.
func valueOf[T ast.Value](obj ast.Object, key string) (T, bool) {
	var zero T
	t := obj.Get(keyTerm(key))
	if t == nil {
		return zero, false
	}
	v, ok := t.Value.(T)
	return v, ok
}

// optional reads key from obj: absent or null gives the zero value; any
// other type than T is an error naming the field.
func optional[T ast.Value](obj ast.Object, key, name string) (T, error) {
	var zero T
	t := obj.Get(keyTerm(key))
	if t == nil {
		return zero, nil
	}
	if _, isNull := t.Value.(ast.Null); isNull {
		return zero, nil
	}
	v, ok := t.Value.(T)
	if !ok {
		return zero, fmt.Errorf("%s is %s, want %s", name, ast.ValueName(t.Value), ast.ValueName(zero))
	}
	return v, nil
}
