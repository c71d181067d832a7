package fleet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/grant"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/strictjson"
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
	js  jetstream.JetStream
	now func() time.Time

	// agent, when set, is the agent whose subjects uses and reports go
	// on (WithGrantsAgent).
	agent string

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

// WithGrantsAPIPrefix sets the JetStream API prefix outcome reports are
// acknowledged through, for accounts that import JetStream from another
// account or domain. Default "$JS.API".
func WithGrantsAPIPrefix(prefix string) GrantsOption {
	return func(g *Grants) error {
		prefix = strings.TrimSuffix(prefix, ".")
		if prefix == "" || strings.ContainsAny(prefix, " *>") {
			return fmt.Errorf("%w: JetStream API prefix %q", ErrInvalidConfig, prefix)
		}
		js, err := jetstream.NewWithAPIPrefix(g.nc, prefix)
		if err != nil {
			return err
		}
		g.js = js
		return nil
	}
}

// WithGrantsAgent has Grants use grants on agent's subject,
// gated.grants.<tenant>.use.<agent>, and report outcomes on
// gated.outcomes.<tenant>.<proposal_id>.<agent>, where gated accepts a use
// only of a grant issued to agent (the proposal's requested_by.agent)
// and a report only from the agent it was issued to or that used it. Give
// it where each agent connects as a NATS user of its own that may publish
// on its own subjects alone (docs/NATS.md, one user per agent): then no
// agent of the tenant can use or report for another's grants. agent must
// be a token, [A-Za-z0-9_-]{1,128}. Default: the tenant's subjects,
// gated.grants.<tenant>.use and gated.outcomes.<tenant>.<proposal_id>.
func WithGrantsAgent(agent string) GrantsOption {
	return func(g *Grants) error {
		if !gated.ValidID(agent) {
			return fmt.Errorf("%w: agent %q must match [A-Za-z0-9_-]{1,128} to be a subject token", ErrInvalidConfig, agent)
		}
		g.agent = agent
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
	if g.js == nil {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		g.js = js
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

// decodeGrantUseReply reads gated's answer to a use strictly: one JSON
// object of ok (required), gid and error, each once and spelled exactly,
// so that a reply cannot read as a refusal to one reader and as ok to
// another.
func decodeGrantUseReply(data []byte) (grantUseReply, error) {
	var r grantUseReply
	seen := false
	err := strictjson.Object(data, func(key string, value json.RawMessage) error {
		var dst any
		switch key {
		case "ok":
			dst, seen = &r.OK, true
		case "gid":
			dst = &r.GID
		case "error":
			dst = &r.Error
		default:
			return fmt.Errorf("member %q is unknown", key)
		}
		if bytes.Equal(value, []byte("null")) {
			return fmt.Errorf("member %q is null", key)
		}
		return json.Unmarshal(value, dst)
	})
	if err == nil && !seen {
		err = errors.New(`member "ok" is missing`)
	}
	return r, err
}

// useSubject is where g uses a grant of tenant.
func (g *Grants) useSubject(tenant string) string {
	if g.agent != "" {
		return wire.GrantUseSubjectAs(tenant, g.agent)
	}
	return wire.GrantUseSubject(tenant)
}

// Use spends token, a grant of tenant, with gated: it succeeds once for
// a grant; every later use, and a use of an expired or unknown grant, is
// refused (errors.Is ErrGrantRefused, the message says why); with
// WithGrantsAgent, so is a grant issued to another agent. by says who
// uses it, free text for the audit trail.
func (g *Grants) Use(ctx context.Context, tenant, token, by string) error {
	if !gated.ValidTenant(tenant) {
		return fmt.Errorf("%w: tenant %q must match [a-z0-9_-]{1,64}", ErrInvalidConfig, tenant)
	}
	body, err := json.Marshal(grantUse{Grant: token, By: by})
	if err != nil {
		return err
	}
	subject := g.useSubject(tenant)
	msg, err := g.nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		return fmt.Errorf("using the grant on %s: %w", subject, err)
	}
	r, err := decodeGrantUseReply(msg.Data)
	if err != nil {
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
// Verify against want, then Use. Only a nil error lets the action run. A
// grant Verify refuses is reported to gated (status refused, on want's
// tenant and proposal id), which audits it as grant.refused by
// "executor"; one gated refuses to let be used gated audits itself. The
// service then reports what happened with Report (started, succeeded,
// failed).
func (g *Grants) Check(ctx context.Context, token string, want grant.Expect, by string) (grant.Claims, error) {
	c, err := g.Verify(ctx, token, want)
	if err != nil {
		if errors.Is(err, ErrGrantRefused) && gated.ValidTenant(want.Tenant) && gated.ValidID(want.ProposalID) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportWait)
			_ = g.Report(rctx, want.Tenant, want.ProposalID, "", gated.ExecutionRefused, err.Error())
			cancel()
		}
		return grant.Claims{}, err
	}
	if err := g.Use(ctx, c.Tenant, token, by); err != nil {
		return grant.Claims{}, err
	}
	return c, nil
}

// GrantExpect is what the grant of proposal p must name when p was sent
// with Client.Propose or Client.ProposeWith: its tenant, id, action and
// target, and the digest of the bytes the client published.
func GrantExpect(p *gated.Proposal) (grant.Expect, error) { return expectOf(p) }

// expectOf is what the grant of proposal p must name: p as the client
// sends it (see Client.ProposeWith).
func expectOf(p *gated.Proposal) (grant.Expect, error) {
	sent := *p
	if sent.V == 0 {
		sent.V = gated.SchemaVersion
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

// MaxOutcomeError bounds the error text of an outcome report, in
// characters; a longer one is cut and marked so.
const MaxOutcomeError = 1024

// Report publishes an outcome report of tenant's proposal id, whose grant
// is gid, on gated.outcomes.<tenant>.<id> (with WithGrantsAgent,
// gated.outcomes.<tenant>.<id>.<agent>) through JetStream, with
// Nats-Msg-Id <tenant>.<id>.<status>.<nonce>, a random nonce of this
// report's, so that the publish's own retries count once and nobody can
// have the stream drop the report by sending another under its id first:
// status is gated.ExecutionStarted before the action runs,
// gated.ExecutionSucceeded or gated.ExecutionFailed (with errText)
// after, or gated.ExecutionRefused (errText the reason; gid empty when
// the token did not verify) when the executor refused the grant. It
// returns when the stream has the report; gated audits it
// (docs/GRANTS.md).
func (g *Grants) Report(ctx context.Context, tenant, id, gid, status, errText string) error {
	switch {
	case !gated.ValidTenant(tenant):
		return fmt.Errorf("%w: tenant %q must match [a-z0-9_-]{1,64}", ErrInvalidConfig, tenant)
	case !gated.ValidID(id):
		return fmt.Errorf("%w: proposal id %q must match [A-Za-z0-9_-]{1,128}", ErrInvalidConfig, id)
	}
	switch status {
	case gated.ExecutionStarted, gated.ExecutionSucceeded:
		errText = ""
	case gated.ExecutionFailed, gated.ExecutionRefused:
		if strings.TrimSpace(errText) == "" {
			errText = status
		}
	default:
		return fmt.Errorf("%w: outcome status %q: want started, succeeded, failed or refused", ErrInvalidConfig, status)
	}
	body, err := json.Marshal(gated.ExecutionReport{
		V: 1, GID: gid, Tenant: tenant, ProposalID: id, Status: status, Error: cutOutcomeError(errText), At: g.now().UTC(),
	})
	if err != nil {
		return err
	}
	subject := wire.OutcomeSubject(tenant, id)
	if g.agent != "" {
		subject = wire.OutcomeSubjectAs(tenant, id, g.agent)
	}
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return fmt.Errorf("reporting outcome %s of %s.%s: %w", status, tenant, id, err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = body
	msg.Header.Set(jetstream.MsgIDHeader, wire.OutcomeMsgID(tenant, id, status, base64.RawURLEncoding.EncodeToString(nonce[:])))
	if _, err := g.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("reporting outcome %s of %s.%s: %w", status, tenant, id, err)
	}
	return nil
}

// ReportLocal publishes b, the calls a gateway of b.Tenant decided
// itself, on gated.outcomes.<tenant>.~local (with WithGrantsAgent,
// gated.outcomes.<tenant>.~local.<agent>) through JetStream, with a
// random Nats-Msg-Id of its own, so that the publish's retries count
// once. It returns when the stream has the batch; gated records one
// local.decided event per call (docs/MCP.md).
func (g *Grants) ReportLocal(ctx context.Context, b gated.LocalBatch) error {
	if !gated.ValidTenant(b.Tenant) {
		return fmt.Errorf("%w: tenant %q must match [a-z0-9_-]{1,64}", ErrInvalidConfig, b.Tenant)
	}
	body, err := json.Marshal(b)
	if err != nil {
		return err
	}
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return err
	}
	subject := wire.LocalDecisionSubject(b.Tenant, g.agent)
	msg := nats.NewMsg(subject)
	msg.Data = body
	msg.Header.Set(jetstream.MsgIDHeader, b.Tenant+"."+wire.LocalDecisionToken+"."+base64.RawURLEncoding.EncodeToString(nonce[:]))
	if _, err := g.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("reporting %d local decisions on %s: %w", len(b.Decisions), subject, err)
	}
	return nil
}

// cutOutcomeError cuts s to MaxOutcomeError characters of valid UTF-8.
func cutOutcomeError(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= MaxOutcomeError {
		return s
	}
	const mark = " … (truncated)"
	r := []rune(s)
	return string(r[:MaxOutcomeError-utf8.RuneCountInString(mark)]) + mark
}

// gidOf reads the gid of token, a grant that was verified before.
func (g *Grants) gidOf(ctx context.Context, token string) (string, error) {
	ks, err := g.keySet(ctx, false)
	if err != nil {
		return "", err
	}
	c, err := grant.Decode(token, ks)
	if err != nil {
		return "", err
	}
	return c.GID, nil
}
