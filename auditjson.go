package gated

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/gated/gated/internal/jsonscan"
	"github.com/gated/gated/internal/jsonw"
)

// Every proposal records a policy.decided event, and its data holds the
// proposal as received. encoding/json writes that data by reflection,
// then reads the proposal twice more to compact it (once inside
// ReplayInput's MarshalJSON, once for the marshaler's output). The data
// writes itself instead: the common members directly, the rare ones
// (holds, a run's section, history, a run's record, budgets) through
// encoding/json, each member exactly as encoding/json would write it.
// TestPolicyDecidedJSON and FuzzPolicyDecidedJSON hold the bytes equal.

// jsonAppender is event data that writes its own JSON; ok is false when
// it cannot, and MarshalAuditData then uses encoding/json.
type jsonAppender interface {
	appendJSON(dst []byte) (out []byte, ok bool)
}

func (d PolicyDecidedData) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"denied_tools":`...)
	b = appendJSONStrings(b, d.DeniedTools)
	b = append(b, `,"denies":`...)
	if d.Denies == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, dn := range d.Denies {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"rule":`...)
			b = jsonw.AppendString(b, dn.Rule)
			b = append(b, `,"message":`...)
			b = jsonw.AppendString(b, dn.Message)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"eval_us":`...)
	b = strconv.AppendInt(b, d.EvalUS, 10)
	var ok bool
	if len(d.Holds) > 0 {
		b = append(b, `,"holds":`...)
		if b, ok = appendMarshaled(b, d.Holds); !ok {
			return nil, false
		}
	}
	b = append(b, `,"review":`...)
	b = d.Review.appendJSON(b)
	b = append(b, `,"reviewer_tools":`...)
	b = appendJSONStrings(b, d.ReviewerTools)
	b = append(b, `,"run":`...)
	if d.Run == nil {
		b = append(b, "null"...)
	} else if b, ok = appendMarshaled(b, d.Run); !ok {
		return nil, false
	}
	if d.ShadowRevision != "" {
		b = append(b, `,"shadow_revision":`...)
		b = jsonw.AppendString(b, d.ShadowRevision)
	}
	b = append(b, `,"sop":`...)
	b = jsonw.AppendString(b, d.SOP)
	if d.Input != nil {
		b = append(b, `,"input":`...)
		if b, ok = d.Input.appendJSON(b); !ok {
			return nil, false
		}
	}
	return append(b, '}'), true
}

// appendJSON writes a policy.rechecked record's data: policy.decided's
// members, then what changed. PolicyRecheckedData must write itself: it would
// otherwise take PolicyDecidedData's method, and lose changed.
func (d PolicyRecheckedData) appendJSON(b []byte) ([]byte, bool) {
	b, ok := d.PolicyDecidedData.appendJSON(b)
	if !ok || len(d.Changed) == 0 {
		return b, ok
	}
	b = append(b[:len(b)-1], `,"changed":`...)
	b = appendJSONStrings(b, d.Changed)
	return append(b, '}'), true
}

// appendJSON writes the route as encoding/json does.
func (r Route) appendJSON(b []byte) []byte {
	b = append(b, `{"required":`...)
	b = strconv.AppendBool(b, r.Required)
	if r.Persona != "" {
		b = append(b, `,"persona":`...)
		b = jsonw.AppendString(b, r.Persona)
	}
	b = append(b, `,"quorum":`...)
	b = strconv.AppendInt(b, int64(r.Quorum), 10)
	b = append(b, `,"why":`...)
	b = jsonw.AppendString(b, r.Why)
	if r.Rule != "" {
		b = append(b, `,"rule":`...)
		b = jsonw.AppendString(b, r.Rule)
	}
	if len(r.Personas) > 0 {
		b = append(b, `,"personas":`...)
		b = appendJSONStrings(b, r.Personas)
	}
	if len(r.Also) > 0 {
		b = append(b, `,"also":`...)
		b = appendJSONStrings(b, r.Also)
	}
	if r.Blocked != "" {
		b = append(b, `,"blocked":`...)
		b = jsonw.AppendString(b, r.Blocked)
	}
	return append(b, '}')
}

// appendJSON writes the input as its MarshalJSON does.
func (in *ReplayInput) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"proposal":`...)
	switch {
	case in.Proposal == nil:
		b = append(b, "null"...)
	case compactPlainJSON(in.Proposal):
		b = append(b, in.Proposal...)
	default:
		var ok bool
		if b, ok = appendMarshaled(b, in.Proposal); !ok {
			return nil, false
		}
	}
	b = append(b, `,"persona":`...)
	b = jsonw.AppendString(b, in.Persona)
	b = append(b, `,"now":`...)
	now, err := in.Now.MarshalJSON()
	if err != nil {
		return nil, false
	}
	b = append(b, now...)
	var ok bool
	if len(in.History) > 0 {
		b = append(b, `,"history":`...)
		if b, ok = appendMarshaled(b, in.History); !ok {
			return nil, false
		}
	}
	if in.RunRecord != nil {
		b = append(b, `,"run_record":`...)
		if b, ok = appendMarshaled(b, in.RunRecord); !ok {
			return nil, false
		}
	}
	if bs := in.Budget; bs != nil {
		b = append(b, `,"budget":`...)
		if b, ok = appendMarshaled(b, &auditBudget{Tenant: auditCounters(bs.Tenant), Agent: auditCounters(bs.Agent)}); !ok {
			return nil, false
		}
	}
	return append(b, '}'), true
}

