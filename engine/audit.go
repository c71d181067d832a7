package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
)

// seal writes the trail's final event and waits for the whole trail.
func (r *decision) seal(ctx context.Context, ev AuditEvent) (uint64, error) {
	r.auditMu.Lock()
	seq, err := r.d.Trail.Seal(ctx, ev)
	r.auditMu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("sealing audit trail: %w", err)
	}
	return seq, nil
}

func (r *decision) event(name string, data any) AuditEvent {
	tenant := r.tenant
	if tenant == "" {
		tenant = UnknownTenant
	}
	common := proposalEventData{Action: r.action, Delivery: r.d.Attempt, PolicyEvalUS: r.evalUS}
	if r.p != nil && r.p.Operator != nil {
		common.Operator = r.p.Operator.ID
	}
	if name == EventVerdict {
		common.Action = "" // the verdict names its action itself
	}
	return AuditEvent{
		V: SchemaVersion, Event: name, Tenant: tenant, ProposalID: r.id,
		At: r.e.cfg.Clock.Now().UTC(), PolicyRevision: r.revision,
		Data: mergeJSON(mustJSON(common), mustJSON(data)),
	}
}

// proposalEventData is what every event of a proposal carries in its data.
type proposalEventData struct {
	Action string `json:"action,omitempty"`
	// Operator is the id of the human the agent acts for, once the
	// proposal is decoded.
	Operator string `json:"operator,omitempty"`
	// Delivery is the JetStream delivery count of the proposal message.
	Delivery int `json:"delivery,omitempty"`
	// PolicyEvalUS is how long the policy evaluation took, on every event
	// recorded after it.
	PolicyEvalUS int64 `json:"policy_eval_us,omitempty"`
}

// mergeJSON joins two JSON objects into one by splicing their members: the
// keys of base come first. It does not look for keys present in both, so
// callers keep them apart. When extra is not an object it is kept whole
// under "detail".
func mergeJSON(base, extra json.RawMessage) json.RawMessage {
	extra = bytes.TrimSpace(extra)
	if len(extra) == 0 || string(extra) == "null" {
		return base
	}
	if extra[0] != '{' {
		extra = mustJSON(map[string]json.RawMessage{"detail": extra})
	}
	if len(base) <= 2 { // "{}"
		return extra
	}
	inner := bytes.TrimSpace(extra[1 : len(extra)-1])
	if len(inner) == 0 {
		return base
	}
	out := make([]byte, 0, len(base)+len(extra))
	out = append(out, base[:len(base)-1]...)
	out = append(out, ',')
	out = append(out, inner...)
	return append(out, '}')
}

// recordReceived records the arrival of the delivery's bytes.
func (r *decision) recordReceived(ctx context.Context) error {
	if err := r.record(ctx, EventReceived, receivedData{Subject: r.d.Subject, Bytes: len(r.d.Data), SHA256: r.digest}); err != nil {
		return err
	}
	r.received = true
	return nil
}

// receivedData and policyDecidedData are the data of the two records every
// decided proposal has. Their members are in the order of their names, as
// the maps they replace were written.
type receivedData struct {
	Bytes   int    `json:"bytes"`
	SHA256  string `json:"sha256"`
	Subject string `json:"subject"`
}

type policyDecidedData struct {
	DeniedTools   []string   `json:"denied_tools"`
	Denies        []Deny     `json:"denies"`
	EvalUS        int64      `json:"eval_us"`
	Review        Route      `json:"review"`
	ReviewerTools []string   `json:"reviewer_tools"`
	Run           *RunPolicy `json:"run"`
	SOP           string     `json:"sop"`
}

func (r *decision) record(ctx context.Context, name string, data any) error {
	ev := r.event(name, data)
	r.auditMu.Lock()
	err := r.d.Trail.Record(ctx, ev)
	r.auditMu.Unlock()
	if err != nil {
		return fmt.Errorf("recording audit event %s: %w", name, err)
	}
	return nil
}

// recordBestEffort records an event whose failure will surface at Seal:
// an audit trail that lost an event refuses to seal, so the proposal is
// redelivered rather than acknowledged with a gap in its history.
func (r *decision) recordBestEffort(ctx context.Context, name string, data any) {
	_ = r.record(ctx, name, data)
}

func mustJSON(v any) json.RawMessage {
	switch v := v.(type) {
	case nil:
		return nil
	case json.RawMessage:
		return v // encoded by the engine already
	}
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"marshal_error": err.Error()})
	}
	return b
}
