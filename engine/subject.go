package engine

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
)

// parseProposalSubject splits gated.proposals.<tenant>.<action> into its
// tokens and checks each. The error is a *FieldError on field "subject".
func parseProposalSubject(subject string) (tenant, action string, err error) {
	rest, ok := strings.CutPrefix(subject, wire.ProposalSubjectPrefix)
	if !ok {
		return "", "", fieldErr("subject", "%q does not start with %q", subject, wire.ProposalSubjectPrefix)
	}
	tenant, action, ok = strings.Cut(rest, ".")
	if !ok || strings.Contains(action, ".") {
		return "", "", fieldErr("subject", "%q must have the form gated.proposals.<tenant>.<action>", subject)
	}
	if !gated.ValidTenant(tenant) {
		return "", "", fieldErr("subject", "tenant token %q must match [a-z0-9_-]{1,64}", tenant)
	}
	if tenant == gated.UnknownTenant {
		return "", "", fieldErr("subject", "tenant %q is reserved for audit events whose tenant is unknown", tenant)
	}
	if !gated.ValidAction(action) {
		return "", "", fieldErr("subject", "action token %q must match [A-Za-z0-9_-]{1,128}", action)
	}
	return tenant, action, nil
}

// recoverAddress extracts the tenant and id of a proposal that failed to
// decode, so its invalid verdict can still reach the proposer. The subject
// tenant is authoritative (NATS permissions guard it); the id comes from
// the payload or, failing that, from the Nats-Msg-Id header
// "<tenant>.<id>". It returns empty strings when nothing trustworthy can be
// recovered.
func recoverAddress(subject string, data []byte, msgID string) (tenant, id string) {
	rest, ok := strings.CutPrefix(subject, wire.ProposalSubjectPrefix)
	if !ok {
		return "", ""
	}
	tenant, _, _ = strings.Cut(rest, ".")
	if !gated.ValidTenant(tenant) || tenant == gated.UnknownTenant {
		return "", ""
	}
	var probe struct {
		ID json.RawMessage `json:"id"`
	}
	if len(data) <= gated.DefaultMaxBytes && json.Unmarshal(data, &probe) == nil {
		var s string
		if json.Unmarshal(probe.ID, &s) == nil && gated.ValidID(s) {
			return tenant, s
		}
	}
	if t, s, ok := strings.Cut(msgID, "."); ok && t == tenant && gated.ValidID(s) {
		return tenant, s
	}
	return tenant, ""
}

// fieldErr is the *FieldError of a subject or delivery that does not
// name a proposal.
func fieldErr(field, format string, args ...any) *gated.FieldError {
	return &gated.FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}
