package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/gated/gated/internal/strictjson"
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

// statusStages maps the audit events that mark a step of a proposal's
// progress to the stage they publish: the status of a proposal follows the
// events gated appends for it, so a new stage is one entry here (and, when
// it carries more than the common members, a case in StatusJSON).
var statusStages = map[string]StatusStage{
	EventReceived:        StatusReceived,
	EventPolicyDecided:   StatusPolicyDecided,
	EventReviewStarted:   StatusReviewStarted,
	EventOperatorAwaited: StatusAwaitingOperator,
	EventVerdict:         StatusDecided,
}

// StatusStageOf returns the status stage the audit event marks, and false
// when the event marks none.
func StatusStageOf(event string) (StatusStage, bool) {
	s, ok := statusStages[event]
	return s, ok
}

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

// StatusJSON derives the status event of an audit event of a proposal
// and encodes it: ok is false when the event marks no stage or names no
// proposal (no id, or a tenant or id that is not a subject token: the
// status subject is built from them). seq is the audit stream sequence of
// the event, set as the verdict's audit_seq on decided. An error means the
// event's data is not what gated records for it.
//
// It runs for every audit event gated records, so it encodes by hand: the
// members common to every stage are tokens and a time, and the verdict of
// a decided status is the bytes of the audit record's verdict, not a new
// encoding of it.
func StatusJSON(ev AuditEvent, seq uint64) (data []byte, ok bool, err error) {
	stage, ok := statusStages[ev.Event]
	if !ok || ev.Tenant == UnknownTenant || !ValidTenant(ev.Tenant) || !ValidID(ev.ProposalID) {
		return nil, false, nil
	}
	size := 128 + len(ev.Tenant) + len(ev.ProposalID)
	if stage == StatusDecided {
		size += len(ev.Data) + 24
	}
	b := make([]byte, 0, size)
	b = append(b, `{"v":1,"tenant":"`...)
	b = append(b, ev.Tenant...)
	b = append(b, `","id":"`...)
	b = append(b, ev.ProposalID...)
	b = append(b, `","stage":"`...)
	b = append(b, stage...)
	b = append(b, `","at":"`...)
	b = ev.At.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	switch stage {
	case StatusReviewStarted:
		var d struct {
			Persona  string    `json:"persona"`
			Deadline time.Time `json:"deadline"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return nil, false, fmt.Errorf("reading the data of %s: %w", ev.Event, err)
		}
		if d.Persona == "" {
			return nil, false, fmt.Errorf("reading the data of %s: it names no persona", ev.Event)
		}
		b = appendMember(b, "reviewer", d.Persona)
		if !d.Deadline.IsZero() {
			b = appendTime(b, "deadline", d.Deadline)
		}
	case StatusAwaitingOperator:
		var d struct {
			Deadline time.Time `json:"deadline"`
			Reason   string    `json:"reason"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return nil, false, fmt.Errorf("reading the data of %s: %w", ev.Event, err)
		}
		if d.Deadline.IsZero() {
			return nil, false, fmt.Errorf("reading the data of %s: it names no deadline", ev.Event)
		}
		b = appendTime(b, "deadline", d.Deadline)
		if d.Reason != "" {
			b = appendMember(b, "reason", d.Reason)
		}
	case StatusDecided:
		v, err := recordedVerdict(ev.Data, seq)
		if err != nil {
			return nil, false, fmt.Errorf("reading the verdict of %s: %w", ev.Event, err)
		}
		b = append(b, `,"verdict":`...)
		b = append(b, v...)
	}
	return append(b, '}'), true, nil
}

