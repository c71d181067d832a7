package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

const (
	// EndpointName is the endpoint's name in $SRV.INFO and $SRV.STATS.
	EndpointName = "operator"
	// defaultWait bounds how long one decision may take to be applied,
	// stored and audited.
	defaultWait = 30 * time.Second
)

// Resolver applies operator decisions to held run verdicts:
// *engine.Engine is one.
type Resolver interface {
	Resolve(ctx context.Context, d engine.OperatorDecision, trail engine.AuditTrail) (*gated.Verdict, error)
}

// VerdictHook is handed each verdict an operator decision produced.
type VerdictHook func(ctx context.Context, v *gated.Verdict) error

// Endpoint serves operator decisions as the endpoint "operator"
// of the review service (package intake's ServiceConfig.Operators), on
// gated.operator.<tenant>.<proposal_id>. A request is verified
// (List.Verify), applied (Resolver.Resolve, which stores and
// audits the new verdict), its follow-up published, the verdict
// published, and the verdict is the reply. Every refusal is audited as
// gated.EventOperatorRefused. Error replies are micro errors:
//
//	400  malformed: the description names the field
//	401  unsigned, bad signature, unknown key, key of another operator,
//	     signed_at too far from gated's clock
//	403  the operator may not decide for the tenant
//	404  no verdict is stored for the proposal
//	409  the verdict is not held for an operator, was decided already
//	     or is being settled, a held action is past its deadline, or the
//	     decision does not fit it (digest, criteria, decision)
//	503  the store or the audit trail failed, or gated is stopping:
//	     nothing was decided unless the description says so; retry
type Endpoint struct {
	list     *List
	resolver Resolver
	trails   func() engine.AuditTrail
	followUp VerdictHook
	publish  VerdictHook
	log      *zap.Logger
	// wait bounds one decision; now is the clock signed_at is checked
	// against.
	wait time.Duration
	now  func() time.Time
}

