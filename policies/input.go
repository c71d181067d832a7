package policies

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/gated/gated/engine"
)

// InputValue builds the policy input {proposal, persona, history,
// run_record, now, now_ns} directly as an ast.Value: no JSON round trip on
// the hot path. Every proposal field is present (empty values where the
// proposal left them out) so rules need no existence checks; run_record is
// null unless the engine found a record of the proposal's run.
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
		[2]*ast.Term{keyTerms["persona"], personaTerm(in.Persona)},
		item("history", ast.NewArray(history...)),
		[2]*ast.Term{keyTerms["run_record"], runRecordTerm(in.RunRecord)},
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
		"operator", "requested_by", "incident_id", "context_summary", "flags", "reviewer", "criteria", "run", "created_at",
		"roles", "agent", "session", "skip_review", "force_approve", "force_approve_no_sop", "user_confirmed",
		"description", "required", "params", "run_id", "task_id", "status", "round", "worker",
		"name", "when_to_use", "model", "max_turns", "permission_mode", "background", "tools", "disallowed_tools",
		"critical_reminder", "required_gates", "plugin",
		"proposal_id", "outcome", "stage", "decided_at", "decided_at_ns", "execution", "at", "at_ns", "error",
		"run_record", "evidence", "summary", "diff", "test_output", "prior_reviews", "findings",
		"body", "path", "line", "criterion", "resolution", "rounds", "next", "sent", "closed",
		// The decision's keys, which parseDecision looks up.
		"deny", "rule", "message", "review", "persona", "quorum", "why", "personas", "blocked",
		"reviewer_tools", "denied_tools", "skipped", "sop", "title", "rollback", "actions", "steps",
		"reviewed", "review_policy", "max_rounds", "missing_work", "manual", "continuable", "limits",
		"max_items", "max_item_bytes", "max_guidance_bytes", "pass", "judged_by",
	} {
		m[k] = ast.StringTerm(k)
	}
	return m
}()

// keyTerm returns the shared term of a key: looking a decision field up
// allocates nothing.
func keyTerm(k string) *ast.Term {
	if t, ok := keyTerms[k]; ok {
		return t
	}
	return ast.StringTerm(k)
}

func item(k string, v ast.Value) [2]*ast.Term {
	if _, null := v.(ast.Null); null {
		return [2]*ast.Term{keyTerm(k), ast.InternedNullTerm}
	}
	return [2]*ast.Term{keyTerm(k), ast.NewTerm(v)}
}

// sitem and bitem are items of a string and of a boolean: OPA's interned
// terms serve the empty string, booleans and common strings without an
// allocation.
func sitem(k, s string) [2]*ast.Term { return [2]*ast.Term{keyTerm(k), ast.InternedTerm(s)} }

func bitem(k string, b bool) [2]*ast.Term { return [2]*ast.Term{keyTerm(k), ast.InternedTerm(b)} }

// flagTerms are the sixteen flags objects, built once: every proposal has
// one of them.
var flagTerms = func() [16]*ast.Term {
	var out [16]*ast.Term
	for i := range out {
		out[i] = ast.NewTerm(ast.NewObject(
			bitem("skip_review", i&1 != 0),
			bitem("force_approve", i&2 != 0),
			bitem("force_approve_no_sop", i&4 != 0),
			bitem("user_confirmed", i&8 != 0),
		))
	}
	return out
}()

func flagsTerm(f engine.Flags) *ast.Term {
	i := 0
	for bit, set := range []bool{f.SkipReview, f.ForceApprove, f.ForceApproveNoSOP, f.UserConfirmed} {
		if set {
			i |= 1 << bit
		}
	}
	return flagTerms[i]
}

func integer[T int | int64](n T) ast.Value { return ast.Number(strconv.FormatInt(int64(n), 10)) }

func str(s string) ast.Value { return ast.String(s) }

