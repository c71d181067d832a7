package grants

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/grant"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/strictjson"
)

// maxGrantUse bounds a use request.
const maxGrantUse = grant.MaxTokenLen + 1024

// UseRequest is the body of a request on gated.grants.<tenant>.use and
// gated.grants.<tenant>.use.<agent>.
type UseRequest struct {
	Grant string `json:"grant"`
	// By says who uses it, free text for the audit trail: nothing checks
	// it. The identity gated checks is the subject's agent.
	By string `json:"by"`
}

// maxGrantUseBy bounds a use request's by, in bytes.
const maxGrantUseBy = 256

// decodeGrantUse reads a use request strictly, as every gated input is
// read: one JSON object with a string grant (required, not empty) and a
// string by (optional, at most maxGrantUseBy bytes), each once, names
// matched byte for byte, nothing else. encoding/json alone kept the last
// of two grants and matched "GRANT" to grant, so a request could read as
// one token to gated and as another to a proxy or log in front of it.
func decodeGrantUse(body []byte) (UseRequest, error) {
	var req UseRequest
	if len(body) > maxGrantUse {
		return req, fmt.Errorf("request is larger than %d bytes", maxGrantUse)
	}
	seen := false
	err := strictjson.Object(body, func(key string, value json.RawMessage) error {
		var dst *string
		switch key {
		case "grant":
			dst, seen = &req.Grant, true
		case "by":
			dst = &req.By
		default:
			return fmt.Errorf("request member %q is unknown: want {\"grant\": \"<token>\", \"by\": \"<who>\"}", clipMember(key))
		}
		if len(value) == 0 || value[0] != '"' || json.Unmarshal(value, dst) != nil {
			return fmt.Errorf("request member %s is not a string", key)
		}
		return nil
	})
	var member *strictjson.MemberError
	switch {
	case errors.As(err, &member) && errors.Is(member.Err, strictjson.ErrDuplicateMember):
		return UseRequest{}, fmt.Errorf("request member %q appears twice", clipMember(member.Key))
	case err != nil && strings.HasPrefix(err.Error(), "request member"):
		return UseRequest{}, err
	case err != nil:
		return UseRequest{}, fmt.Errorf(`request is not {"grant": "<token>", "by": "<who>"}: %v`, err)
	case !seen || req.Grant == "":
		return UseRequest{}, errors.New("request names no grant")
	case len(req.By) > maxGrantUseBy:
		return UseRequest{}, fmt.Errorf("by is longer than %d bytes", maxGrantUseBy)
	}
	return req, nil
}

// clipMember keeps a member name short in a refusal.
func clipMember(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// UseReply is gated's answer to a UseRequest: OK with the grant's id,
// or the reason it was refused.
type UseReply struct {
	OK    bool   `json:"ok"`
	GID   string `json:"gid,omitempty"`
	Error string `json:"error,omitempty"`
}

func (g *Service) serveUse(msg *nats.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply := g.use(ctx, msg.Subject, msg.Data)
	data, _ := json.Marshal(reply)
	if err := msg.Respond(data); err != nil {
		g.log.Debug("answering a grant use", zap.Error(err))
	}
}

// parseUseSubject reads the tenant, and the agent when there is one, of
// gated.grants.<tenant>.use or gated.grants.<tenant>.use.<agent> (an
// agent token is spelled as a proposal id, [A-Za-z0-9_-]{1,128}). A
// subject with a tenant but no valid agent token returns the tenant, not
// ok, so that its refusal is audited under the tenant.
func parseUseSubject(subject string) (tenant, agent string, ok bool) {
	rest, found := strings.CutPrefix(subject, wire.GrantSubjectPrefix)
	if !found {
		return "", "", false
	}
	tenant, rest, found = strings.Cut(rest, ".")
	if !found || !gated.ValidTenant(tenant) {
		return "", "", false
	}
	if rest == "use" {
		return tenant, "", true
	}
	agent, found = strings.CutPrefix(rest, "use.")
	if !found || !gated.ValidID(agent) {
		return tenant, "", false
	}
	return tenant, agent, true
}

// use decodes and applies one use request received on subject.
func (g *Service) use(ctx context.Context, subject string, body []byte) UseReply {
	tenant, agent, ok := parseUseSubject(subject)
	if !ok {
		if tenant == "" {
			tenant = gated.UnknownTenant
		}
		return g.refuse(ctx, tenant, "", "", "", "the subject is not gated.grants.<tenant>.use or gated.grants.<tenant>.use.<agent>, with an agent token [A-Za-z0-9_-]{1,128}")
	}
	req, err := decodeGrantUse(body)
	if err != nil {
		return g.refuse(ctx, tenant, agent, "", "", err.Error())
	}
	return g.UseAs(ctx, tenant, agent, req.Grant, req.By)
}

// Use uses the grant token for tenant, once, as a use on the tenant's
// subject (gated.grants.<tenant>.use) does: see UseAs, with no agent.
func (g *Service) Use(ctx context.Context, tenant, token, by string) UseReply {
	return g.UseAs(ctx, tenant, "", token, by)
}

// UseAs uses the grant token for tenant, once: it verifies the token
// under the published key set, checks the grant is tenant's and, when
// agent is not empty (a use on gated.grants.<tenant>.use.<agent>), that
// it was issued to agent, and moves its record from issued to used by
// compare-and-set, so that of two uses exactly one succeeds. Every use and
// refusal is audited (grant.used, grant.refused), with agent as "as".
func (g *Service) UseAs(ctx context.Context, tenant, agent, token, by string) UseReply {
	ks, err := g.KeySet(ctx)
	if err != nil {
		return g.refuse(ctx, tenant, agent, "", "", "the grant keys cannot be read: "+err.Error())
	}
	now := g.cfg.Now()
	c, err := grant.VerifyToken(token, ks, now)
	if err != nil {
		return g.refuse(ctx, tenant, agent, "", "", err.Error())
	}
	if c.Tenant != tenant {
		return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, fmt.Sprintf("grant refused: tenant %q is not the subject's tenant", c.Tenant))
	}
	key := c.Tenant + "." + c.ProposalID
	for range 5 {
		rec, rev, err := g.record(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			// The verdict may have been handed out before its record was
			// written (the review service answers from the store): the
			// stored verdict decides whether the grant is gated's.
			if rec, err = g.recordFromVerdict(ctx, c, token); err != nil {
				return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "unknown grant")
			}
			continue
		}
		if err != nil {
			return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "the grant record cannot be read: "+err.Error())
		}
		if rec.GID != c.GID {
			return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "unknown grant")
		}
		if agent != "" {
			owner, err := g.issuedTo(ctx, rec, token)
			if err != nil {
				return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "the agent the grant was issued to cannot be read: "+err.Error())
			}
			if owner != agent {
				return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, fmt.Sprintf("grant refused: it was not issued to agent %q", agent))
			}
		}
		switch rec.State {
		case StateUsed:
			at := ""
			if rec.UsedAt != nil {
				at = rec.UsedAt.UTC().Format(time.RFC3339)
			}
			return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, fmt.Sprintf("already used at %s by %s", at, rec.UsedBy))
		case StateExpired:
			return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "expired")
		}
		at := now.UTC()
		rec.State, rec.UsedAt, rec.UsedBy, rec.UsedAs = StateUsed, &at, by, agent
		data, err := json.Marshal(rec)
		if err != nil {
			return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, err.Error())
		}
		if _, err := g.records.Update(ctx, key, data, rev); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				continue // another use or the sweep changed it: read again
			}
			return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "the grant record cannot be updated: "+err.Error())
		}
		used := map[string]any{"gid": c.GID, "tenant": c.Tenant, "proposal_id": c.ProposalID, "action": c.Action, "by": by}
		if agent != "" {
			used["as"] = agent
		}
		if err := g.audit(ctx, tenant, c.ProposalID, gated.EventGrantUsed, used); err != nil {
			g.log.Error("auditing a grant use", zap.String("key", key), zap.Error(err))
		}
		return UseReply{OK: true, GID: c.GID}
	}
	return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "the grant record kept changing; try again")
}

