package policies

import (
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// InputValue builds the policy input {proposal, persona, history,
// run_record, budget, session, now, now_ns} directly as an ast.Value: no JSON round trip on
// the hot path. Every proposal field is present (empty values where the
// proposal left them out) so rules need no existence checks; run_record is
// null unless the engine found a record of the proposal's run. budget
// holds the tenant's and agent's counters, zeros when none are kept;
// session the agent's flow state, null when it was not read.
func InputValue(in engine.PolicyInput) ast.Value {
	now := in.Now
	if now.IsZero() {
		now = time.Now()
	}
	ts := &terms{free: make([]ast.Term, 32+8*len(in.History))}
	history := make([]*ast.Term, len(in.History))
	for i := range in.History {
		history[i] = ts.of(ts.verdictValue(&in.History[i]))
	}
	return ast.NewObject(
		ts.item("proposal", ts.proposalValue(in.Proposal)),
		[2]*ast.Term{keyTerms["persona"], personaTerm(in.Persona)},
		ts.item("history", ast.NewArray(history...)),
		[2]*ast.Term{keyTerms["run_record"], runRecordTerm(in.RunRecord)},
		[2]*ast.Term{keyTerms["budget"], ts.budgetTerm(in.Budget)},
		ts.item("session", sessionValue(in.Session)),
		ts.item("now", ast.String(now.UTC().Format(time.RFC3339Nano))),
		ts.item("now_ns", integer(now.UnixNano())),
	)
}

// terms hands out an input's terms from a few allocations: an input has
// some dozens, each of which would otherwise be an allocation of its own.
// The terms live as long as the input: nothing kept across evaluations
// holds one.
type terms struct{ free []ast.Term }

// of returns a new term of v.
func (ts *terms) of(v ast.Value) *ast.Term {
	if len(ts.free) == 0 {
		ts.free = make([]ast.Term, 16)
	}
	t := &ts.free[0]
	ts.free = ts.free[1:]
	t.Value = v
	return t
}

// item is the item k: v; a null value is OPA's interned null.
func (ts *terms) item(k string, v ast.Value) [2]*ast.Term {
	if _, null := v.(ast.Null); null {
		return [2]*ast.Term{keyTerm(k), ast.InternedNullTerm}
	}
	return [2]*ast.Term{keyTerm(k), ts.of(v)}
}

// sitem is the item k: s; OPA's interned values serve the empty string
// and common strings without boxing them anew.
func (ts *terms) sitem(k, s string) [2]*ast.Term {
	return [2]*ast.Term{keyTerm(k), ts.of(ast.InternedValue(s))}
}

// keyTerms are the input's object keys, built once.
var keyTerms = func() map[string]*ast.Term {
	m := map[string]*ast.Term{}
	for _, k := range []string{
		"proposal", "persona", "history", "now", "now_ns",
		"v", "id", "tenant", "kind", "action", "class", "target", "arguments", "reason", "blast_radius",
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
		"labels", "session", "recent", "since", "since_ns",
		"budget", "proposals", "reads", "tokens", "reviews_in_flight", "holds_pending", "refusals_10m", "budget_refusals_10m",
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

// bitem is an item of a boolean: OPA's interned terms serve booleans
// without an allocation.
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

func flagsTerm(f gated.Flags) *ast.Term {
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

func (ts *terms) proposalValue(p *gated.Proposal) ast.Value {
	if p == nil {
		return ast.Null{}
	}
	op := ast.Value(ast.Null{})
	if p.Operator != nil {
		op = ast.NewObject(ts.sitem("id", p.Operator.ID), ts.item("roles", strs(p.Operator.Roles)))
	}
	by := ast.Value(ast.Null{})
	if p.RequestedBy != nil {
		by = ast.NewObject(ts.sitem("agent", p.RequestedBy.Agent), ts.sitem("session", p.RequestedBy.Session))
	}
	criteria := make([]*ast.Term, len(p.Criteria))
	for i, c := range p.Criteria {
		criteria[i] = ts.of(ast.NewObject(
			ts.sitem("id", c.ID), ts.sitem("description", c.Description),
			bitem("required", c.Required), ts.sitem("kind", c.Kind),
			ts.item("params", generic(c.Params)), ts.item("evidence", generic(c.Evidence)),
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
		ts.item("v", integer(p.V)),
		ts.sitem("id", p.ID),
		ts.sitem("tenant", p.Tenant),
		ts.sitem("kind", string(p.Kind)),
		ts.sitem("action", p.Action),
		ts.sitem("class", string(p.Class)),
		ts.item("target", generic(p.Target)),
		ts.item("arguments", generic(p.Arguments)),
		ts.sitem("reason", p.Reason),
		ts.sitem("blast_radius", string(p.BlastRadius)),
		ts.item("operator", op),
		ts.item("requested_by", by),
		ts.sitem("incident_id", p.IncidentID),
		ts.sitem("context_summary", p.ContextSummary),
		[2]*ast.Term{keyTerm("flags"), flagsTerm(p.Flags)},
		ts.sitem("reviewer", p.Reviewer),
		ts.item("criteria", arrayOf(criteria)),
		ts.item("run", run),
		ts.item("created_at", created),
		ts.item("labels", strs(p.Labels)),
	)
}

func runValue(r *gated.Run) ast.Value {
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
// status is open (see gated.Finding.Open), and reads so.
func findingsValue(fs []gated.Finding) ast.Value {
	terms := make([]*ast.Term, len(fs))
	for i, f := range fs {
		line := ast.Value(ast.Null{})
		if f.Line != nil {
			line = integer(*f.Line)
		}
		status := f.Status
		if status == "" {
			status = gated.FindingOpen
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
func runRecordTerm(r *gated.RunRecord) *ast.Term {
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

// personaTerms caches persona values: a gate has a handful of personas
// and every proposal carries one, so each is built once. The registry
// hands out the same *engine.Persona for a persona until it reloads, so
// the cache is keyed by that pointer and checks on every hit that the
// persona still reads as it did when its value was built (a caller that
// changes a persona in place gets a new value). The values are shared by
// concurrent evaluations, which only read input.
var personaTerms struct {
	sync.RWMutex
	m map[*engine.Persona]personaEntry
}

// personaEntry is a persona's value and a copy of the persona it was
// built from.
type personaEntry struct {
	seen engine.Persona
	term *ast.Term
}

// maxPersonaTerms bounds the cache; past it the cache starts over.
const maxPersonaTerms = 256

func personaTerm(p *engine.Persona) *ast.Term {
	if p == nil {
		return ast.InternedNullTerm
	}
	personaTerms.RLock()
	e, ok := personaTerms.m[p]
	personaTerms.RUnlock()
	if ok && samePersona(&e.seen, p) {
		return e.term
	}
	e = personaEntry{seen: *p, term: ast.NewTerm(personaValue(p))}
	e.seen.Tools = slices.Clone(p.Tools)
	e.seen.DisallowedTools = slices.Clone(p.DisallowedTools)
	e.seen.RequiredGates = slices.Clone(p.RequiredGates)
	personaTerms.Lock()
	if personaTerms.m == nil || len(personaTerms.m) >= maxPersonaTerms {
		personaTerms.m = make(map[*engine.Persona]personaEntry)
	}
	personaTerms.m[p] = e
	personaTerms.Unlock()
	return e.term
}

// samePersona reports whether a and b agree on every field personaValue
// reads.
func samePersona(a, b *engine.Persona) bool {
	return a.Name == b.Name && a.Description == b.Description && a.WhenToUse == b.WhenToUse &&
		a.Model == b.Model && a.MaxTurns == b.MaxTurns && a.PermissionMode == b.PermissionMode &&
		a.Background == b.Background && slices.Equal(a.Tools, b.Tools) &&
		slices.Equal(a.DisallowedTools, b.DisallowedTools) && a.CriticalReminder == b.CriticalReminder &&
		slices.Equal(a.RequiredGates, b.RequiredGates) && a.Plugin == b.Plugin
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

func (ts *terms) verdictValue(v *gated.Verdict) ast.Value {
	return ast.NewObject(
		ts.sitem("proposal_id", v.ProposalID),
		ts.sitem("tenant", v.Tenant),
		ts.sitem("action", v.Action),
		ts.sitem("outcome", string(v.Outcome)),
		ts.sitem("stage", string(v.Stage)),
		ts.item("decided_at", str(v.DecidedAt.UTC().Format(time.RFC3339Nano))),
		ts.item("decided_at_ns", integer(v.DecidedAt.UnixNano())),
		ts.sitem("agent", v.Agent),
		ts.item("execution", executionValue(v.Execution)),
	)
}

// executionValue is a history entry's execution: {status, at, at_ns,
// error} as its executor reported it, or null when none was reported.
func executionValue(e *gated.Execution) ast.Value {
	if e == nil {
		return ast.Null{}
	}
	return ast.NewObject(
		item("status", str(e.Status)),
		item("at", str(e.At.UTC().Format(time.RFC3339Nano))),
		item("at_ns", integer(e.At.UnixNano())),
		item("error", str(e.Error)),
	)
}

// budgetTerm is input.budget: the tenant's and agent's counters, zeros
// when the engine keeps none. Most proposals meet no counter at all, so
// the all-zero value is built once and shared, as the personas' are:
// evaluations only read input.
func (ts *terms) budgetTerm(b *gated.BudgetState) *ast.Term {
	if b == nil || *b == (gated.BudgetState{}) {
		return zeroBudget
	}
	return ts.of(budgetValue(ts, b))
}

// zeroBudget is input.budget with every counter zero.
var zeroBudget = ast.NewTerm(budgetValue(&terms{}, &gated.BudgetState{}))

func budgetValue(ts *terms, b *gated.BudgetState) ast.Value {
	return ast.NewObject(
		ts.item("tenant", budgetCounters(b.Tenant)),
		ts.item("agent", budgetCounters(b.Agent)),
	)
}

func budgetCounters(c gated.BudgetCounters) ast.Value {
	return ast.NewObject(
		countItem("proposals", c.Proposals),
		countItem("reads", c.Reads),
		countItem("tokens", c.Tokens),
		countItem("reviews_in_flight", c.ReviewsInFlight),
		countItem("holds_pending", c.HoldsPending),
		countItem("refusals_10m", c.Refusals),
		countItem("budget_refusals_10m", c.BudgetRefusals),
	)
}

// countItem is the item k: n; OPA's interned terms serve small counts.
func countItem(k string, n int64) [2]*ast.Term { return [2]*ast.Term{keyTerm(k), ast.InternedTerm(n)} }

// sessionValue is input.session: {labels, recent: [{proposal_id, action,
// labels, at, at_ns}], since, since_ns, error}; null when the flow state
// was not read. since is "" and since_ns 0 when nothing was executed.
func sessionValue(st *gated.SessionState) ast.Value {
	if st == nil {
		return ast.Null{}
	}
	recent := make([]*ast.Term, len(st.Recent))
	for i, a := range st.Recent {
		recent[i] = ast.NewTerm(ast.NewObject(
			item("proposal_id", str(a.ProposalID)), item("action", str(a.Action)),
			item("labels", strs(a.Labels)),
			item("at", str(a.At.UTC().Format(time.RFC3339Nano))), item("at_ns", integer(a.At.UnixNano())),
		))
	}
	since, sinceNS := "", int64(0)
	if !st.Since.IsZero() {
		since, sinceNS = st.Since.UTC().Format(time.RFC3339Nano), st.Since.UnixNano()
	}
	return ast.NewObject(
		item("labels", strs(st.Labels)),
		item("recent", arrayOf(recent)),
		item("since", str(since)), item("since_ns", integer(sinceNS)),
		item("error", str(st.Error)),
	)
}