// arrayOf is an array of terms; OPA's interned empty array when there are
// none.
func arrayOf(terms []*ast.Term) ast.Value {
	if len(terms) == 0 {
		return ast.InternedEmptyArrayValue
	}
	return ast.NewArray(terms...)
}

func strs(ss []string) ast.Value {
	if len(ss) == 0 {
		return ast.InternedEmptyArrayValue
	}
	terms := make([]*ast.Term, len(ss))
	for i, s := range ss {
		terms[i] = ast.InternedTerm(s)
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
		op = ast.NewObject(sitem("id", p.Operator.ID), item("roles", strs(p.Operator.Roles)))
	}
	by := ast.Value(ast.Null{})
	if p.RequestedBy != nil {
		by = ast.NewObject(sitem("agent", p.RequestedBy.Agent), sitem("session", p.RequestedBy.Session))
	}
	criteria := make([]*ast.Term, len(p.Criteria))
	for i, c := range p.Criteria {
		criteria[i] = ast.NewTerm(ast.NewObject(
			sitem("id", c.ID), sitem("description", c.Description),
			bitem("required", c.Required), sitem("kind", c.Kind),
			item("params", generic(c.Params)), item("evidence", generic(c.Evidence)),
		))
	}
	run := ast.Value(ast.Null{})
	if p.Run != nil {
		run = runValue(p.Run)
	}
	created := ast.Value(ast.Null{})
	if p.CreatedAt != nil {
		created = str(p.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	return ast.NewObject(
		item("v", integer(p.V)),
		sitem("id", p.ID),
		sitem("tenant", p.Tenant),
		sitem("kind", string(p.Kind)),
		sitem("action", p.Action),
		sitem("class", string(p.Class)),
		item("target", generic(p.Target)),
		sitem("reason", p.Reason),
		sitem("blast_radius", string(p.BlastRadius)),
		item("operator", op),
		item("requested_by", by),
		sitem("incident_id", p.IncidentID),
		sitem("context_summary", p.ContextSummary),
		[2]*ast.Term{keyTerm("flags"), flagsTerm(p.Flags)},
		sitem("reviewer", p.Reviewer),
		item("criteria", arrayOf(criteria)),
		item("run", run),
		item("created_at", created),
	)
}

func runValue(r *engine.Run) ast.Value {
	prior := make([]*ast.Term, len(r.PriorReviews))
	for i, pr := range r.PriorReviews {
		prior[i] = ast.NewTerm(ast.NewObject(
			item("proposal_id", str(pr.ProposalID)), item("round", integer(pr.Round)),
			item("findings", findingsValue(pr.Findings)), item("summary", str(pr.Summary)),
		))
	}
	return ast.NewObject(
		item("run_id", str(r.RunID)), item("task_id", str(r.TaskID)),
		item("status", str(r.Status)), item("summary", str(r.Summary)),
		item("diff", str(r.Diff)), item("test_output", str(r.TestOutput)),
		item("round", integer(r.Round)), item("worker", str(r.Worker)),
		item("prior_reviews", ast.NewArray(prior...)),
	)
}

// findingsValue gives every finding all its fields; a finding without a
// status is open (see engine.Finding.Open), and reads so.
func findingsValue(fs []engine.Finding) ast.Value {
	terms := make([]*ast.Term, len(fs))
	for i, f := range fs {
		line := ast.Value(ast.Null{})
		if f.Line != nil {
			line = integer(*f.Line)
		}
		status := f.Status
		if status == "" {
			status = engine.FindingOpen
		}
		terms[i] = ast.NewTerm(ast.NewObject(
			item("id", str(f.ID)), item("body", str(f.Body)), item("path", str(f.Path)),
			item("line", line), item("criterion", str(f.Criterion)),
			item("status", str(status)), item("resolution", str(f.Resolution)),
		))
	}
	return ast.NewArray(terms...)
}

// runRecordTerm is input.run_record: gated's record of the run, or null.
// Actions share one interned null.
func runRecordTerm(r *engine.RunRecord) *ast.Term {
	if r == nil {
		return ast.InternedNullTerm
	}
	rounds := make([]*ast.Term, len(r.Rounds))
	for i, rd := range r.Rounds {
		rounds[i] = ast.NewTerm(ast.NewObject(
			item("round", integer(rd.Round)), item("proposal_id", str(rd.ProposalID)),
			item("outcome", str(string(rd.Outcome))), item("next", str(rd.Next)),
			item("findings", findingsValue(rd.Findings)),
			item("decided_at", str(rd.DecidedAt.UTC().Format(time.RFC3339Nano))),
			item("decided_at_ns", integer(rd.DecidedAt.UnixNano())),
			item("sent", ast.Boolean(rd.Sent)),
		))
	}
	return ast.NewTerm(ast.NewObject(
		item("tenant", str(r.Tenant)), item("run_id", str(r.RunID)), item("task_id", str(r.TaskID)),
		item("rounds", ast.NewArray(rounds...)), item("closed", str(r.Closed)),
	))
}

// personaTerms caches persona values by content: a gate has a handful of
// personas and every proposal carries one, so each is built once. The
// values are shared by concurrent evaluations, which only read input.
var personaTerms struct {
	sync.RWMutex
	m map[string]*ast.Term
}

// maxPersonaTerms bounds the cache; past it the cache starts over.
const maxPersonaTerms = 256

func personaTerm(p *engine.Persona) *ast.Term {
	if p == nil {
		return ast.InternedNullTerm
	}
	key := personaKey(p)
	personaTerms.RLock()
	t, ok := personaTerms.m[key]
	personaTerms.RUnlock()
	if ok {
		return t
	}
	t = ast.NewTerm(personaValue(p))
	personaTerms.Lock()
	if personaTerms.m == nil || len(personaTerms.m) >= maxPersonaTerms {
		personaTerms.m = make(map[string]*ast.Term)
	}
	personaTerms.m[key] = t
	personaTerms.Unlock()
	return t
}

// personaKey spells out every field personaValue reads, each prefixed by
// its length, so two personas share a key only when their values agree.
func personaKey(p *engine.Persona) string {
	var b strings.Builder
	field := func(s string) {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	list := func(xs []string) {
		b.WriteString(strconv.Itoa(len(xs)))
		b.WriteByte('[')
		for _, x := range xs {
			field(x)
		}
	}
	field(p.Name)
	field(p.Description)
	field(p.WhenToUse)
	field(p.Model)
	b.WriteString(strconv.Itoa(p.MaxTurns))
	b.WriteByte(';')
	field(p.PermissionMode)
	b.WriteString(strconv.FormatBool(p.Background))
	b.WriteByte(';')
	list(p.Tools)
	list(p.DisallowedTools)
	field(p.CriticalReminder)
	list(p.RequiredGates)
	field(p.Plugin)
	return b.String()
}

func personaValue(p *engine.Persona) ast.Value {
	if p == nil {
		return ast.Null{}
	}
	return ast.NewObject(
		item("name", str(p.Name)),
		item("description", str(p.Description)),
		item("when_to_use", str(p.WhenToUse)),
		item("model", str(p.Model)),
		item("max_turns", integer(p.MaxTurns)),
		item("permission_mode", str(p.PermissionMode)),
		item("background", ast.Boolean(p.Background)),
		item("tools", strs(p.Tools)),
		item("disallowed_tools", strs(p.DisallowedTools)),
		item("critical_reminder", str(p.CriticalReminder)),
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
		item("execution", executionValue(v.Execution)),
	)
}

// executionValue is a history entry's execution: {status, at, at_ns,
// error} as its executor reported it, or null when none was reported.
func executionValue(e *engine.Execution) ast.Value {
	if e == nil {
		return ast.Null{}
	}
	return ast.NewObject(
		sitem("status", e.Status),
		item("at", str(e.At.UTC().Format(time.RFC3339Nano))),
		item("at_ns", integer(e.At.UnixNano())),
		item("error", str(e.Error)),
	)
}
