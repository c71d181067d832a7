package gated

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/gated/gated/internal/strictjson"
	"github.com/gated/gated/internal/textcut"
)

// StatusStage is one step of a proposal's progress, as gated publishes it
// on the proposal's status subject (wire.StatusSubject).
type StatusStage string

// The stages of the v1 status contract, in the order a proposal passes
// them. A proposal need not pass all: a read is decided by the policy
// without a review, an invalid one is decided on arrival.
const (
	// StatusReceived: gated took the proposal's message off the stream.
	StatusReceived StatusStage = "received"
	// StatusPolicyDecided: the policy decided the proposal (deny, or
	// route to review or not).
	StatusPolicyDecided StatusStage = "policy_decided"
	// StatusReviewStarted: a reviewer began its review; the status names
	// the reviewer (the persona) and the review's deadline.
	StatusReviewStarted StatusStage = "review_started"
	// StatusAwaitingOperator: the verdict is held for an operator's
	// decision until the status's deadline.
	StatusAwaitingOperator StatusStage = "awaiting_operator"
	// StatusDecided: a verdict was decided and its audit record stored;
	// the status carries it. A held verdict may be followed by another
	// decided status when an operator decides or the deadline passes.
	StatusDecided StatusStage = "decided"
)

// Status is one status event of a proposal, published on
// gated.status.<tenant>.<id>. Members other than the common five belong to
// one stage each and are absent on the others.
type Status struct {
	// V is the schema version, 1.
	V      int         `json:"v"`
	Tenant string      `json:"tenant"`
	ID     string      `json:"id"`
	Stage  StatusStage `json:"stage"`
	// At is when gated recorded the step.
	At time.Time `json:"at"`
	// Reviewer is the persona that reviews, on review_started.
	Reviewer string `json:"reviewer,omitempty"`
	// Deadline is when the review ends (review_started), or when a held
	// verdict times out (awaiting_operator).
	Deadline *time.Time `json:"deadline,omitempty"`
	// Reason says why the verdict is held, on awaiting_operator.
	Reason string `json:"reason,omitempty"`
	// Verdict is the verdict decided, on decided. It is what gated
	// stored in the audit stream; the verdict on the verdict subject,
	// confirmed by the stored one, is still the answer a fleet acts on.
	Verdict *Verdict `json:"verdict,omitempty"`
}

// ErrBadStatus is wrapped by the errors of DecodeStatus.
var ErrBadStatus = errors.New("malformed status event")

// StatusError says which member of a status event is wrong and why. It
// wraps ErrBadStatus.
type StatusError struct {
	// Field is the member's name, or empty when the problem is the event
	// as a whole.
	Field string
	// Problem is what is wrong.
	Problem string
}

func (e *StatusError) Error() string {
	if e.Field == "" {
		return "status event: " + e.Problem
	}
	return fmt.Sprintf("status event: field %s: %s", e.Field, e.Problem)
}

// Unwrap lets errors.Is match ErrBadStatus.
func (e *StatusError) Unwrap() error { return ErrBadStatus }

