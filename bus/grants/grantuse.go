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
// under the published key set, checks the grant is tenant's, that the
// stored verdict of its proposal carries exactly this token (so a grant
// signed for a verdict that was never stored, or that lost the store to
// another delivery's, is not gated's) and, when agent is not empty (a use
// on gated.grants.<tenant>.use.<agent>), that it was issued to agent. It
// then creates the grant's record, used, where none is: of any number of
// concurrent uses, on any number of gated, exactly one creates it. Every
// use and refusal is audited (grant.used, grant.refused), with agent as
// "as".
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
	v, err := g.storedVerdict(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "unknown grant")
	case err != nil:
		return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "the stored verdict cannot be read: "+err.Error())
	case v.Grant != token:
		return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "unknown grant")
	case agent != "" && v.Agent != agent:
		return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, fmt.Sprintf("grant refused: it was not issued to agent %q", agent))
	}
	at := now.UTC()
	if g.cfg.Executed != nil {
		use := Executed{Tenant: c.Tenant, ProposalID: c.ProposalID, Action: c.Action, Agent: v.Agent, Labels: v.Labels, At: at}
		if err := g.cfg.Executed(ctx, use); err != nil {
			return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "the agent's flow state cannot be recorded: "+err.Error())
		}
	}
	rec := Record{GID: c.GID, Tenant: c.Tenant, ProposalID: c.ProposalID, Exp: c.ExpiresAt, Agent: v.Agent,
		State: StateUsed, UsedAt: &at, UsedBy: by, UsedAs: agent}
	data, err := json.Marshal(rec)
	if err != nil {
		return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, err.Error())
	}
	for range 5 {
		_, err := g.records.Create(ctx, key, data)
		if err == nil {
			g.auditUsed(ctx, tenant, agent, by, c)
			return UseReply{OK: true, GID: c.GID}
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "the grant record cannot be written: "+err.Error())
		}
		old, rev, err := g.record(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			continue // gone since the create: create again
		case err != nil:
			return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "the grant record cannot be read: "+err.Error())
		case old.GID != c.GID:
			// The record of an older grant, of a verdict stored under a
			// reused id after the old one's TTL: this grant replaces it,
			// by compare-and-set.
			if _, err := g.records.Update(ctx, key, data, rev); err == nil {
				g.auditUsed(ctx, tenant, agent, by, c)
				return UseReply{OK: true, GID: c.GID}
			}
			continue
		case old.State == StateExpired:
			return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "expired")
		}
		when := ""
		if old.UsedAt != nil {
			when = old.UsedAt.UTC().Format(time.RFC3339)
		}
		return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, fmt.Sprintf("already used at %s by %s", when, old.UsedBy))
	}
	return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "the grant record kept changing; try again")
}

// auditUsed audits the use of the grant of c.
func (g *Service) auditUsed(ctx context.Context, tenant, agent, by string, c grant.Claims) {
	used := gated.GrantUsedData{GID: c.GID, Tenant: c.Tenant, ProposalID: c.ProposalID, Action: c.Action, By: by, As: agent}
	if err := g.audit(ctx, tenant, c.ProposalID, gated.EventGrantUsed, used); err != nil {
		g.log.Error("auditing a grant use", zap.String("tenant", tenant), zap.String("proposal_id", c.ProposalID), zap.Error(err))
	}
}

// storedGrant is what gated reads of a stored verdict for a grant: its
// token, the agent it was issued to and the labels its proposal added.
type storedGrant struct {
	Grant  string   `json:"grant"`
	Agent  string   `json:"agent"`
	Labels []string `json:"labels"`
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

// refuse audits a refused use, asked on agent's subject when agent is
// not empty, and returns the refusal.
func (g *Service) refuse(ctx context.Context, tenant, agent, gid, id, reason string) UseReply {
	data := gated.GrantRefusedData{Reason: reason, GID: gid, As: agent}
	if err := g.audit(ctx, tenant, id, gated.EventGrantRefused, data); err != nil {
		g.log.Error("auditing a refused grant use", zap.String("tenant", tenant), zap.Error(err))
	}
	return UseReply{Error: reason}
}
