package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/grant"
)

// Granter signs the grant an approved action verdict carries. The grant
// package's *grant.Ring behind a fixed lifetime is one (see GrantIssuer).
type Granter interface {
	// Grant signs c (tenant, proposal, action, target, policy revision and
	// reviewers set) as issued at now and returns the token, the claims
	// as signed (gid, iat and exp set) and the id of the key that signed.
	Grant(c grant.Claims, now time.Time) (token string, signed grant.Claims, kid string, err error)
}

// grantTarget is the digest a grant binds the target of p with.
func grantTarget(p *gated.Proposal) (string, error) {
	if len(p.Target) == 0 {
		return grant.TargetSHA256(nil)
	}
	doc, err := json.Marshal(p.Target)
	if err != nil {
		return "", fmt.Errorf("encoding the target: %w", err)
	}
	return grant.TargetSHA256(doc)
}

// grantReviewers names who approved v: the approving reviewers, or the
// operator who approved a held action; none for a policy-only approval.
func grantReviewers(v *gated.Verdict) []grant.Reviewer {
	out := []grant.Reviewer{}
	if v.Operator != nil {
		return append(out, grant.Reviewer{Plugin: "operator", Persona: v.Operator.ID})
	}
	for _, r := range v.Reviews {
		if r.Decision == gated.DecisionApprove {
			out = append(out, grant.Reviewer{Plugin: r.Plugin, PluginVersion: r.PluginVersion, Persona: r.Persona, Model: r.Model})
		}
	}
	return out
}

// grantFor signs the grant of v, an approved action verdict whose target
// digests as targetSHA, and records grant.issued on log. A verdict that
// is not an approved action, or an engine without a Granter, gets none.
// An error leaves v without a grant and must fail the decision: an
// approval without its grant is never stored.
func (e *Engine) grantFor(ctx context.Context, log *auditLog, v *gated.Verdict, targetSHA string, now time.Time) error {
	v.Grant = ""
	if e.cfg.Grants == nil || v.Outcome != gated.OutcomeApproved || v.Kind == gated.KindRun {
		return nil
	}
	if targetSHA == "" {
		return fmt.Errorf("signing the grant of %s.%s: the target's digest is unknown", v.Tenant, v.ProposalID)
	}
	revision := ""
	if v.Policy != nil {
		revision = v.Policy.Revision
	}
	tok, c, kid, err := e.cfg.Grants.Grant(grant.Claims{
		Tenant: v.Tenant, ProposalID: v.ProposalID, ProposalSHA256: v.ProposalSHA256, Action: v.Action,
		TargetSHA256: targetSHA, PolicyRevision: revision, Reviewers: grantReviewers(v),
	}, now)
	if err != nil {
		return fmt.Errorf("signing the grant of %s.%s: %w", v.Tenant, v.ProposalID, err)
	}
	if err := log.record(ctx, gated.EventGrantIssued, map[string]any{
		"gid": c.GID, "tenant": c.Tenant, "proposal_id": c.ProposalID, "kid": kid, "exp": c.ExpiresAt,
	}); err != nil {
		return err
	}
	v.Grant = tok
	return nil
}

// GrantIssuer is a Granter over a key ring: every grant lives TTL.
type GrantIssuer struct {
	// Ring returns the key ring to sign with now; it may change between
	// calls (a rotation).
	Ring func() *grant.Ring
	TTL  time.Duration
	// Issued, when set, is told every grant signed, with its claims (the
	// grant records, which then need not verify the signature again).
	Issued func(token string, c grant.Claims)
}

var _ Granter = GrantIssuer{}

// Grant signs c with the ring's active key for TTL.
func (g GrantIssuer) Grant(c grant.Claims, now time.Time) (string, grant.Claims, string, error) {
	ring := g.Ring()
	if ring == nil {
		return "", c, "", fmt.Errorf("no grant key ring")
	}
	tok, signed, err := ring.Issue(c, now, g.TTL)
	if err != nil {
		return "", c, "", err
	}
	if g.Issued != nil {
		g.Issued(tok, signed)
	}
	return tok, signed, ring.Active().KID, nil
}
