package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/jsonscan"
)

// eventHead is what every audit event of a proposal carries besides its
// own data: the proposal's address, the human the agent acts for, the
// delivery count, and the policy in force (its revision, and how long it
// took once it has decided). A decision keeps its head up to date as it
// learns these; its auditLog reads the head for every event.
type eventHead struct {
	tenant, id, action string
	// operator is the id of the human the agent acts for, once the
	// proposal is decoded.
	operator string
	// delivery is the JetStream delivery count of the proposal message.
	delivery int
	revision string
	evalUS   int64
}

// auditLog assembles the audit events of one proposal from its head and
// records them on the delivery's trail. Reviews of a quorum record
// concurrently, and a trail is written by one goroutine at a time, so the
// log serialises them.
type auditLog struct {
	trail AuditTrail
	clock Clock
	head  *eventHead
	mu    sync.Mutex
	// received is true once the delivery's arrival is recorded.
	received bool
}

// event builds the event name with data, under the head as it stands.
func (l *auditLog) event(name string, data any) gated.AuditEvent {
	h := l.head
	tenant := h.tenant
	if tenant == "" {
		tenant = gated.UnknownTenant
	}
	common := gated.AuditHead{Action: h.action, Operator: h.operator, Delivery: h.delivery, PolicyEvalUS: h.evalUS}
	if name == gated.EventVerdict {
		common.Action = "" // the verdict names its action itself
	}
	extra := gated.MarshalAuditData(data)
	dropNamedBy(&common, extra)
	return gated.AuditEvent{
		V: gated.SchemaVersion, Event: name, Tenant: tenant, ProposalID: h.id,
		At: l.clock.Now().UTC(), PolicyRevision: h.revision,
		Data: mergeJSON(gated.MarshalAuditData(common), extra),
	}
}

// dropNamedBy clears the members of h that data, an event's own data,
// names itself (operator.decided's operator is the one who decided): the
// data's member stands, and the event names each member once.
func dropNamedBy(h *gated.AuditHead, data json.RawMessage) {
	drop := func(key string) {
		switch key {
		case "action":
			h.Action = ""
		case "operator":
			h.Operator = ""
		case "delivery":
			h.Delivery = 0
		case "policy_eval_us":
			h.PolicyEvalUS = 0
		}
	}
	if jsonscan.Members(data, func(key, _ []byte) bool { drop(string(key)); return true }) {
		return
	}
	// A key with an escape, or data that is not an object (kept whole
	// under "detail", which the head does not name).
	var members map[string]json.RawMessage
	if json.Unmarshal(data, &members) == nil {
		for key := range members {
			drop(key)
		}
	}
}

// seal writes the trail's final event and waits for the whole trail.
func (l *auditLog) seal(ctx context.Context, name string, data any) (uint64, error) {
	ev := l.event(name, data)
	l.mu.Lock()
	seq, err := l.trail.Seal(ctx, ev)
	l.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("sealing audit trail: %w", err)
	}
	return seq, nil
}

// record appends an event to the trail.
func (l *auditLog) record(ctx context.Context, name string, data any) error {
	ev := l.event(name, data)
	l.mu.Lock()
	err := l.trail.Record(ctx, ev)
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("recording audit event %s: %w", name, err)
	}
	return nil
}

// flush starts storing the events recorded so far, before a step that
// may take long: the stream then shows the proposal's progress while it
// waits. A failure surfaces at Seal, as recordBestEffort's does.
func (l *auditLog) flush(ctx context.Context) {
	l.mu.Lock()
	_ = l.trail.Flush(ctx)
	l.mu.Unlock()
}

// recordBestEffort records an event whose failure will surface at Seal:
// an audit trail that lost an event refuses to seal, so the proposal is
// redelivered rather than acknowledged with a gap in its history.
func (l *auditLog) recordBestEffort(ctx context.Context, name string, data any) {
	_ = l.record(ctx, name, data)
}

// recordReceived records the arrival of a delivery's bytes.
func (l *auditLog) recordReceived(ctx context.Context, subject string, size int, digest string) error {
	if err := l.record(ctx, gated.EventReceived, gated.ReceivedData{Subject: subject, Bytes: size, SHA256: digest}); err != nil {
		return err
	}
	l.received = true
	return nil
}

// mergeJSON joins two JSON objects into one by splicing their members: the
// keys of base come first. It does not look for keys present in both, so
// callers keep them apart (auditLog.event drops the head's members its
// data names). When extra is not an object it is kept whole under
// "detail".
func mergeJSON(base, extra json.RawMessage) json.RawMessage {
	extra = bytes.TrimSpace(extra)
	if len(extra) == 0 || string(extra) == "null" {
		return base
	}
	if extra[0] != '{' {
		extra = gated.MarshalAuditData(map[string]json.RawMessage{"detail": extra})
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

// policyFailedData is the data of a policy.decided event whose
// evaluation failed: the members of PolicyDecidedData it has.
type policyFailedData struct {
	Error          string `json:"error"`
	ShadowRevision string `json:"shadow_revision,omitempty"`
}
