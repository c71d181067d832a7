package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/jsonw"
)

// statusStages maps the audit events that mark a step of a proposal's
// progress to the stage they publish: the status of a proposal follows the
// events gated appends for it, so a new stage is one entry here (and, when
// it carries more than the common members, a case in StatusJSON).
var statusStages = map[string]gated.StatusStage{
	gated.EventReceived:        gated.StatusReceived,
	gated.EventPolicyDecided:   gated.StatusPolicyDecided,
	gated.EventReviewStarted:   gated.StatusReviewStarted,
	gated.EventOperatorAwaited: gated.StatusAwaitingOperator,
	gated.EventVerdict:         gated.StatusDecided,
}

// StatusStageOf returns the status stage the audit event marks, and false
// when the event marks none.
func StatusStageOf(event string) (gated.StatusStage, bool) {
	s, ok := statusStages[event]
	return s, ok
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
func StatusJSON(ev gated.AuditEvent, seq uint64) (data []byte, ok bool, err error) {
	stage, ok := statusStages[ev.Event]
	if !ok || ev.Tenant == gated.UnknownTenant || !gated.ValidTenant(ev.Tenant) || !gated.ValidID(ev.ProposalID) {
		return nil, false, nil
	}
	size := 128 + len(ev.Tenant) + len(ev.ProposalID)
	if stage == gated.StatusDecided {
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
	case gated.StatusReviewStarted:
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
	case gated.StatusAwaitingOperator:
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
	case gated.StatusDecided:
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
	v, ok := jsonw.SetTopLevelUint(v, "audit_seq", seq)
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
