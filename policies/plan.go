package policies

// The planned evaluator (package internal/plan) decides a bundle's
// proposals when OPA's plan of the decision runs there and decides a set of
// sample proposals exactly as topdown does; Live also makes it decide the
// inputs of the bundle's own Rego tests alike (parity.go).

import (
	"context"
	"fmt"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/policies/internal/plan"
)

// planOf plans a bundle for usePlan. It is planBundle; a test puts a plan
// of a slightly different bundle in its place to make the two evaluators
// disagree where the samples do not look and the bundle's tests do.
var planOf = planBundle

// planBundle has OPA plan b's decision query and converts the plan. It
// fails with an error wrapping plan.ErrUnsupported when the plan uses what
// the planned evaluator does not run.
func planBundle(ctx context.Context, b *Bundle) (*plan.Plan, error) {
	mods, err := b.parse(false)
	if err != nil {
		return nil, err
	}
	return plan.Compile(ctx, Query, mods)
}

// usePlan plans b and, when the plan runs here and decides a set of sample
// proposals exactly as topdown does, makes it e's evaluator. It reports
// which evaluator decides.
func (e *Evaluator) usePlan(ctx context.Context, b *Bundle) PlanStatus {
	topdownWhy := func(why string) PlanStatus { return PlanStatus{Evaluator: EvaluatorTopdown, Reason: why} }
	pl, err := planOf(ctx, b)
	if err != nil {
		return topdownWhy(err.Error())
	}
	data, err := ast.InterfaceToValue(b.Data)
	if err != nil {
		return topdownWhy(fmt.Sprintf("data: %v", err))
	}
	if b.Data == nil {
		data = ast.NewObject()
	}
	planned := &Evaluator{plan: pl, data: ast.NewTerm(data)}
	for _, in := range agreementInputs() {
		want, werr := e.evalTopdown(ctx, in)
		got, gerr := planned.evalPlan(ctx, in)
		switch {
		case (werr == nil) != (gerr == nil):
			return topdownWhy(fmt.Sprintf("sample %s: topdown error %v, planned error %v", in.Proposal.ID, werr, gerr))
		case werr == nil && ast.Compare(want, got) != 0:
			return topdownWhy(fmt.Sprintf("sample %s: the planned decision differs from topdown's", in.Proposal.ID))
		}
	}
	e.plan, e.data = pl, planned.data
	return PlanStatus{Evaluator: EvaluatorPlanned}
}

// Plan tells which evaluator decides this bundle's proposals.
func (e *Evaluator) Plan() PlanStatus { return e.planned }

// ReadsBudget says whether a rule of the bundle can read input.budget.
// An input whose budget counters were not read (BudgetUnread) is refused
// when it can.
func (e *Evaluator) ReadsBudget() bool { return e.readsBudget }

// ReadsSession says whether a rule of the bundle can read input.session
// (readsSession). An input whose flow state was not read (SessionUnread)
// is refused when it can.
func (e *Evaluator) ReadsSession() bool { return e.readsSession }

// Flows is the bundle's flow configuration, data.gated.config.flows.
func (e *Evaluator) Flows() *FlowConfig { return e.flows }

// agreementInputs are the compile-time samples and variations of them
// that reach the hard rules, the operational rules and the run rules.
func agreementInputs() []engine.PolicyInput {
	ins := sampleInputs()
	write, persona, now := ins[0].Proposal, ins[0].Persona, ins[0].Now
	vary := func(id string, f func(p *gated.Proposal)) *gated.Proposal {
		p := *write
		p.ID = id
		f(&p)
		return &p
	}
	broad := &engine.Persona{Name: "broad", PermissionMode: "default",
		Tools: []string{"get_sop_text", "run_shell", "web_skill", "ns.web_skill"}, DisallowedTools: []string{"get_*"}}
	history := []gated.Verdict{
		{ProposalID: "earlier-1", Tenant: write.Tenant, Action: write.Action, Outcome: gated.OutcomeApproved, Agent: "other", DecidedAt: now.Add(-time.Minute)},
		{ProposalID: "earlier-2", Tenant: write.Tenant, Action: write.Action, Outcome: gated.OutcomeApproved, Agent: "gated-check", DecidedAt: now.Add(-2 * time.Minute)},
	}
	return append(ins,
		engine.PolicyInput{Proposal: vary("skip", func(p *gated.Proposal) {
			p.Flags.SkipReview = true
			p.Operator = &gated.Principal{ID: "root", Roles: []string{"admin"}}
		}), Persona: persona, Now: now},
		engine.PolicyInput{Proposal: vary("force", func(p *gated.Proposal) { p.Flags.ForceApprove = true; p.Flags.ForceApproveNoSOP = true }), Persona: persona, Now: now},
		engine.PolicyInput{Proposal: vary("wide", func(p *gated.Proposal) { p.BlastRadius = gated.BlastTenantWide; p.Class = gated.ClassDestructive }), Persona: broad, Now: now},
		engine.PolicyInput{Proposal: vary("claim", func(p *gated.Proposal) { p.Class = gated.ClassRead }), Persona: persona, Now: now},
		engine.PolicyInput{Proposal: vary("db", func(p *gated.Proposal) { p.Action = "db_drop_table"; p.Reviewer = "reviewer" }), Persona: persona, Now: now},
		engine.PolicyInput{Proposal: vary("history", func(*gated.Proposal) {}), Persona: persona, History: history, Now: now},
	)
}
