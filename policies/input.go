package policies

import (
	"encoding/json"
	"fmt"
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
		item("now_ns", ast.Number(fmt.Sprint(now.UnixNano()))),
	)
}

func item(k string, v ast.Value) [2]*ast.Term {
	return ast.Item(ast.StringTerm(k), ast.NewTerm(v))
}

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
			item("status", str(p.Run.Status)), item("round", ast.Number(fmt.Sprint(p.Run.Round))),
			item("worker", str(p.Run.Worker)),
		)
	}
	created := ast.Value(ast.Null{})
	if p.CreatedAt != nil {
		created = str(p.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	return ast.NewObject(
		item("v", ast.Number(fmt.Sprint(p.V))),
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
		item("max_turns", ast.Number(fmt.Sprint(p.MaxTurns))),
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
		item("decided_at_ns", ast.Number(fmt.Sprint(v.DecidedAt.UnixNano()))),
	)
}

// parseDecision reads the decision document. A user rule that breaks its
// shape is an error, never a silent pass.
func parseDecision(v any) (engine.PolicyDecision, error) {
	var d engine.PolicyDecision
	obj, ok := v.(map[string]any)
	if !ok {
		return d, fmt.Errorf("decision is %T, want an object", v)
	}
	denies, ok := obj["deny"].([]any)
	if !ok {
		return d, fmt.Errorf("decision.deny is %T, want an array", obj["deny"])
	}
	for i, raw := range denies {
		m, ok := raw.(map[string]any)
		rule, rok := m["rule"].(string)
		msg, mok := m["message"].(string)
		if !ok || !rok || !mok || rule == "" {
			return d, fmt.Errorf("decision.deny[%d] must be {\"rule\": string, \"message\": string}, got %v", i, raw)
		}
		d.Denies = append(d.Denies, engine.Deny{Rule: rule, Message: msg})
	}
	review, ok := obj["review"].(map[string]any)
	if !ok {
		return d, fmt.Errorf("decision.review is %T, want an object", obj["review"])
	}
	required, ok := review["required"].(bool)
	if !ok {
		return d, fmt.Errorf("decision.review.required is %T, want a boolean", review["required"])
	}
	d.Review.Required = required
	var err error
	if d.Review.Persona, err = optional[string](review, "persona", "decision.review.persona"); err != nil {
		return d, err
	}
	if d.Review.Why, err = optional[string](review, "why", "decision.review.why"); err != nil {
		return d, err
	}
	if raw, ok := review["quorum"]; ok {
		q, isNum := raw.(json.Number)
		n, nerr := q.Int64()
		if !isNum || nerr != nil || n < 0 || n > 16 {
			return d, fmt.Errorf("decision.review.quorum %v must be an integer between 0 and 16", raw)
		}
		d.Review.Quorum = int(n)
	}
	if required && d.Review.Quorum < 1 {
		d.Review.Quorum = 1
	}
	if d.ReviewerTools, err = stringList(obj, "reviewer_tools"); err != nil {
		return d, err
	}
	if d.DeniedTools, err = stringList(obj, "denied_tools"); err != nil {
		return d, err
	}
	if d.Skipped, err = optional[bool](obj, "skipped", "decision.skipped"); err != nil {
		return d, err
	}
	if raw, present := obj["sop"]; present && raw != nil {
		sop, ok := raw.(map[string]any)
		if !ok {
			return d, fmt.Errorf("decision.sop is %T, want an object or null", raw)
		}
		s := &engine.SOP{}
		s.ID, _ = sop["id"].(string)
		s.Title, _ = sop["title"].(string)
		s.Rollback, _ = sop["rollback"].(string)
		s.Actions, _ = anyStrings(sop["actions"])
		s.Steps, _ = anyStrings(sop["steps"])
		if s.ID == "" {
			return d, fmt.Errorf("decision.sop has no id")
		}
		d.SOP = s
	}
	return d, nil
}

func stringList(obj map[string]any, key string) ([]string, error) {
	raw, present := obj[key]
	if !present || raw == nil {
		return nil, nil
	}
	out, ok := anyStrings(raw)
	if !ok {
		return nil, fmt.Errorf("decision.%s must be an array of strings, got %v", key, raw)
	}
	return out, nil
}

func anyStrings(raw any) ([]string, bool) {
	list, ok := raw.([]any)
	if !ok {
		return nil, raw == nil
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, ok := x.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// optional reads key from obj: absent or null gives the zero value; any
// other type than T is an error naming the field.
func optional[T any](obj map[string]any, key, name string) (T, error) {
	var zero T
	raw, present := obj[key]
	if !present || raw == nil {
		return zero, nil
	}
	v, ok := raw.(T)
	if !ok {
		return zero, fmt.Errorf("%s is %T, want %T", name, raw, zero)
	}
	return v, nil
}
