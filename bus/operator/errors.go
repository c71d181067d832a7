package operator

import (
	"errors"
	"fmt"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/engine/wire"
)

// Errors of operator decisions. A *Refusal matches the one of its code,
// and every 4xx refusal matches ErrRefused.
var (
	// ErrRefused is matched by every refusal of an operator decision
	// (codes 400 to 409): nothing was decided.
	ErrRefused = errors.New("operator decision refused")
	// ErrMessageInvalid (400) means the message is malformed: the
	// refusal names the field.
	ErrMessageInvalid = errors.New("operator message malformed")
	// ErrUnauthenticated (401) means the signature was missing,
	// bad, made with a key gated does not know, for another operator id,
	// or too old (signed_at): sign the message again with a listed key.
	ErrUnauthenticated = errors.New("operator message not authenticated")
	// ErrForbidden (403) means the operator may not decide for
	// the tenant: the operators file lists its tenants.
	ErrForbidden = errors.New("operator may not decide for this tenant")
	// ErrConflict (409) means the verdict is not held for an
	// operator (never held, or decided already), or the decision does not
	// fit it: another proposal digest, or not exactly the awaited
	// criteria.
	ErrConflict = errors.New("operator decision conflicts with the stored verdict")
	// ErrInvalidList is wrapped by every error of an operators file
	// (ParseList, LoadList).
	ErrInvalidList = errors.New("invalid operators file")
	// ErrInvalidConfig is wrapped by the error of NewEndpoint when one of
	// its arguments is missing.
	ErrInvalidConfig = errors.New("invalid operator endpoint configuration")
)

// Refusal is why gated refused an operator decision, with the
// micro error code it replies with: 400 malformed, 401 not
// authenticated, 403 tenant not allowed, 404 no verdict, 409 not
// awaiting or not matching, 503 store or audit failure. The client gets
// it back from Send.
type Refusal struct {
	// Code is the micro error code: 400, 401, 403, 404, 409 or 503 (500
	// when a reply's code header does not read as a number).
	Code int
	// Field is the JSON path of the field at fault in a 400 refusal
	// ("criteria[1].pass", "subject"), or empty.
	Field string
	// Reason says what is wrong in words an operator can act on. It never
	// holds a seed or a signature.
	Reason string
}

// Error says the decision was refused, with the code, the field at fault
// and the reason.
func (e *Refusal) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("operator decision refused (%d): field %s: %s", e.Code, e.Field, e.Reason)
	}
	return fmt.Sprintf("operator decision refused (%d): %s", e.Code, e.Reason)
}

// Description is the refusal as the micro error header of the reply
// carries it: the field at fault, if any, and the reason.
func (e *Refusal) Description() string {
	if e.Field != "" {
		return "field " + e.Field + ": " + e.Reason
	}
	return e.Reason
}

// Is maps the code to the sentinel errors: every 4xx code matches
// ErrRefused, and each code its own sentinel (refusalCodes).
func (e *Refusal) Is(target error) bool {
	if target == ErrRefused {
		return e.Code >= 400 && e.Code < 500
	}
	return refusalCodes.Match(e.Code, target)
}

// refusalCodes are the sentinels of the endpoint's status codes.
var refusalCodes = wire.ErrorCodes{
	400: {ErrMessageInvalid},
	401: {ErrUnauthenticated},
	403: {ErrForbidden},
	404: {gated.ErrNotFound},
	409: {ErrConflict},
	503: {fleet.ErrServiceUnavailable},
}

func refusal(code int, field, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Field: field, Reason: fmt.Sprintf(format, args...)}
}
