package engine

import "errors"

var (
	// ErrTargetChanged is returned by TargetHistory.Join when the target's
	// history changed since it was read: another approval joined it. The
	// engine then evaluates the policy again on the history as it stands.
	ErrTargetChanged = errors.New("target history changed since it was read")

	// ErrNoReviewer is returned by a Router that cannot place a review: the
	// plugin is not configured, not running, or refuses work. The engine
	// turns it into a blocked verdict.
	ErrNoReviewer = errors.New("no reviewer available")

	// ErrInvalidOption is wrapped by every option or configuration error of
	// New.
	ErrInvalidOption = errors.New("invalid engine option")

	// ErrTrailSealed is returned by an AuditTrail's Record and Seal once
	// the trail is sealed: record further events on a new trail.
	ErrTrailSealed = errors.New("the audit trail is sealed")
)

// ErrBudgetUnread is a policy's refusal of an input whose budget counters
// were not read (PolicyInput.BudgetUnread) when it can read input.budget:
// it would otherwise see zeros. The engine then reads the counters and
// evaluates again.
var ErrBudgetUnread = errors.New("the policy reads input.budget, and the budget counters were not read")

// ErrSessionUnread is a policy's refusal of an input whose flow state was
// not read (PolicyInput.SessionUnread) when it can read input.session: it
// would otherwise see no state. The engine then reads it and evaluates
// again.
var ErrSessionUnread = errors.New("the policy reads input.session, and the flow state was not read")