// issuedTo returns the agent the grant of rec, whose token is token, was
// issued to: the record's agent, or, for a record without one (written
// by a gated that did not keep it), the agent of the stored verdict that
// carries token.
func (g *Service) issuedTo(ctx context.Context, rec Record, token string) (string, error) {
	if rec.Agent != "" {
		return rec.Agent, nil
	}
	v, err := g.storedVerdict(ctx, rec.Tenant+"."+rec.ProposalID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if v.Grant != token {
		return "", nil
	}
	return v.Agent, nil
}

// storedGrant is what gated reads of a stored verdict for a grant: its
// token and the agent it was issued to.
type storedGrant struct {
	Grant string `json:"grant"`
	Agent string `json:"agent"`
}

// storedVerdict reads the grant and agent of the verdict stored under
// key.
func (g *Service) storedVerdict(ctx context.Context, key string) (storedGrant, error) {
	e, err := g.verdicts.Get(ctx, key)
	if err != nil {
		return storedGrant{}, err
	}
	var v storedGrant
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return storedGrant{}, fmt.Errorf("the stored verdict %s is malformed: %w", key, err)
	}
	return v, nil
}

// recordFromVerdict writes the record of c, issued, when the stored
// verdict of its proposal carries exactly token.
func (g *Service) recordFromVerdict(ctx context.Context, c grant.Claims, token string) (Record, error) {
	v, err := g.storedVerdict(ctx, c.Tenant+"."+c.ProposalID)
	if err != nil {
		return Record{}, err
	}
	if v.Grant != token {
		return Record{}, errors.New("the stored verdict does not carry this grant")
	}
	rec := Record{GID: c.GID, Tenant: c.Tenant, ProposalID: c.ProposalID, Exp: c.ExpiresAt, Agent: v.Agent, State: StateIssued}
	data, _ := json.Marshal(rec)
	if _, err := g.records.Create(ctx, c.Tenant+"."+c.ProposalID, data); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return Record{}, err
	}
	return rec, nil
}

// refuse audits a refused use, asked on agent's subject when agent is
// not empty, and returns the refusal.
func (g *Service) refuse(ctx context.Context, tenant, agent, gid, id, reason string) UseReply {
	data := map[string]any{"reason": reason}
	if gid != "" {
		data["gid"] = gid
	}
	if agent != "" {
		data["as"] = agent
	}
	if err := g.audit(ctx, tenant, id, gated.EventGrantRefused, data); err != nil {
		g.log.Error("auditing a refused grant use", zap.String("tenant", tenant), zap.Error(err))
	}
	return UseReply{Error: reason}
}
