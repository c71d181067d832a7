package gated

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidProposal is wrapped by every decoding and validation error.
	// Test for it with errors.Is; use errors.As with *FieldError to learn
	// which field was wrong.
	ErrInvalidProposal = errors.New("invalid proposal")

	// ErrNotFound is returned by a VerdictStore that holds no verdict for a
	// key.
	ErrNotFound = errors.New("verdict not found")

	// ErrExists is returned by VerdictStore.Create when a verdict is already
	// stored for the key; the store returns the stored verdict with it.
	ErrExists = errors.New("verdict already stored")

	// ErrCorruptRecord is wrapped by a VerdictStore's errors for a record
	// read back that is not what gated stored under its key: it does not
	// decode, or it names another tenant, proposal, run or target. Such a
	// record is never replayed or used as state. The engine decides a
	// proposal whose stored verdict is corrupt afresh, and the store's
	// Create replaces the corrupt entry with the new verdict.
	ErrCorruptRecord = errors.New("stored record does not match its key")

	// ErrClaimed is returned by ReviewClaims.Claim when another message
	// holds a live review claim on the proposal, and by Decide when the
	// review that message holds stored no verdict within the claim's
	// lifetime; the delivery is then retried, and a retry finds the
	// verdict or a stale claim it may take over.
	ErrClaimed = errors.New("proposal review claimed by another message")

	// ErrIDTaken is returned by Decide when the delivery's own verdict was
	// sealed but, when it came to be stored, a verdict of a different
	// proposal under the same tenant and id was there first: the id is
	// that proposal's. Nothing of this delivery was stored or may be
	// published; the message is to be delivered again, and that delivery
	// is answered invalid (the id is already used), on a trail of its own.
	ErrIDTaken = errors.New("proposal id taken by a different proposal")

	// ErrNotAwaiting is returned by Resolve when the proposal's verdict is
	// not held for an operator: it was never held, or an operator decided
	// already.
	ErrNotAwaiting = errors.New("verdict is not awaiting an operator decision")

	// ErrNotDue is returned by Expire when the held verdict's deadline has
	// not passed yet: try again at the deadline.
	ErrNotDue = errors.New("the operator's deadline has not passed")

	// ErrDecisionMismatch is returned by Resolve when the operator's
	// decision does not fit the held verdict: another proposal digest, or
	// not exactly the manual criteria the verdict waits on.
	ErrDecisionMismatch = errors.New("operator decision does not match the held verdict")
)

// FieldError says which field of a proposal is wrong and why. It wraps
// ErrInvalidProposal.
type FieldError struct {
	// Field is the JSON path of the field, e.g. "flags.skip_review", or
	// empty when the problem is the message as a whole.
	Field string
	// Problem is what is wrong, in words a proposer can act on.
	Problem string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Problem
	}
	return fmt.Sprintf("field %s: %s", e.Field, e.Problem)
}

// Unwrap lets errors.Is match ErrInvalidProposal.
func (e *FieldError) Unwrap() error { return ErrInvalidProposal }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}
