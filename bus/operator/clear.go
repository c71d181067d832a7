package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nkeys"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/flow"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// FlowClearEndpointName is the name of the flow clearing endpoint in
// $SRV.INFO and $SRV.STATS.
const FlowClearEndpointName = "flow_clear"

// maxAgentBytes bounds the agent a clear names.
const maxAgentBytes = 1024

// ClearMessage is the signed body of an operator's clearing of an agent's
// flow state. Every field is required but the reason, and the JSON must
// hold no other field.
type ClearMessage struct {
	// V is the message's version, 1; SignClear sets it when it is zero.
	V int `json:"v"`
	// Tenant and Agent name the state (requested_by.agent); Tenant must
	// be the subject's.
	Tenant string `json:"tenant"`
	Agent  string `json:"agent"`
	// Revision is the revision of the state's record the operator read
	// (flow.Store.Snapshot): gated clears only that record, so a message
	// sent again, or one signed before the agent acted anew, clears
	// nothing.
	Revision uint64 `json:"revision"`
	// Operator is the operator's id in gated's operator list.
	Operator string `json:"operator"`
	// Reason says why, for the audit trail.
	Reason string `json:"reason"`
	// SignedAt is when the message was signed; gated refuses it more than
	// five minutes from its own clock.
	SignedAt time.Time `json:"signed_at"`
}

var clearRequired = []string{"v", "tenant", "agent", "revision", "operator", "signed_at"}

// DecodeClear decodes and checks a clear message strictly, as
// DecodeMessage does a decision. Its errors are *Refusal with code 400
// naming the field.
func DecodeClear(data []byte) (*ClearMessage, error) {
	if len(data) > MaxMessageBytes {
		return nil, refusal(400, "", "message is %d bytes, more than %d", len(data), MaxMessageBytes)
	}
	if !utf8.Valid(data) {
		return nil, refusal(400, "", "message is not valid UTF-8")
	}
	var m ClearMessage
	seen := map[string]bool{}
	err := walkObject("", data, func(key string, raw json.RawMessage) error {
		seen[key] = true
		var err error
		switch key {
		case "v":
			m.V, err = decodeVersion(key, raw)
		case "tenant":
			if m.Tenant, err = decodeString(key, raw); err == nil && (!gated.ValidTenant(m.Tenant) || m.Tenant == gated.UnknownTenant) {
				err = refusal(400, key, "%q must match [a-z0-9_-]{1,64}", clipToken(m.Tenant))
			}
		case "agent":
			if m.Agent, err = decodeString(key, raw); err == nil && (strings.TrimSpace(m.Agent) == "" || len(m.Agent) > maxAgentBytes) {
				err = refusal(400, key, "must be an agent's requested_by.agent: not blank, at most %d bytes", maxAgentBytes)
			}
		case "revision":
			if err = json.Unmarshal(raw, &m.Revision); err != nil || m.Revision == 0 || string(raw) != fmt.Sprint(m.Revision) {
				err = refusal(400, key, "must be the positive integer revision of the state's record")
			}
		case "operator":
			if m.Operator, err = decodeString(key, raw); err == nil && !ValidID(m.Operator) {
				err = refusal(400, key, "%q must match [A-Za-z0-9._@-]{1,64}", clipToken(m.Operator))
			}
		case "reason":
			m.Reason, err = decodeReason(key, raw)
		case "signed_at":
			m.SignedAt, err = decodeSignedAt(key, raw)
		default:
			err = refusal(400, fieldName(key), "unknown field; a clear message has v, tenant, agent, revision, operator, reason and signed_at")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, key := range clearRequired {
		if !seen[key] {
			return nil, refusal(400, key, "is required")
		}
	}
	return &m, nil
}

// SignClear encodes msg and signs it as Sign does a decision.
func SignClear(seed []byte, msg ClearMessage) (body []byte, hdr nats.Header, err error) {
	return signBody(seed, func() ([]byte, error) {
		if msg.V == 0 {
			msg.V = messageVersion
		}
		if msg.SignedAt.IsZero() {
			msg.SignedAt = time.Now()
		}
		msg.SignedAt = msg.SignedAt.UTC()
		body, err := json.Marshal(msg)
		if err != nil {
			return nil, fmt.Errorf("encoding the clear message: %w", err)
		}
		if _, err := DecodeClear(body); err != nil {
			return nil, err
		}
		return body, nil
	})
}

// Cleared is the reply to an accepted clear: the state that was cleared
// and the audit sequence of its flow.cleared event.
type Cleared struct {
	Tenant   string `json:"tenant"`
	Agent    string `json:"agent"`
	Revision uint64 `json:"revision"`
	Actions  int    `json:"actions"`
	AuditSeq uint64 `json:"audit_seq"`
}

// SendClear sends a signed clear (body and hdr from SignClear) to
// gated.flowclear.<tenant> and returns what gated cleared. Its errors are
// Send's.
func SendClear(ctx context.Context, nc *nats.Conn, body []byte, hdr nats.Header) (*Cleared, error) {
	m, err := DecodeClear(body)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, fleet.DefaultWait)
		defer cancel()
	}
	subject := wire.FlowClearSubject(m.Tenant)
	reply, err := nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: body, Header: hdr})
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%w: nothing answers %s: is gated running with --operators?", fleet.ErrServiceUnavailable, subject)
	}
	if err != nil {
		return nil, fmt.Errorf("sending the clear on %s: %w", subject, err)
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		r := &Refusal{Reason: reply.Header.Get(micro.ErrorHeader)}
		if _, err := fmt.Sscanf(code, "%d", &r.Code); err != nil {
			r.Code = 500
		}
		return nil, r
	}
	var c Cleared
	if err := json.Unmarshal(reply.Data, &c); err != nil {
		return nil, fmt.Errorf("decoding the reply on %s: %w", subject, err)
	}
	if c.Tenant != m.Tenant || c.Agent != m.Agent || c.Revision != m.Revision {
		return nil, fmt.Errorf("the reply on %s is the clearing of another state", subject)
	}
	return &c, nil
}