// ReplayInput is what the policy.decided record keeps of the policy's
// input, so that a replay can decide the proposal again with the same
// input under another policy: the proposal as received, the persona the
// evaluation started from, the clock, and the recent verdicts on the
// target and the run's record when the policy read them. The tenant and
// action are the record's own.
type ReplayInput struct {
	// Proposal is the proposal's JSON as received.
	Proposal json.RawMessage `json:"proposal"`
	// Persona is the persona the evaluation started from; the policy may
	// have routed elsewhere from it.
	Persona string `json:"persona"`
	// Now is the clock the policy saw.
	Now time.Time `json:"now"`
	// History is the recent verdicts on the target the policy saw.
	History []Verdict `json:"history,omitempty"`
	// RunRecord is the run's record the policy saw, for a run proposal.
	RunRecord *RunRecord `json:"run_record,omitempty"`
	// Budget is the budget counters the policy saw, when budgets are
	// kept.
	Budget *BudgetState `json:"budget,omitempty"`
}

// MarshalJSON writes the input as the policy.decided record keeps it: the
// budget counters that are zero are left out, as a replay reads them back
// as zero; a budget kept is written even when every counter is zero.
func (in ReplayInput) MarshalJSON() ([]byte, error) {
	type plain ReplayInput
	out := struct {
		plain
		Budget *auditBudget `json:"budget,omitempty"`
	}{plain: plain(in)}
	if b := in.Budget; b != nil {
		out.Budget = &auditBudget{Tenant: auditCounters(b.Tenant), Agent: auditCounters(b.Agent)}
	}
	return json.Marshal(out)
}

// auditBudget is a BudgetState as a record keeps it.
type auditBudget struct {
	Tenant auditCounters `json:"tenant"`
	Agent  auditCounters `json:"agent"`
}

// auditCounters are BudgetCounters without their zero counters.
type auditCounters struct {
	Proposals       int64 `json:"proposals,omitempty"`
	Reads           int64 `json:"reads,omitempty"`
	Tokens          int64 `json:"tokens,omitempty"`
	ReviewsInFlight int64 `json:"reviews_in_flight,omitempty"`
	HoldsPending    int64 `json:"holds_pending,omitempty"`
	Refusals        int64 `json:"refusals_10m,omitempty"`
	BudgetRefusals  int64 `json:"budget_refusals_10m,omitempty"`
}

// MarshalAuditData returns the JSON of v, an event's data, as the audit
// trail records it: json.RawMessage as it is, the policy.decided and
// policy.rechecked data written by their own codecs (byte for byte what
// encoding/json writes), anything else by encoding/json, and a value
// encoding/json refuses as {"marshal_error": why}.
func MarshalAuditData(v any) json.RawMessage {
	switch v := v.(type) {
	case nil:
		return nil
	case json.RawMessage:
		return v // encoded already
	case jsonAppender:
		if b, ok := v.appendJSON(make([]byte, 0, 1024)); ok {
			return b
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"marshal_error": err.Error()})
	}
	return b
}

// appendMarshaled appends v as encoding/json writes it.
func appendMarshaled(b []byte, v any) ([]byte, bool) {
	out, err := json.Marshal(v)
	if err != nil {
		return nil, false
	}
	return append(b, out...), true
}

// appendJSONStrings appends ss as encoding/json writes a []string: null
// when it is nil.
func appendJSONStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonw.AppendString(b, s)
	}
	return append(b, ']')
}

// compactPlainJSON reports whether the valid JSON data is already as
// encoding/json writes a json.RawMessage: no white space outside its
// strings, and no byte it would escape (<, > and &, and the line and
// paragraph separators, whose bytes are outside ASCII) anywhere.
func compactPlainJSON(data []byte) bool {
	for _, c := range data {
		if c >= 0x80 || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	for i := 0; i < len(data); {
		switch data[i] {
		case '"':
			if i = jsonscan.SkipString(data, i); i < 0 {
				return false
			}
		case ' ', '\t', '\n', '\r':
			return false
		default:
			i++
		}
	}
	return true
}
