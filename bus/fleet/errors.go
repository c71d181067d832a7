package fleet

import (
	"errors"
	"fmt"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
)

// Errors of the fleet client. Test for them with errors.Is; a verdict that
// is not an approval comes as a *VerdictError, a refusal of the review
// service as a *ServiceError, and both match the sentinels below.
var (
	// ErrBadProposal means a proposal cannot even be addressed: it is not a
	// JSON object with valid tenant, id and action tokens. gated itself
	// never sees it.
	ErrBadProposal = errors.New("proposal cannot be addressed")

	// ErrNoVerdict means no verdict arrived before the context ended. The
	// proposal may still be decided later: look it up with Client.Verdict
	// or `gated verdict get`, and never act on it before.
	ErrNoVerdict = errors.New("no verdict before the deadline")

	// ErrIDReused means the id was already used by a different proposal of
	// the same tenant. The stream drops the new one as a duplicate, so it
	// was never decided: choose a new id.
	ErrIDReused = errors.New("proposal id already used by a different proposal")

	// ErrNotApproved is matched by every verdict that is not an approval,
	// whatever its outcome.
	ErrNotApproved = errors.New("proposal not approved")

	// ErrReviewRejected matches a verdict with outcome rejected: the policy
	// or a reviewer said no. The verdict's reason says why.
	ErrReviewRejected = errors.New("proposal rejected")

	// ErrReviewBlocked matches a verdict with outcome blocked: no reviewer
	// could be routed (a missing plugin or persona, an open circuit, only
	// the proposer itself to review).
	ErrReviewBlocked = errors.New("proposal blocked: no reviewer could be routed")

	// ErrAwaitingOperator matches a verdict held for an operator: outcome
	// blocked with awaiting_operator (an action) or run.awaiting_operator
	// (a run). It is not final: wait for the operator's decision or the
	// deadline with Client.AwaitDecision. It matches ErrReviewBlocked too.
	ErrAwaitingOperator = errors.New("proposal held for an operator decision")
	// ErrReviewError matches a verdict with outcome error: a reviewer, a
	// tool or gated's infrastructure failed. It is not retried
	// automatically; propose again with a new id.
	ErrReviewError = errors.New("review failed")

	// ErrReviewTimeout matches a verdict with outcome timeout: the review
	// passed its deadline inside gated. It differs from ErrNoVerdict, which
	// means the caller stopped waiting.
	ErrReviewTimeout = errors.New("review passed its deadline")

	// ErrProposalInvalid matches a verdict with outcome invalid: gated's
	// strict decoding refused the proposal; the reason names the field.
	ErrProposalInvalid = errors.New("proposal invalid")

	// ErrServiceUnavailable means the gated.review service did not take
	// the request: no gated serves it, or it is overloaded or stopping.
	// Retry with backoff, or publish on gated.proposals instead.
	ErrServiceUnavailable = errors.New("review service unavailable")

	// ErrTenantMismatch means a proposal sent to gated.review.<tenant>
	// names another tenant.
	ErrTenantMismatch = errors.New("proposal tenant does not match the endpoint's tenant")

	// ErrInvalidConfig is wrapped by the errors of NewClient, NewToolGate
	// and their options when a setting is unusable: a non-positive wait, a
	// malformed JetStream API prefix, an identity without a valid tenant or
	// agent.
	ErrInvalidConfig = errors.New("invalid fleet client configuration")

	// ErrInvalidToolSpec is wrapped by the error of a guarded tool whose
	// ToolSpec is unusable. Such a tool never runs.
	ErrInvalidToolSpec = errors.New("invalid tool spec")

	// ErrMalformedFollowUp is wrapped by the errors of DecodeContinuation
	// and DecodeEscalation, and by FollowUpFeed.Next for a message on the
	// run stream that is not a well-formed follow-up.
	ErrMalformedFollowUp = errors.New("malformed run follow-up")
)

// VerdictError is the error for a verdict that is not an approval. It
// matches ErrNotApproved and the sentinel of its outcome (ErrReviewRejected,
// ErrReviewBlocked, ErrReviewError, ErrReviewTimeout, ErrProposalInvalid),
// and ErrAwaitingOperator when the verdict is held for an operator.
type VerdictError struct {
	// Verdict is gated's answer, never nil.
	Verdict *gated.Verdict
}

func (e *VerdictError) Error() string {
	v := e.Verdict
	return fmt.Sprintf("proposal %s.%s %s at stage %s: %s", v.Tenant, v.ProposalID, v.Outcome, v.Stage, v.Reason)
}

// Is maps the verdict's outcome to its sentinel error.
func (e *VerdictError) Is(target error) bool {
	if target == ErrNotApproved {
		return true
	}
	if target == ErrAwaitingOperator {
		return !e.Verdict.Final()
	}
	sentinel, ok := outcomeErrors[e.Verdict.Outcome]
	return ok && target == sentinel
}

var outcomeErrors = map[gated.Outcome]error{
	gated.OutcomeRejected: ErrReviewRejected,
	gated.OutcomeBlocked:  ErrReviewBlocked,
	gated.OutcomeError:    ErrReviewError,
	gated.OutcomeTimeout:  ErrReviewTimeout,
	gated.OutcomeInvalid:  ErrProposalInvalid,
}

// ServiceError is a refusal from the gated.review service: a micro error
// reply with a status code and a description. It matches ErrBadProposal
// (400, 413), ErrTenantMismatch (403), ErrIDReused (409),
// ErrServiceUnavailable (503) and ErrNoVerdict (504).
type ServiceError struct {
	// Code is the Nats-Service-Error-Code header, e.g. 504.
	Code int
	// Description is the Nats-Service-Error header.
	Description string
}

func (e *ServiceError) Error() string {
	return fmt.Sprintf("%s refused the request (%d): %s", wire.ReviewSubject, e.Code, e.Description)
}

// Is maps the status code to the client's sentinel errors.
func (e *ServiceError) Is(target error) bool {
	return serviceCodes.Match(e.Code, target)
}

// serviceCodes are the sentinels of the review service's status codes.
var serviceCodes = wire.ErrorCodes{
	400: {ErrBadProposal},
	413: {ErrBadProposal},
	403: {ErrTenantMismatch},
	409: {ErrIDReused},
	503: {ErrServiceUnavailable},
	504: {ErrNoVerdict},
}