// VerifyClear checks a clear that arrived on subject as Verify checks a
// decision: signed by a listed key over the exact body, the key's own
// operator, the subject's tenant, a tenant the operator may act for, and
// a fresh signed_at.
func (l *List) VerifyClear(subject string, hdr nats.Header, body []byte, now time.Time) (*ClearMessage, Signer, error) {
	tenant, ok := strings.CutPrefix(subject, wire.FlowClearSubjectPrefix)
	if !ok || !gated.ValidTenant(tenant) || tenant == gated.UnknownTenant {
		return nil, Signer{}, refusal(400, "subject", "%q is not gated.flowclear.<tenant> with a valid tenant", clipToken(subject))
	}
	op, err := l.verifySignature(hdr, body)
	if err != nil {
		return nil, op, err
	}
	m, err := DecodeClear(body)
	if err != nil {
		return nil, op, err
	}
	switch {
	case m.Operator != op.ID:
		return m, op, refusal(401, "", "key %s is operator %s's, but the message names operator %s", op.Key, op.ID, m.Operator)
	case m.Tenant != tenant:
		return m, op, refusal(400, "tenant", "the message names tenant %s, the subject %s", m.Tenant, tenant)
	case !op.Allows(m.Tenant):
		return m, op, refusal(403, "", "operator %s may not clear flow state of tenant %s (its tenants: %s)", op.ID, m.Tenant, strings.Join(op.Tenants, ", "))
	}
	if skew := now.Sub(m.SignedAt); skew > clockSkew || skew < -clockSkew {
		return m, op, refusal(401, "", "signed_at %s is %s from gated's clock (%s); at most %s either way is accepted: sign again, and check the operator's clock",
			m.SignedAt.UTC().Format(time.RFC3339), skew.Round(time.Second), now.UTC().Format(time.RFC3339), clockSkew)
	}
	return m, op, nil
}

// FlowStates reads and clears agents' flow state: *flow.Store is one.
type FlowStates interface {
	Snapshot(ctx context.Context, tenant, agent string) (flow.Snapshot, error)
	Clear(ctx context.Context, tenant, agent string, rev uint64) error
}

// FlowClearer serves operators' clearing of flow state, the endpoint
// "flow_clear" on gated.flowclear.<tenant>. A clear is verified
// (List.VerifyClear), the state's record must still be at the revision
// the message names, the clearing is audited as gated.EventFlowCleared,
// and only then is the record removed: a clear that cannot be audited
// removes nothing. Every refusal is audited as
// gated.EventOperatorRefused. Error replies are micro errors: 400
// malformed, 401 not authenticated, 403 tenant not allowed, 404 no state
// to clear, 409 the state changed since the operator read it (or the
// message was sent before), 503 the state or the audit trail failed.
type FlowClearer struct {
	list   *List
	flows  FlowStates
	trails func() engine.AuditTrail
	log    *zap.Logger
	now    func() time.Time
}

