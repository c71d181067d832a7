package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/gated/gated"
)

// BudgetUse is what an admitted proposal costs its tenant's and agent's
// budgets.
type BudgetUse string

// The uses a proposal is admitted for.
const (
	// BudgetRead is a proposal the policy approves without a review (a
	// read, or an action configuration lets skip review): it counts
	// against the reads limit, higher than the proposals limit.
	BudgetRead BudgetUse = "read"
	// BudgetReview is a proposal that goes to review: it counts against
	// the proposals limit, takes a review-in-flight lease until its
	// reviews end, and is refused when the tokens of the interval are
	// spent.
	BudgetReview BudgetUse = "review"
	// BudgetHold is an action the policy holds for an operator: it counts
	// against the proposals limit and takes a pending-hold lease until an
	// operator decides or its deadline passes.
	BudgetHold BudgetUse = "hold"
)

// RefusalWindow is how far back the counts of refusals in the policy input
// (BudgetCounters.Refusals) look.
const RefusalWindow = 10 * time.Minute

// BudgetRequest asks to admit one proposal for a use.
type BudgetRequest struct {
	Tenant string
	// Agent is the proposing agent (requested_by.agent, or a run's
	// worker); "" for a proposal that names none.
	Agent string
	// ID is the proposal id: the name of its lease, so that a redelivery
	// of the same proposal takes the lease it held, not a second one.
	ID  string
	Use BudgetUse
	// Now is the engine's clock; Until ends the lease of a review or a
	// hold.
	Now   time.Time
	Until time.Time
}

// BudgetRelease is the end of an admitted review or hold.
type BudgetRelease struct {
	Tenant, Agent, ID string
	Use               BudgetUse
	// Tokens are the tokens the reviews reported (prompt and completion),
	// counted in the window of Now; 0 for none.
	Tokens int64
	Now    time.Time
}

// RefusalKind says what said no to a proposal, for the refusal counts.
type RefusalKind string

// The kinds of refusal counted.
const (
	RefusedRejected RefusalKind = "rejected"
	RefusedBudget   RefusalKind = "budget"
)

// Budgets keeps the counters of every tenant and agent and enforces
// their limits. It must be shared by every gated process deciding for the
// same tenants, so that the limits hold over all of them; package
// bus/budget keeps them in a JetStream key-value bucket. Implementations
// are safe for concurrent use. Every error is an infrastructure failure:
// the engine then starts no review and the delivery is retried.
type Budgets interface {
	// State returns the counters of tenant and agent at now.
	State(ctx context.Context, tenant, agent string, now time.Time) (gated.BudgetState, error)
	// Admit counts the proposal against its limits and returns nil, or
	// returns the limit that refuses it; a refused proposal is not
	// counted against any limit but its refusals.
	Admit(ctx context.Context, req BudgetRequest) (*gated.BudgetRefusal, error)
	// Release ends the lease of an admitted review or hold and adds the
	// tokens its reviews reported to the tenant's and agent's token
	// counters, in one change of each. Releasing a lease that is not held
	// is not an error (its tokens are still counted).
	Release(ctx context.Context, rel BudgetRelease) error
	// Refused counts one refusal of a proposal of tenant and agent. It
	// must not block (count in memory, write later): the engine calls it
	// before the verdict is returned, so a refusal is counted before the
	// decision that refused ends, and stopping the Budgets after the
	// decisions loses none.
	Refused(ctx context.Context, tenant, agent string, kind RefusalKind, now time.Time) error
}

// budgetAgent is the agent whose budget a proposal counts against.
func budgetAgent(p *gated.Proposal) string {
	if p == nil {
		return ""
	}
	if p.RequestedBy != nil && p.RequestedBy.Agent != "" {
		return p.RequestedBy.Agent
	}
	if p.Run != nil {
		return p.Run.Worker
	}
	return ""
}

// admit asks the budgets to admit the proposal for use, with a lease
// until until. It returns the verdict that refuses it, or nil when it is
// admitted (or no budgets are configured). An error means the counters
// could not be reached: nothing expensive may start.
func (r *pass) admit(ctx context.Context, use BudgetUse, until time.Time) (*gated.Verdict, error) {
	b := r.e.cfg.Budgets
	if b == nil {
		return nil, nil
	}
	req := BudgetRequest{Tenant: r.tenant, Agent: budgetAgent(r.p), ID: r.id, Use: use, Now: r.start, Until: until}
	refusal, err := b.Admit(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("counting %s.%s against its budgets: %w", r.tenant, r.id, err)
	}
	if refusal == nil {
		r.budgetHeld = append(r.budgetHeld, use)
		return nil, nil
	}
	r.log.recordBestEffort(ctx, gated.EventBudgetRefused, refusal)
	v := r.verdict(gated.OutcomeBlocked, gated.StagePolicy, refusal.Reason(r.tenant))
	v.Budget = refusal
	return v, nil
}

// releaseHold ends the hold lease the pass took, if it took one, when its
// held verdict was not stored.
func (r *pass) releaseHold(ctx context.Context) {
	r.releaseUse(ctx, BudgetHold, 0)
}

// endReview ends the review lease the pass took and counts the tokens
// the reviews of v reported, in one change of each record: the verdict
// waits for one round of writes, not two.
func (r *pass) endReview(ctx context.Context, v *gated.Verdict) {
	var tokens int64
	if v != nil {
		for _, rev := range v.Reviews {
			tokens += int64(rev.Tokens.Prompt) + int64(rev.Tokens.Completion)
		}
	}
	r.releaseUse(ctx, BudgetReview, tokens)
}

// releaseUse ends the lease of use the pass took, with the tokens spent
// under it. Tokens are counted even when no lease of use was taken.
func (r *pass) releaseUse(ctx context.Context, want BudgetUse, tokens int64) {
	b := r.e.cfg.Budgets
	if b == nil {
		return
	}
	held := false
	for i, use := range r.budgetHeld {
		if use == want {
			held = true
			r.budgetHeld = append(r.budgetHeld[:i], r.budgetHeld[i+1:]...)
			break
		}
	}
	if !held && tokens <= 0 {
		return
	}
	// Best effort: a failed release is not fatal (the lease ends at its
	// expiry), and the verdict stands whether or not the tokens land.
	_ = b.Release(context.WithoutCancel(ctx), BudgetRelease{
		Tenant: r.tenant, Agent: budgetAgent(r.p), ID: r.id, Use: want, Tokens: tokens, Now: r.start,
	})
}

// countRefusal counts a verdict that says no against the proposal's
// refusals, which the policy sees in input.budget. Budgets.Refused does
// not block; a count that fails is lost (the policy then sees one refusal
// fewer).
func (r *pass) countRefusal(ctx context.Context, v *gated.Verdict) {
	b := r.e.cfg.Budgets
	if b == nil || v == nil || r.p == nil {
		return
	}
	kind := RefusedRejected
	switch {
	case v.Budget != nil:
		kind = RefusedBudget
	case v.Outcome != gated.OutcomeRejected:
		return
	}
	_ = b.Refused(context.WithoutCancel(ctx), r.tenant, budgetAgent(r.p), kind, r.start)
}