// NewEndpoint builds the operator endpoint; pass it to package intake's
// StartService in ServiceConfig.Operators. trails starts the audit trail
// of one decision. followUp is called with every
// verdict a decision produces before the verdict is published, and again
// with the stored operator verdict when an authenticated decision comes
// after it (so sending the decision again repairs a lost follow-up): it
// publishes the continuation or escalation the verdict sends, if any
// (gated.FollowUp), returns once it is stored, and must publish nothing
// twice. publish publishes the verdict on gated.verdicts.<tenant>.<id>.
// Every argument but log is required: else the error wraps
// ErrInvalidConfig.
func NewEndpoint(list *List, r Resolver, trails func() engine.AuditTrail, followUp, publish VerdictHook, log *zap.Logger) (*Endpoint, error) {
	switch {
	case list == nil || len(list.ops) == 0:
		return nil, fmt.Errorf("%w: the operator endpoint needs an operator list", ErrInvalidConfig)
	case r == nil:
		return nil, fmt.Errorf("%w: the operator endpoint needs a resolver (the engine)", ErrInvalidConfig)
	case trails == nil:
		return nil, fmt.Errorf("%w: the operator endpoint needs audit trails", ErrInvalidConfig)
	case followUp == nil:
		return nil, fmt.Errorf("%w: the operator endpoint needs a follow-up publisher", ErrInvalidConfig)
	case publish == nil:
		return nil, fmt.Errorf("%w: the operator endpoint needs a verdict publisher", ErrInvalidConfig)
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Endpoint{
		list: list, resolver: r, trails: trails, followUp: followUp, publish: publish, log: log,
		wait: defaultWait, now: time.Now,
	}, nil
}

// refusedData is the data of an gated.EventOperatorRefused audit
// event.
type refusedData struct {
	// Code is the error code replied, Field the field at fault (400), and
	// Reason the description replied.
	Code   int    `json:"code"`
	Field  string `json:"field,omitempty"`
	Reason string `json:"reason"`
	// Subject is where the message was sent.
	Subject string `json:"subject"`
	// Key is the public key the message names, when it is one; Operator
	// is the listed operator it belongs to, when it is listed. Neither
	// means the signature verified: see Reason.
	Key      string `json:"key,omitempty"`
	Operator string `json:"operator,omitempty"`
}

// Decide handles one request, the body and headers hdr that arrived on
// subject, and returns the verdict to reply with, or the refusal (reply
// with its Code and Description). It never returns both. lookup, when
// set, reads the stored verdict of a decision that comes after the
// verdict was decided. Package bus's review service calls it for each
// request of the endpoint.
func (e *Endpoint) Decide(ctx context.Context, lookup func(ctx context.Context, tenant, id string) (*gated.Verdict, error),
	subject string, hdr nats.Header, body []byte) (*gated.Verdict, *Refusal) {
	ctx, cancel := context.WithTimeout(ctx, e.wait)
	defer cancel()
	trail := e.trails()
	msg, op, err := e.list.Verify(subject, hdr, body, e.now())
	if err != nil {
		var r *Refusal
		if !errors.As(err, &r) {
			r = refusal(400, "", "%v", err)
		}
		return nil, e.refuse(ctx, trail, subject, hdr, op, r)
	}
	v, err := e.resolver.Resolve(ctx, msg.decision(op.Key), trail)
	if err == nil && v == nil {
		err = errors.New("the engine returned no verdict")
	}
	if err != nil {
		r := e.resolveRefusal(msg, err)
		if v == nil && lookup != nil && errors.Is(err, gated.ErrNotAwaiting) {
			v, _ = lookup(ctx, msg.Tenant, msg.ProposalID)
		}
		if v != nil && v.Stage == gated.StageOperator && v.ProposalSHA256 == msg.ProposalSHA256 && r.Code == 409 {
			// Decided already, by an operator: the verdict may still owe
			// its follow-up, which a failure kept from being published.
			// The hook publishes only what is not stored yet.
			if ferr := e.followUp(ctx, v); ferr != nil {
				e.log.Warn("publishing the follow-up of an operator verdict again", zap.String("key", v.Tenant+"."+v.ProposalID), zap.Error(ferr))
			}
		}
		if r.Code == 503 {
			// The engine's trail may be broken: record the refusal anew.
			trail = e.trails()
		}
		return nil, e.refuse(ctx, trail, subject, hdr, op, r)
	}
	if err := e.followUp(ctx, v); err != nil {
		e.log.Error("publishing the follow-up of an operator verdict", zap.String("key", v.Tenant+"."+v.ProposalID), zap.Error(err))
		return nil, refusal(503, "", "the decision is stored (proposal %s.%s is %s at stage %s, audit seq %d), but its %s could not be published: %v; "+
			"send the same decision again to have it published", v.Tenant, v.ProposalID, v.Outcome, v.Stage, v.AuditSeq, followUpName(v), err)
	}
	if err := e.publish(ctx, v); err != nil {
		// The verdict is stored, and the reply carries it; a fleet waiting
		// on the verdict subject finds it in the bucket.
		e.log.Warn("publishing an operator verdict", zap.String("key", v.Tenant+"."+v.ProposalID), zap.Error(err))
	}
	return v, nil
}

func followUpName(v *gated.Verdict) string {
	if v.Run != nil && v.Run.Next != "" {
		return v.Run.Next
	}
	return "follow-up"
}

// resolveRefusal maps an error of Resolve to the reply.
func (e *Endpoint) resolveRefusal(m *Message, err error) *Refusal {
	key := m.Tenant + "." + m.ProposalID
	switch {
	case errors.Is(err, gated.ErrNotFound):
		return refusal(404, "", "no verdict is stored for proposal %s (never decided, still under review, or past the verdict TTL)", key)
	case errors.Is(err, gated.ErrNotAwaiting):
		return refusal(409, "", "proposal %s: %v", key, err)
	case errors.Is(err, gated.ErrDecisionMismatch):
		return refusal(409, "", "proposal %s: %v", key, err)
	case errors.Is(err, gated.ErrClaimed):
		return refusal(409, "", "proposal %s is being settled by another decision or by its deadline: look at its verdict again", key)
	case errors.Is(err, gated.ErrExists):
		return refusal(409, "", "proposal %s was decided meanwhile by another decision: %v", key, err)
	}
	return refusal(503, "", "proposal %s: nothing was decided: %v; retry", key, err)
}

// refuse audits the refusal r and returns what to reply: r, or a 503 when
// the refusal could not be audited.
func (e *Endpoint) refuse(ctx context.Context, trail engine.AuditTrail, subject string, hdr nats.Header, op Signer, r *Refusal) *Refusal {
	tenant, id, ok := subjectTokens(subject)
	if !ok {
		tenant, id = gated.UnknownTenant, ""
	}
	data := refusedData{Code: r.Code, Field: r.Field, Reason: r.Reason, Subject: clipToken(subject), Operator: op.ID}
	if k := hdr.Get(wire.OperatorKeyHeader); nkeys.IsValidPublicUserKey(k) {
		data.Key = k
	}
	raw, _ := json.Marshal(data)
	ev := gated.AuditEvent{
		V: gated.SchemaVersion, Event: gated.EventOperatorRefused, Tenant: tenant, ProposalID: id,
		At: e.now().UTC(), Data: raw,
	}
	_, err := trail.Seal(ctx, ev)
	if errors.Is(err, engine.ErrTrailSealed) {
		_, err = e.trails().Seal(ctx, ev)
	}
	if err != nil {
		e.log.Error("auditing a refused operator decision", zap.String("subject", subject), zap.Int("code", r.Code), zap.Error(err))
		return refusal(503, "", "refused (%d: %s), and the refusal could not be audited: %v", r.Code, r.Description(), err)
	}
	e.log.Info("operator decision refused", zap.String("subject", subject), zap.Int("code", r.Code),
		zap.String("operator", op.ID), zap.String("reason", r.Description()))
	return r
}
