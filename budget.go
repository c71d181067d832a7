package gated

import (
	"fmt"
	"time"
)

// The limits a budget refusal names.
const (
	LimitProposals       = "proposals"
	LimitReads           = "reads"
	LimitTokens          = "tokens"
	LimitReviewsInFlight = "reviews_in_flight"
	LimitHoldsPending    = "holds_pending"
)

// Budget scopes: a limit holds for a tenant as a whole and for each of its
// agents.
const (
	ScopeTenant = "tenant"
	ScopeAgent  = "agent"
)

// BudgetRefusal says which limit refused a proposal and when it resets.
// A verdict that carries one is blocked, never approved.
type BudgetRefusal struct {
	// Limit is one of the Limit constants; Scope is ScopeTenant or
	// ScopeAgent, and Agent the agent when the scope is an agent's.
	Limit string `json:"limit"`
	Scope string `json:"scope"`
	Agent string `json:"agent,omitempty"`
	// Max is the limit, Used what was counted against it when the
	// proposal came.
	Max  int64 `json:"max"`
	Used int64 `json:"used"`
	// Interval is the window of a windowed limit, as a Go duration;
	// empty for reviews in flight and pending holds.
	Interval string `json:"interval,omitempty"`
	// ResetsAt is when the limit admits again: the end of the window, or
	// when the earliest lease stops counting.
	ResetsAt time.Time `json:"resets_at"`
}

// Reason is the verdict's sentence for the refusal.
func (b *BudgetRefusal) Reason(tenant string) string {
	who := fmt.Sprintf("tenant %q", tenant)
	if b.Scope == ScopeAgent {
		who = fmt.Sprintf("agent %q of tenant %q", b.Agent, tenant)
	}
	per := ""
	if b.Interval != "" {
		per = " per " + b.Interval
	}
	return fmt.Sprintf("over budget: %s is at its limit of %d %s%s (%d used); it resets at %s",
		who, b.Max, limitNoun(b.Limit), per, b.Used, b.ResetsAt.UTC().Format(time.RFC3339))
}

func limitNoun(limit string) string {
	switch limit {
	case LimitProposals:
		return "proposals"
	case LimitReads:
		return "read proposals"
	case LimitTokens:
		return "reviewer tokens"
	case LimitReviewsInFlight:
		return "reviews in flight"
	case LimitHoldsPending:
		return "actions pending an operator"
	}
	return limit
}
