package engine

import (
	"context"
	"errors"

	"github.com/gated/gated"
)

// Sessions reads the flow state gated keeps of each agent: the labelled
// actions it executed over the flow window (docs/POLICIES.md#flows). It
// must be shared by every gated process deciding for the same tenants;
// package bus/flow keeps it in a JetStream key-value bucket.
// Implementations are safe for concurrent use.
type Sessions interface {
	// Session returns the state of agent of tenant ("" for proposals
	// that name no agent). An error means the state could not be read or
	// is corrupt: the policy then sees it as input.session.error.
	Session(ctx context.Context, tenant, agent string) (gated.SessionState, error)
}

// readSession reads the proposing agent's flow state into in, when flow
// state is kept. A state that cannot be read is not an error of the
// decision: the policy sees why (SessionState.Error), and the flow rules,
// when on, deny on it.
func (r *pass) readSession(ctx context.Context, in *PolicyInput) {
	s := r.e.cfg.Sessions
	if s == nil {
		return
	}
	agent := ""
	if r.p.RequestedBy != nil {
		agent = r.p.RequestedBy.Agent
	}
	st, err := s.Session(ctx, r.p.Tenant, agent)
	if err != nil {
		st = gated.SessionState{Labels: []string{}, Recent: []gated.ExecutedAction{}, Error: err.Error()}
	}
	in.Session, in.SessionUnread = &st, false
}

// readUnread reads what the policy refused in for lacking (ErrBudgetUnread,
// ErrSessionUnread), and reports whether it read anything: in is then to be
// evaluated again.
func (r *pass) readUnread(ctx context.Context, in *PolicyInput, err error) (bool, error) {
	switch {
	case refusedForBudget(*in, err):
		return true, r.readBudget(ctx, in)
	case in.SessionUnread && errors.Is(err, ErrSessionUnread):
		r.readSession(ctx, in)
		return true, nil
	}
	return false, nil
}