// NewFlowClearer builds the endpoint; every argument but log is
// required.
func NewFlowClearer(list *List, flows FlowStates, trails func() engine.AuditTrail, log *zap.Logger) (*FlowClearer, error) {
	switch {
	case list == nil || len(list.ops) == 0:
		return nil, fmt.Errorf("%w: clearing flow state needs an operator list", ErrInvalidConfig)
	case flows == nil:
		return nil, fmt.Errorf("%w: clearing flow state needs the flow store", ErrInvalidConfig)
	case trails == nil:
		return nil, fmt.Errorf("%w: clearing flow state needs audit trails", ErrInvalidConfig)
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &FlowClearer{list: list, flows: flows, trails: trails, log: log, now: time.Now}, nil
}

// Clear handles one request, the body and headers hdr that arrived on
// subject, and returns what it cleared or the refusal, never both.
func (c *FlowClearer) Clear(ctx context.Context, subject string, hdr nats.Header, body []byte) (*Cleared, *Refusal) {
	ctx, cancel := context.WithTimeout(ctx, defaultWait)
	defer cancel()
	trail := c.trails()
	m, op, err := c.list.VerifyClear(subject, hdr, body, c.now())
	if err != nil {
		var r *Refusal
		if !errors.As(err, &r) {
			r = refusal(400, "", "%v", err)
		}
		return nil, c.refuse(ctx, trail, subject, hdr, op, r)
	}
	snap, err := c.flows.Snapshot(ctx, m.Tenant, m.Agent)
	switch {
	case err != nil:
		return nil, c.refuse(ctx, trail, subject, hdr, op, refusal(503, "", "nothing was cleared: %v; retry", err))
	case snap.Revision == 0:
		return nil, c.refuse(ctx, trail, subject, hdr, op, refusal(404, "", "agent %q of tenant %s has no flow state: nothing to clear", clipToken(m.Agent), m.Tenant))
	case snap.Revision != m.Revision:
		return nil, c.refuse(ctx, trail, subject, hdr, op, refusal(409, "", "the flow state of agent %q of tenant %s is at revision %d, not %d: it changed since it was read, or this clear was sent before; read it and sign again",
			clipToken(m.Agent), m.Tenant, snap.Revision, m.Revision))
	}
	data, _ := json.Marshal(gated.FlowClearedData{
		Operator: op.ID, Key: op.Key, Agent: m.Agent, Reason: m.Reason,
		Revision: snap.Revision, Recent: snap.Recent, Corrupt: snap.Corrupt,
	})
	seq, err := trail.Seal(ctx, gated.AuditEvent{
		V: gated.SchemaVersion, Event: gated.EventFlowCleared, Tenant: m.Tenant, At: c.now().UTC(), Data: data,
	})
	if err != nil {
		c.log.Error("auditing a flow clear", zap.String("tenant", m.Tenant), zap.Error(err))
		return nil, c.refuse(ctx, c.trails(), subject, hdr, op, refusal(503, "", "the clear could not be audited, so nothing was cleared: %v; retry", err))
	}
	if err := c.flows.Clear(ctx, m.Tenant, m.Agent, snap.Revision); err != nil {
		code := 503
		if errors.Is(err, flow.ErrChanged) {
			code = 409
		}
		return nil, c.refuse(ctx, c.trails(), subject, hdr, op, refusal(code, "", "the clear is audited (seq %d) but nothing was cleared: %v; read the state and sign again", seq, err))
	}
	c.log.Info("flow state cleared", zap.String("tenant", m.Tenant), zap.String("agent", m.Agent),
		zap.String("operator", op.ID), zap.Uint64("audit_seq", seq))
	return &Cleared{Tenant: m.Tenant, Agent: m.Agent, Revision: snap.Revision, Actions: len(snap.Recent), AuditSeq: seq}, nil
}

// refuse audits the refusal r as Endpoint.refuse does, under the
// subject's tenant.
func (c *FlowClearer) refuse(ctx context.Context, trail engine.AuditTrail, subject string, hdr nats.Header, op Signer, r *Refusal) *Refusal {
	tenant, ok := strings.CutPrefix(subject, wire.FlowClearSubjectPrefix)
	if !ok || !gated.ValidTenant(tenant) || tenant == gated.UnknownTenant {
		tenant = gated.UnknownTenant
	}
	data := refusedData{Code: r.Code, Field: r.Field, Reason: r.Reason, Subject: clipToken(subject), Operator: op.ID}
	if k := hdr.Get(wire.OperatorKeyHeader); nkeys.IsValidPublicUserKey(k) {
		data.Key = k
	}
	raw, _ := json.Marshal(data)
	ev := gated.AuditEvent{V: gated.SchemaVersion, Event: gated.EventOperatorRefused, Tenant: tenant, At: c.now().UTC(), Data: raw}
	_, err := trail.Seal(ctx, ev)
	if errors.Is(err, engine.ErrTrailSealed) {
		_, err = c.trails().Seal(ctx, ev)
	}
	if err != nil {
		c.log.Error("auditing a refused flow clear", zap.String("subject", subject), zap.Int("code", r.Code), zap.Error(err))
		return refusal(503, "", "refused (%d: %s), and the refusal could not be audited: %v", r.Code, r.Description(), err)
	}
	return r
}
