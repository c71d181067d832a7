package gated

import (
	"encoding/json"
	"slices"
	"time"
)

// What the policy decided, as the policy.decided, policy.rechecked and
// policy.shadow_differs records keep it.

// Route is the policy's routing of a proposal to review.
type Route struct {
	Required bool   `json:"required"`
	Persona  string `json:"persona,omitempty"`
	// Quorum is how many distinct personas must approve. The routed
	// Persona is always one of them.
	Quorum int    `json:"quorum"`
	Why    string `json:"why"`
	// Rule names the routing rule that decided, e.g. route_class; the
	// verdict's policy section carries it as route.
	Rule string `json:"rule,omitempty"`
	// Personas are further reviewers the policy prefers, best first, for a
	// quorum above one. The engine tries them before the other loaded
	// personas; each must still pass the policy in its own name.
	Personas []string `json:"personas,omitempty"`
	// Also are reviewers that must review besides Persona, each counted in
	// the quorum: the persona a proposal names when the policy does not
	// let it replace the routed one. A persona of Also that is not loaded
	// or has no reviewer blocks the proposal; one the policy denies in its
	// own name rejects it.
	Also []string `json:"also,omitempty"`
	// Blocked says why no reviewer may take a review that is required:
	// for a run, only its own worker could have reviewed it. The engine
	// blocks the proposal with this reason.
	Blocked string `json:"blocked,omitempty"`
}

// Hold is one rule's reason to hold an action for an operator decision.
type Hold struct {
	// Rule names the rule that holds, e.g. hold_tenant_wide_destructive.
	Rule string `json:"rule"`
	// Why is one human sentence on why a person must decide.
	Why string `json:"why"`
	// Deadline, when above zero, is how long the operator may take; the
	// engine keeps the shortest of the holds' and its own default.
	Deadline time.Duration `json:"deadline,omitempty"`
}

// RunPolicy is the policy's part of the decision on a run proposal,
// data.decision.run.
type RunPolicy struct {
	// Reviewed is true when the review policy (none, on_success,
	// on_failure, always) asks for this run to be reviewed; Why says why
	// or why not.
	Reviewed bool   `json:"reviewed"`
	Why      string `json:"why,omitempty"`
	// ReviewPolicy is the review policy in force for the run's tenant.
	ReviewPolicy string `json:"review_policy,omitempty"`
	// MaxRounds is the last round a rejection may continue to; a
	// rejection of that round escalates instead.
	MaxRounds int `json:"max_rounds"`
	// Criteria are the deterministic criteria the policy judged.
	Criteria []CriterionEval `json:"criteria,omitempty"`
	// MissingWork lists what failed required criteria ask of the worker.
	MissingWork []string `json:"missing_work,omitempty"`
	// Manual names the required manual criteria: an operator must judge
	// them before the run can be approved.
	Manual []string `json:"manual,omitempty"`
	// Continuable is true when a rejection of the run is about the work
	// itself (every deny is a failed criterion), so another round may fix
	// it. A run rejected for any other reason gets no follow-up.
	Continuable bool      `json:"continuable"`
	Limits      RunLimits `json:"limits"`
	// AcceptedStatus is the run's status when it is not completed and the
	// policy accepts it for the run's task (run_review.accept_terminal);
	// empty otherwise. gated approves a run that did not complete only
	// when this names its status.
	AcceptedStatus string `json:"accepted_status,omitempty"`
}

// BudgetState is the policy input's budget member: the counters of the
// proposal's tenant and agent as they stood before the policy ran.
type BudgetState struct {
	Tenant BudgetCounters `json:"tenant"`
	Agent  BudgetCounters `json:"agent"`
}

// BudgetCounters are one scope's counters. The windowed ones (proposals,
// reads, tokens) count the current window of their limit's interval.
type BudgetCounters struct {
	Proposals       int64 `json:"proposals"`
	Reads           int64 `json:"reads"`
	Tokens          int64 `json:"tokens"`
	ReviewsInFlight int64 `json:"reviews_in_flight"`
	HoldsPending    int64 `json:"holds_pending"`
	// Refusals counts the verdicts of the last RefusalWindow that said no:
	// rejections (by the policy or a reviewer) and budget refusals.
	Refusals int64 `json:"refusals_10m"`
	// BudgetRefusals counts the budget refusals among them.
	BudgetRefusals int64 `json:"budget_refusals_10m"`
}

