package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/grant"
	"github.com/gated/gated/engine/wire"
)

// ErrGrantRefused is matched (errors.Is) by every refusal of a grant: one
// that does not verify (a *grant.Error naming the member) and one gated
// refuses to let be used (already used, expired, unknown).
var ErrGrantRefused = grant.ErrRefused

// Grants verifies and uses the grants of approved verdicts: what an
// executor runs before the approved action (docs/GRANTS.md). The key set
// comes from gated.grants.keys and is cached for GrantKeysMaxAge; a grant
// signed by a key the cache lacks (a rotation) fetches it again at once. It is safe for
// concurrent use.
type Grants struct {
	nc  *nats.Conn
	now func() time.Time

	mu      sync.Mutex
	keys    grant.KeySet
	fetched time.Time
	have    bool
	fixed   bool
}

// GrantKeysMaxAge is how long Grants keeps a fetched key set before it
// fetches it again, so that a retirement reaches it within this time
// even when no unknown kid makes it look.
const GrantKeysMaxAge = 5 * time.Minute

// GrantsOption configures Grants.
type GrantsOption func(*Grants) error

// WithGrantKeys verifies with ks, the key set `gated grants keys`
// printed, instead of asking gated.grants.keys. A rotation then needs the
// new set.
func WithGrantKeys(ks grant.KeySet) GrantsOption {
	return func(g *Grants) error {
		if len(ks.Keys) == 0 {
			return fmt.Errorf("%w: an empty grant key set verifies nothing", ErrInvalidConfig)
		}
		g.keys, g.have, g.fixed = ks, true, true
		return nil
	}
}

// WithGrantClock replaces the clock grants are checked at (tests).
func WithGrantClock(now func() time.Time) GrantsOption {
	return func(g *Grants) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidConfig)
		}
		g.now = now
		return nil
	}
}

// NewGrants returns Grants that use nc to fetch keys and use grants.
func NewGrants(nc *nats.Conn, opts ...GrantsOption) (*Grants, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: grants need a NATS connection", ErrInvalidConfig)
	}
	g := &Grants{nc: nc, now: time.Now}
	for _, o := range opts {
		if err := o(g); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// keySet returns the cached key set, fetching it when there is none or
// refresh is set (and the set is not fixed).
func (g *Grants) keySet(ctx context.Context, refresh bool) (grant.KeySet, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.have && (g.fixed || !refresh && g.now().Sub(g.fetched) < GrantKeysMaxAge) {
		return g.keys, nil
	}
	msg, err := g.nc.RequestWithContext(ctx, wire.GrantKeysSubject, nil)
	if err != nil {
		return grant.KeySet{}, fmt.Errorf("fetching the grant keys from %s: %w", wire.GrantKeysSubject, err)
	}
	ks, err := grant.ParseKeySet(msg.Data)
	if err != nil {
		return grant.KeySet{}, fmt.Errorf("fetching the grant keys from %s: %w", wire.GrantKeysSubject, err)
	}
	g.keys, g.have, g.fetched = ks, true, g.now()
	return ks, nil
}

// Verify checks token as grant.Verify does, under gated's published key
// set, against want: what is about to run. A refusal is a *grant.Error
// naming the member (errors.Is ErrGrantRefused); other errors are
// failures to fetch the keys.
func (g *Grants) Verify(ctx context.Context, token string, want grant.Expect) (grant.Claims, error) {
	ks, err := g.keySet(ctx, false)
	if err != nil {
		return grant.Claims{}, err
	}
	c, err := grant.Verify(token, ks, g.now(), want)
	var ge *grant.Error
	if errors.As(err, &ge) && ge.Member == "kid" && !g.fixed {
		// Perhaps a key newer than the cache: fetch once more.
		if ks, err = g.keySet(ctx, true); err != nil {
			return grant.Claims{}, err
		}
		c, err = grant.Verify(token, ks, g.now(), want)
	}
	return c, err
}

type grantUse struct {
	Grant string `json:"grant"`
	By    string `json:"by"`
}

type grantUseReply struct {
	OK    bool   `json:"ok"`
	GID   string `json:"gid"`
	Error string `json:"error"`
}

// Use spends token, a grant of tenant, with gated: it succeeds once for
// a grant; every later use, and a use of an expired or unknown grant, is
// refused (errors.Is ErrGrantRefused, the message says why). by says who
// uses it, for the audit trail.
func (g *Grants) Use(ctx context.Context, tenant, token, by string) error {
	if !engine.ValidTenant(tenant) {
		return fmt.Errorf("%w: tenant %q must match [a-z0-9_-]{1,64}", ErrInvalidConfig, tenant)
	}
	body, err := json.Marshal(grantUse{Grant: token, By: by})
	if err != nil {
		return err
	}
	msg, err := g.nc.RequestWithContext(ctx, wire.GrantUseSubject(tenant), body)
	if err != nil {
		return fmt.Errorf("using the grant on %s: %w", wire.GrantUseSubject(tenant), err)
	}
	var r grantUseReply
	dec := json.NewDecoder(bytes.NewReader(msg.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return &grant.Error{Member: "use", Reason: "got a reply that is not gated's: " + err.Error()}
	}
	if !r.OK {
		reason := r.Error
		if reason == "" {
			reason = "refused without a reason"
		}
		return &grant.Error{Member: "use", Reason: reason}
	}
	return nil
}

// Check is what a service that is handed a grant runs before it acts:
// Verify against want, then Use. Only a nil error lets the action run.
func (g *Grants) Check(ctx context.Context, token string, want grant.Expect, by string) (grant.Claims, error) {
	c, err := g.Verify(ctx, token, want)
	if err != nil {
		return grant.Claims{}, err
	}
	if err := g.Use(ctx, c.Tenant, token, by); err != nil {
		return grant.Claims{}, err
	}
	return c, nil
}

// expectOf is what the grant of proposal p must name: p as the client
// sends it (see Client.ProposeWith).
func expectOf(p *engine.Proposal) (grant.Expect, error) {
	sent := *p
	if sent.V == 0 {
		sent.V = engine.SchemaVersion
	}
	data, err := json.Marshal(&sent)
	if err != nil {
		return grant.Expect{}, fmt.Errorf("encoding proposal %s.%s: %w", p.Tenant, p.ID, err)
	}
	var target []byte
	if len(p.Target) > 0 {
		if target, err = json.Marshal(p.Target); err != nil {
			return grant.Expect{}, fmt.Errorf("encoding the target of %s.%s: %w", p.Tenant, p.ID, err)
		}
	}
	return grant.Expect{Tenant: p.Tenant, ProposalID: p.ID, ProposalSHA256: grant.ProposalSHA256(data), Action: p.Action, Target: target}, nil
}
