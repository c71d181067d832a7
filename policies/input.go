package policies

import (
	"fmt"
	"strconv"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/gated/gated/engine"
)

// InputValue builds the policy input {proposal, persona, history, now}
// directly as an ast.Value: no JSON round trip on the hot path. Every
// proposal field is present (empty values where the proposal left them
// out) so rules need no existence checks.
func InputValue(in engine.PolicyInput) ast.Value {
	now := in.Now
	if now.IsZero() {
		now = time.Now()
	}
	history := make([]*ast.Term, 0, len(in.History))
	for i := range in.History {
		history = append(history, ast.NewTerm(verdictValue(&in.History[i])))
	}
	return ast.NewObject(
		item("proposal", proposalValue(in.Proposal)),
		item("persona", personaValue(in.Persona)),
		item("history", ast.NewArray(history...)),
		item("now", ast.String(now.UTC().Format(time.RFC3339Nano))),
		item("now_ns", integer(now.UnixNano())),
	)
}

// keyTerms are the input's object keys, built once.
var keyTerms = func() map[string]*ast.Term {
	m := map[string]*ast.Term{}
	for _, k := range []string{
		"proposal", "persona", "history", "now", "now_ns",
		"v", "id", "tenant", "kind", "action", "class", "target", "reason", "blast_radius",
		"operator", "requested_by", "incident_id", "flags", "reviewer", "criteria", "run", "created_at",
		"roles", "agent", "session", "skip_review", "force_approve", "force_approve_no_sop", "user_confirmed",
		"description", "required", "params", "run_id", "task_id", "status", "round", "worker",
		"name", "model", "max_turns", "permission_mode", "tools", "disallowed_tools", "required_gates", "plugin",
		"proposal_id", "outcome", "stage", "decided_at", "decided_at_ns",
	} {
		m[k] = ast.StringTerm(k)
	}
	return m
}()

func item(k string, v ast.Value) [2]*ast.Term {
	key, ok := keyTerms[k]
	if !ok {
		key = ast.StringTerm(k)
	}
	return [2]*ast.Term{key, ast.NewTerm(v)}
}

func integer[T int | int64](n T) ast.Value { return ast.Number(strconv.FormatInt(int64(n), 10)) }

func str(s string) ast.Value { return ast.String(s) }

func strs(ss []string) ast.Value {
	terms := make([]*ast.Term, len(ss))
	for i, s := range ss {
		terms[i] = ast.StringTerm(s)
	}
	return ast.NewArray(terms...)
}

func generic(v any) ast.Value {
	if v == nil {
		return ast.NewObject()
	}
	val, err := ast.InterfaceToValue(v)
	if err != nil {
		// The values came from encoding/json and always convert; a failure
		// here is a bug, and an empty object keeps the policy conservative.
		return ast.NewObject()
	}
	return val
}

func proposalValue(p *engine.Proposal) ast.Value {
	if p == nil {
		return ast.Null{}
	}
	op := ast.Value(ast.Null{})
	if p.Operator != nil {
		op = ast.NewObject(item("id", str(p.Operator.ID)), item("roles", strs(p.Operator.Roles)))
	}
	by := ast.Value(ast.Null{})
	if p.RequestedBy != nil {
		by = ast.NewObject(item("agent", str(p.RequestedBy.Agent)), item("session", str(p.RequestedBy.Session)))
	}
	criteria := make([]*ast.Term, len(p.Criteria))
	for i, c := range p.Criteria {
		criteria[i] = ast.NewTerm(ast.NewObject(
			item("id", str(c.ID)), item("description", str(c.Description)),
			item("required", ast.Boolean(c.Required)), item("kind", str(c.Kind)),
			item("params", generic(c.Params)),
		))
	}
	run := ast.Value(ast.Null{})
	if p.Run != nil {
		run = ast.NewObject(
			item("run_id", str(p.Run.RunID)), item("task_id", str(p.Run.TaskID)),
			item("status", str(p.Run.Status)), item("round", integer(p.Run.Round)),
			item("worker", str(p.Run.Worker)),
		)
	}
	created := ast.Value(ast.Null{})
	if p.CreatedAt != nil {
		created = str(p.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	return ast.NewObject(
		item("v", integer(p.V)),
		item("id", str(p.ID)),
		item("tenant", str(p.Tenant)),
		item("kind", str(string(p.Kind))),
		item("action", str(p.Action)),
		item("class", str(string(p.Class))),
		item("target", generic(p.Target)),
		item("reason", str(p.Reason)),
		item("blast_radius", str(string(p.BlastRadius))),
		item("operator", op),
		item("requested_by", by),
		item("incident_id", str(p.IncidentID)),
		item("flags", ast.NewObject(
			item("skip_review", ast.Boolean(p.Flags.SkipReview)),
			item("force_approve", ast.Boolean(p.Flags.ForceApprove)),
			item("force_approve_no_sop", ast.Boolean(p.Flags.ForceApproveNoSOP)),
			item("user_confirmed", ast.Boolean(p.Flags.UserConfirmed)),
		)),
		item("reviewer", str(p.Reviewer)),
		item("criteria", ast.NewArray(criteria...)),
		item("run", run),
		item("created_at", created),
	)
}

func personaValue(p *engine.Persona) ast.Value {
	if p == nil {
		return ast.Null{}
	}
	return ast.NewObject(
		item("name", str(p.Name)),
		item("description", str(p.Description)),
		item("model", str(p.Model)),
		item("max_turns", integer(p.MaxTurns)),
		item("permission_mode", str(p.PermissionMode)),
		item("tools", strs(p.Tools)),
		item("disallowed_tools", strs(p.DisallowedTools)),
		item("required_gates", strs(p.RequiredGates)),
		item("plugin", str(p.Plugin)),
	)
}

func verdictValue(v *engine.Verdict) ast.Value {
	return ast.NewObject(
		item("proposal_id", str(v.ProposalID)),
		item("tenant", str(v.Tenant)),
		item("action", str(v.Action)),
		item("outcome", str(string(v.Outcome))),
		item("stage", str(string(v.Stage))),
		item("decided_at", str(v.DecidedAt.UTC().Format(time.RFC3339Nano))),
		item("decided_at_ns", integer(v.DecidedAt.UnixNano())),
		item("agent", str(v.Agent)),
	)
}

// parseDecision reads the decision document. A user rule that breaks its
// shape is an error, never a silent pass.
func parseDecision(v ast.Value) (engine.PolicyDecision, error) {
	var d engine.PolicyDecision
	obj, ok := v.(ast.Object)
	if !ok {
		return d, fmt.Errorf("decision is %s, want an object", ast.ValueName(v))
	}
	denies := obj.Get(ast.InternedTerm("deny"))
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
		d.Denies = append(d.Denies, engine.Deny{Rule: string(rule), Message: string(msg)})
	})
	if err != nil {
		return d, err
	}
	if derr != nil {
		return d, derr
	}
	reviewTerm := obj.Get(ast.InternedTerm("review"))
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
	if q := review.Get(ast.InternedTerm("quorum")); q != nil {
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
	if sopTerm := obj.Get(ast.InternedTerm("sop")); sopTerm != nil {
		switch sop := sopTerm.Value.(type) {
		case ast.Null:
		case ast.Object:
			s := &engine.SOP{}
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
	return d, nil
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
	t := obj.Get(ast.InternedTerm(key))
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
	t := obj.Get(ast.InternedTerm(key))
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
	t := obj.Get(ast.InternedTerm(key))
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