// recordedVerdict is the verdict in the data of a verdict.decided record,
// with audit_seq set to seq. The data is the members every event of a
// proposal carries (proposalEventData, scalars) joined with the verdict's
// own encoding, whose first member is "v" (auditLog.event, mergeJSON): so
// the verdict starts at the first "v": key. No string holds those bytes,
// since a quote inside a JSON string is escaped.
func recordedVerdict(data json.RawMessage, seq uint64) ([]byte, error) {
	i := bytes.Index(data, []byte(`"v":`))
	if i < 1 || (data[i-1] != '{' && data[i-1] != ',') {
		return nil, errors.New("no verdict in the record's data")
	}
	v := make([]byte, 0, len(data)-i+1)
	v = append(v, '{')
	v = append(v, data[i:]...)
	v, ok := setTopLevelUint(v, "audit_seq", seq)
	if !ok {
		return nil, errors.New("the verdict has no audit_seq")
	}
	return v, nil
}

// appendMember appends ,"name":value with value a JSON string.
func appendMember(b []byte, name, value string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	q, _ := json.Marshal(value) // a string always encodes
	return append(b, q...)
}

// appendTime appends ,"name":"<RFC 3339 time>".
func appendTime(b []byte, name string, t time.Time) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':', '"')
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
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
				return statusErr(key, "must be 1, not %s", clipText(string(value), 40))
			}
			st.V = 1
		case "tenant":
			if err := json.Unmarshal(value, &st.Tenant); err != nil || !ValidTenant(st.Tenant) {
				return statusErr(key, "must be a tenant token [a-z0-9_-]{1,64}, not %s", clipText(string(value), 80))
			}
		case "id":
			if err := json.Unmarshal(value, &st.ID); err != nil || !ValidID(st.ID) {
				return statusErr(key, "must be a proposal id [A-Za-z0-9_-]{1,128}, not %s", clipText(string(value), 160))
			}
		case "stage":
			var s string
			if err := json.Unmarshal(value, &s); err != nil {
				return statusErr(key, "must be a string, not %s", clipText(string(value), 40))
			}
			st.Stage = StatusStage(s)
			if !knownStage(st.Stage) {
				return statusErr(key, "%q is not a stage of the v1 status contract", clipText(s, 40))
			}
		case "at":
			t, err := statusTime(value)
			if err != nil {
				return statusErr(key, "%v", err)
			}
			st.At = t
		case "reviewer":
			if err := json.Unmarshal(value, &st.Reviewer); err != nil || st.Reviewer == "" {
				return statusErr(key, "must be a non-empty string, not %s", clipText(string(value), 40))
			}
		case "deadline":
			t, err := statusTime(value)
			if err != nil {
				return statusErr(key, "%v", err)
			}
			st.Deadline = &t
		case "reason":
			if err := json.Unmarshal(value, &st.Reason); err != nil {
				return statusErr(key, "must be a string, not %s", clipText(string(value), 40))
			}
		case "verdict":
			if len(value) == 0 || value[0] != '{' {
				return statusErr(key, "must be an object, not %s", clipText(string(value), 40))
			}
			v := new(Verdict)
			if err := json.Unmarshal(value, v); err != nil {
				return statusErr(key, "is not a verdict: %s", clipText(err.Error(), 200))
			}
			st.Verdict = v
		default:
			return statusErr(clipText(key, 64), "is not a field of the v1 status event")
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
			return nil, statusErr(clipText(me.Key, 64), "appears more than once")
		case errors.Is(err, strictjson.ErrNotObject):
			return nil, statusErr("", "must be a JSON object")
		case errors.Is(err, strictjson.ErrTrailingData):
			return nil, statusErr("", "unexpected data after the status object")
		}
		return nil, statusErr("", "not valid JSON: %s", clipText(err.Error(), 200))
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
				clipText(v.Tenant, 64), clipText(v.ProposalID, 128), st.Tenant, st.ID)
		case !knownOutcome(v.Outcome):
			return nil, statusErr("verdict.outcome", "%q is not an outcome", clipText(string(v.Outcome), 40))
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
		return time.Time{}, fmt.Errorf("must be an RFC 3339 time string, not %s", clipText(string(value), 40))
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("must be an RFC 3339 time such as 2026-01-02T15:04:05Z, not %q", clipText(s, 40))
	}
	return t, nil
}
