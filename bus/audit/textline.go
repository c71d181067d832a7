package audit

import (
	"encoding/json"
	"strconv"

	"github.com/gated/gated"
)

// dataKeys are the data members a text line of audit tail and audit query
// shows, in this order.
var dataKeys = [...]string{"outcome", "stage", "action", "operator", "persona", "plugin", "tool", "revision", "error", "reason"}

// The index of each member in dataKeys.
const (
	shownOutcome = iota
	shownStage
	shownAction
	shownOperator
	shownPersona
	shownPlugin
	shownTool
	shownRevision
	shownError
	shownReason
)

// shownMembers are the members of dataKeys an event's data has, each
// with its text; nil where the data has none.
type shownMembers [len(dataKeys)]*string

// set shows member k as v.
func (m *shownMembers) set(k int, v string) { m[k] = &v }

// setNonEmpty shows member k as v unless v is empty: the member of a type
// whose JSON leaves it out when it is empty.
func (m *shownMembers) setNonEmpty(k int, v string) {
	if v != "" {
		m.set(k, v)
	}
}

// textMembers reads the members a text line shows from ev's data, through
// the type gated declares for the event (gated.NewAuditEventData): the
// head's action and operator, then the event's own. The data of an event
// only read as stored (gated.AuditNote), of an event gated does not
// declare, or that does not decode into its type (a record of another
// version) is read member by member.
func textMembers(ev gated.AuditEvent) shownMembers {
	var m shownMembers
	if len(ev.Data) == 0 {
		return m
	}
	data, ok := gated.NewAuditEventData(ev.Event)
	var head gated.AuditHead
	if !ok || json.Unmarshal(ev.Data, data) != nil || json.Unmarshal(ev.Data, &head) != nil {
		data = new(gated.AuditNote)
		if json.Unmarshal(ev.Data, data) != nil {
			return m
		}
	}
	m.setNonEmpty(shownAction, head.Action)
	m.setNonEmpty(shownOperator, head.Operator)
	switch d := data.(type) {
	case *gated.AuditNote:
		for k, key := range dataKeys {
			raw, ok := (*d)[key]
			if !ok {
				continue
			}
			var s string
			if json.Unmarshal(raw, &s) != nil {
				s = string(raw)
			}
			m.set(k, s)
		}
	case *gated.Verdict:
		m.set(shownOutcome, string(d.Outcome))
		m.set(shownStage, string(d.Stage))
		m.set(shownAction, d.Action)
		m.set(shownReason, d.Reason)
	case *gated.PolicyDecidedData:
		m.setNonEmpty(shownError, d.Error)
	case *gated.PolicyRecheckedData:
		m.setNonEmpty(shownError, d.Error)
	case *gated.ReviewStartedData:
		m.set(shownPersona, d.Persona)
		m.set(shownPlugin, d.Plugin)
	case *gated.ReviewFinishedData:
		m.setNonEmpty(shownOutcome, string(d.Outcome))
		m.set(shownPlugin, d.Plugin)
		m.setNonEmpty(shownError, d.Error)
	case *gated.OperatorAwaitedData:
		m.set(shownReason, d.Reason)
	case *gated.OperatorDecidedData:
		m.setNonEmpty(shownOutcome, string(d.Outcome))
		m.set(shownOperator, d.Operator)
		m.setNonEmpty(shownReason, d.Reason)
	case *gated.PluginEventData:
		m.set(shownPlugin, d.Plugin)
		m.setNonEmpty(shownError, d.Error)
	case *gated.GrantUsedData:
		m.set(shownAction, d.Action)
	case *gated.GrantRefusedData:
		m.set(shownReason, d.Reason)
	case *gated.GrantOutcomeData:
		m.set(shownAction, d.Action)
		m.set(shownError, d.Error)
	case *gated.LocalDecision:
		m.set(shownOutcome, string(d.Outcome))
		m.set(shownStage, string(d.Stage))
		m.set(shownAction, d.Action)
	case *gated.LocalRefusedData:
		m.set(shownReason, d.Reason)
	case *gated.FlowClearedData:
		m.set(shownOperator, d.Operator)
		m.set(shownRevision, strconv.FormatUint(d.Revision, 10))
		m.setNonEmpty(shownReason, d.Reason)
	}
	return m
}