// ReplayInput is what the policy.decided record keeps of the policy's
// input, so that a replay can decide the proposal again with the same
// input under another policy: the proposal as received, the persona the
// evaluation started from, the clock, and the recent verdicts on the
// target and the run's record when the policy read them. The tenant and
// action are the record's own.
type ReplayInput struct {
	// Proposal is the proposal's JSON as received.
	Proposal json.RawMessage `json:"proposal"`
	// Persona is the persona the evaluation started from; the policy may
	// have routed elsewhere from it.
	Persona string `json:"persona"`
	// Now is the clock the policy saw.
	Now time.Time `json:"now"`
	// History is the recent verdicts on the target the policy saw.
	History []Verdict `json:"history,omitempty"`
	// RunRecord is the run's record the policy saw, for a run proposal.
	RunRecord *RunRecord `json:"run_record,omitempty"`
	// Budget is the budget counters the policy saw, when budgets are
	// kept.
	Budget *BudgetState `json:"budget,omitempty"`
	// Session is the agent's flow state the policy saw, when it was read.
	Session *SessionState `json:"session,omitempty"`
}

// Kinds of difference between the live and the shadow decision.
const (
	// ShadowDiffError: one side could not decide (the shadow's evaluation
	// failed, or the live one did and the shadow did not).
	ShadowDiffError = "error"
	// ShadowDiffOutcome: the two settle on different outcomes (rejected,
	// approved, blocked, or on to review).
	ShadowDiffOutcome = "outcome"
	// ShadowDiffDenies: the same outcome, but not the same deny rules.
	ShadowDiffDenies = "denies"
	// ShadowDiffRoute: both send the proposal to review, but not to the
	// same persona or quorum.
	ShadowDiffRoute = "route"
)

// ShadowOutcomeReview is the outcome of a policy decision that settles
// nothing on its own: the proposal goes on to review.
const ShadowOutcomeReview = "review"

// ShadowDecision is one side of a shadow comparison: what a policy
// decision settles before any review.
type ShadowDecision struct {
	// Revision is the policy revision that decided.
	Revision string `json:"revision,omitempty"`
	// Outcome is the outcome the decision settles, or "review" when the
	// proposal goes on to review.
	Outcome string `json:"outcome"`
	// Denies are the decision's denies, sorted by rule, never nil.
	Denies []Deny `json:"denies"`
	// Route is the decision's routing; nil when the evaluation failed.
	Route *Route `json:"route,omitempty"`
	// Error says why the evaluation failed.
	Error string `json:"error,omitempty"`
}

// ShadowComparison is the live and the shadow decision on one proposal
// and how they differ. It is the data of a policy.shadow_differs event.
type ShadowComparison struct {
	Live   ShadowDecision `json:"live"`
	Shadow ShadowDecision `json:"shadow"`
	// Kinds are the kinds of difference, in the order error, outcome,
	// denies, route; empty when the two agree.
	Kinds []string `json:"kinds"`
	// Rules are the deny rules that only one of the two decisions has,
	// sorted.
	Rules []string `json:"rules,omitempty"`
}

// Differs says whether the two decisions differ.
func (c ShadowComparison) Differs() bool { return len(c.Kinds) > 0 }

// Flipped says whether the two decisions settle on different outcomes
// (a difference of kind outcome): what shadow mode and replay alike call
// a flip.
func (c ShadowComparison) Flipped() bool { return slices.Contains(c.Kinds, ShadowDiffOutcome) }

// ReviewChanged says whether both decisions send the proposal to review
// but not to the same reviewers (a difference of kind route): a recorded
// review result does not stand for the candidate's reviewers.
func (c ShadowComparison) ReviewChanged() bool { return slices.Contains(c.Kinds, ShadowDiffRoute) }