func statusErr(field, format string, args ...any) *StatusError {
	return &StatusError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// DecodeStatus reads a status event strictly: one JSON object, every
// member known and given once, of the right type, the members of its stage
// only, and the ones its stage requires present. An error is a
// *StatusError naming the member at fault.
func DecodeStatus(data []byte) (*Status, error) {
	if !utf8.Valid(data) {
		return nil, statusErr("", "not valid UTF-8")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, statusErr("", "empty; expected a JSON object")
	}
	var st Status
	seen := map[string]bool{}
	err := strictjson.Object(data, func(key string, value json.RawMessage) error {
		seen[key] = true
		switch key {
		case "v":
			if string(bytes.TrimSpace(value)) != "1" {
				return statusErr(key, "must be 1, not %s", textcut.Clip(string(value), 40))
			}
			st.V = 1
		case "tenant":
			if err := json.Unmarshal(value, &st.Tenant); err != nil || !ValidTenant(st.Tenant) {
				return statusErr(key, "must be a tenant token [a-z0-9_-]{1,64}, not %s", textcut.Clip(string(value), 80))
			}
		case "id":
			if err := json.Unmarshal(value, &st.ID); err != nil || !ValidID(st.ID) {
				return statusErr(key, "must be a proposal id [A-Za-z0-9_-]{1,128}, not %s", textcut.Clip(string(value), 160))
			}
		case "stage":
			var s string
			if err := json.Unmarshal(value, &s); err != nil {
				return statusErr(key, "must be a string, not %s", textcut.Clip(string(value), 40))
			}
			st.Stage = StatusStage(s)
			if !knownStage(st.Stage) {
				return statusErr(key, "%q is not a stage of the v1 status contract", textcut.Clip(s, 40))
			}
		case "at":
			t, err := statusTime(value)
			if err != nil {
				return statusErr(key, "%v", err)
			}
			st.At = t
		case "reviewer":
			if err := json.Unmarshal(value, &st.Reviewer); err != nil || st.Reviewer == "" {
				return statusErr(key, "must be a non-empty string, not %s", textcut.Clip(string(value), 40))
			}
		case "deadline":
			t, err := statusTime(value)
			if err != nil {
				return statusErr(key, "%v", err)
			}
			st.Deadline = &t
		case "reason":
			if err := json.Unmarshal(value, &st.Reason); err != nil {
				return statusErr(key, "must be a string, not %s", textcut.Clip(string(value), 40))
			}
		case "verdict":
			if len(value) == 0 || value[0] != '{' {
				return statusErr(key, "must be an object, not %s", textcut.Clip(string(value), 40))
			}
			v := new(Verdict)
			if err := json.Unmarshal(value, v); err != nil {
				return statusErr(key, "is not a verdict: %s", textcut.Clip(err.Error(), 200))
			}
			st.Verdict = v
		default:
			return statusErr(textcut.Clip(key, 64), "is not a field of the v1 status event")
		}
		return nil
	})
	if err != nil {
		var se *StatusError
		var me *strictjson.MemberError
		switch {
		case errors.As(err, &se):
			return nil, se
		case errors.As(err, &me) && errors.Is(err, strictjson.ErrDuplicateMember):
			return nil, statusErr(textcut.Clip(me.Key, 64), "appears more than once")
		case errors.Is(err, strictjson.ErrNotObject):
			return nil, statusErr("", "must be a JSON object")
		case errors.Is(err, strictjson.ErrTrailingData):
			return nil, statusErr("", "unexpected data after the status object")
		}
		return nil, statusErr("", "not valid JSON: %s", textcut.Clip(err.Error(), 200))
	}
	for _, f := range []string{"v", "tenant", "id", "stage", "at"} {
		if !seen[f] {
			return nil, statusErr(f, "is missing")
		}
	}
	// Each stage's own members: required on it, refused on the others.
	for _, own := range []struct {
		field string
		stage StatusStage
	}{{"reviewer", StatusReviewStarted}, {"reason", StatusAwaitingOperator}, {"verdict", StatusDecided}} {
		if seen[own.field] && st.Stage != own.stage {
			return nil, statusErr(own.field, "belongs to stage %s, not %s", own.stage, st.Stage)
		}
	}
	if seen["deadline"] && st.Stage != StatusReviewStarted && st.Stage != StatusAwaitingOperator {
		return nil, statusErr("deadline", "belongs to stages review_started and awaiting_operator, not %s", st.Stage)
	}
	switch st.Stage {
	case StatusReviewStarted:
		if !seen["reviewer"] {
			return nil, statusErr("reviewer", "is missing; stage review_started names its reviewer")
		}
	case StatusAwaitingOperator:
		if !seen["deadline"] {
			return nil, statusErr("deadline", "is missing; stage awaiting_operator has a deadline")
		}
	case StatusDecided:
		v := st.Verdict
		switch {
		case v == nil:
			return nil, statusErr("verdict", "is missing; stage decided carries the verdict")
		case v.Tenant != st.Tenant || v.ProposalID != st.ID:
			return nil, statusErr("verdict", "names %s.%s, not the status's %s.%s",
				textcut.Clip(v.Tenant, 64), textcut.Clip(v.ProposalID, 128), st.Tenant, st.ID)
		case !knownOutcome(v.Outcome):
			return nil, statusErr("verdict.outcome", "%q is not an outcome", textcut.Clip(string(v.Outcome), 40))
		case v.Approved != (v.Outcome == OutcomeApproved):
			return nil, statusErr("verdict.approved", "is %t for outcome %s", v.Approved, v.Outcome)
		}
	}
	return &st, nil
}

func knownStage(s StatusStage) bool {
	switch s {
	case StatusReceived, StatusPolicyDecided, StatusReviewStarted, StatusAwaitingOperator, StatusDecided:
		return true
	}
	return false
}

func knownOutcome(o Outcome) bool {
	switch o {
	case OutcomeApproved, OutcomeRejected, OutcomeBlocked, OutcomeError, OutcomeTimeout, OutcomeInvalid:
		return true
	}
	return false
}

// statusTime reads an RFC 3339 time string.
func statusTime(value json.RawMessage) (time.Time, error) {
	var s string
	if err := json.Unmarshal(value, &s); err != nil {
		return time.Time{}, fmt.Errorf("must be an RFC 3339 time string, not %s", textcut.Clip(string(value), 40))
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("must be an RFC 3339 time such as 2026-01-02T15:04:05Z, not %q", textcut.Clip(s, 40))
	}
	return t, nil
}
