package bus

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/grant"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/strictjson"
)

// Grant states of a GrantRecord.
const (
	GrantIssued  = "issued"
	GrantUsed    = "used"
	GrantExpired = "expired"
)

// GrantKeysBucket holds the grant key set every gated on the cluster
// publishes into (under grantKeysKey): the public keys of each gated's
// key file, merged, so that a grant any of them signs verifies under the
// set any of them answers gated.grants.keys with.
const (
	GrantKeysBucket = "GATED_GRANT_KEYS"
	grantKeysKey    = "keys"
)

// DefaultGrantSweep is how often a gated looks for grants that expired
// unused, and republishes its keys.
const DefaultGrantSweep = 10 * time.Second

// DefaultGrantFullSweep is how often a gated reads every grant record for
// ones that expired unused. Between those, it looks only at the grants it
// recorded itself, as their exp passes.
const DefaultGrantFullSweep = time.Hour

// maxDue bounds the grants a process keeps for its own sweep; past it a
// grant waits for the next full sweep.
const maxDue = 1 << 20

// maxGrantUse bounds a use request.
const maxGrantUse = grant.MaxTokenLen + 1024

// GrantRecord is a grant's record in wire.GrantsBucket.
type GrantRecord struct {
	GID        string `json:"gid"`
	Tenant     string `json:"tenant"`
	ProposalID string `json:"proposal_id"`
	Exp        int64  `json:"exp"`
	// Agent is the agent the grant was issued to: the approved
	// proposal's requested_by.agent (the verdict's agent), empty when it
	// named none. Only this agent may use the grant on an agent's
	// subject, gated.grants.<tenant>.use.<agent>.
	Agent string `json:"agent,omitempty"`
	// State is issued, used or expired.
	State  string     `json:"state"`
	UsedAt *time.Time `json:"used_at,omitempty"`
	// UsedBy is the use request's by, free text the requester chose.
	UsedBy string `json:"used_by,omitempty"`
	// UsedAs is the agent whose subject the grant was used on, the
	// identity NATS permissions vouch for where each agent's user may
	// publish on its own subject alone; empty for a use on the tenant's
	// subject, gated.grants.<tenant>.use.
	UsedAs string `json:"used_as,omitempty"`
	// Outcome is the last outcome an executor reported.
	Outcome json.RawMessage `json:"outcome,omitempty"`
}

// GrantUse is the body of a request on gated.grants.<tenant>.use and
// gated.grants.<tenant>.use.<agent>.
type GrantUse struct {
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
func decodeGrantUse(body []byte) (GrantUse, error) {
	var req GrantUse
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
		return GrantUse{}, fmt.Errorf("request member %q appears twice", clipMember(member.Key))
	case err != nil && strings.HasPrefix(err.Error(), "request member"):
		return GrantUse{}, err
	case err != nil:
		return GrantUse{}, fmt.Errorf(`request is not {"grant": "<token>", "by": "<who>"}: %v`, err)
	case !seen || req.Grant == "":
		return GrantUse{}, errors.New("request names no grant")
	case len(req.By) > maxGrantUseBy:
		return GrantUse{}, fmt.Errorf("by is longer than %d bytes", maxGrantUseBy)
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

// GrantUseReply is gated's answer to a GrantUse: OK with the grant's id,
// or the reason it was refused.
type GrantUseReply struct {
	OK    bool   `json:"ok"`
	GID   string `json:"gid,omitempty"`
	Error string `json:"error,omitempty"`
}

// GrantsConfig configures Grants.
type GrantsConfig struct {
	// Ring is gated's signing key ring (required).
	Ring *grant.Ring
	// Trails starts the audit trail of grant events (required).
	Trails Trails
	// Replicas of the two buckets; TTL of the grant records (default 7
	// days, the verdicts').
	Replicas int
	TTL      time.Duration
	// Sweep is how often expired grants are looked for. Default
	// DefaultGrantSweep.
	Sweep time.Duration
	// FullSweep is how often every grant record is read, the first time
	// at the first sweep. Default DefaultGrantFullSweep.
	FullSweep time.Duration
	// Now defaults to time.Now.
	Now func() time.Time
	Log *zap.Logger
}

// Grants is gated's side of signed grants: the key set it publishes, the
// grant records, the single-use endpoint, and the expiry of grants left
// unused. Every gated of a cluster runs one; the buckets are shared.
type Grants struct {
	nc       *nats.Conn
	records  jetstream.KeyValue
	keys     jetstream.KeyValue
	verdicts jetstream.KeyValue
	cfg      GrantsConfig
	ring     atomic.Pointer[grant.Ring]
	log      *zap.Logger
	// issued holds the claims of the grants this process signed and has
	// not recorded yet (Issued), so that Record need not verify its own
	// signature again; at most maxIssued, oldest forgotten first.
	imu    sync.Mutex
	issued map[string]grant.Claims
	order  []string
	// due holds the grants this process recorded, soonest exp first, so
	// that a sweep between full sweeps reads only those whose exp passed.
	dmu sync.Mutex
	due dueGrants

	cancel context.CancelFunc
	wg     sync.WaitGroup
	subs   []*nats.Subscription
}

// NewGrants creates the grant buckets and returns Grants over them; the
// verdict bucket is where a grant without its record is looked for.
// Start publishes the keys and serves the endpoints.
func NewGrants(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, verdicts jetstream.KeyValue, cfg GrantsConfig) (*Grants, error) {
	switch {
	case cfg.Ring == nil || cfg.Trails == nil || verdicts == nil:
		return nil, fmt.Errorf("%w: grants need a key ring, audit trails and the verdict bucket", ErrInvalidConfig)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.TTL == 0 {
		cfg.TTL = 7 * 24 * time.Hour
	}
	if cfg.Sweep <= 0 {
		cfg.Sweep = DefaultGrantSweep
	}
	if cfg.FullSweep <= 0 {
		cfg.FullSweep = DefaultGrantFullSweep
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	g := &Grants{nc: nc, verdicts: verdicts, cfg: cfg, log: cfg.Log}
	var err error
	g.records, err = retry(ctx, func(ctx context.Context) (jetstream.KeyValue, error) {
		return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: wire.GrantsBucket, Description: "Grants gated issued, by <tenant>.<proposal id>: issued, used or expired.",
			History: 1, TTL: cfg.TTL, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("creating bucket %s: %w", wire.GrantsBucket, err)
	}
	g.keys, err = retry(ctx, func(ctx context.Context) (jetstream.KeyValue, error) {
		return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: GrantKeysBucket, Description: "The grant key set every gated publishes into.",
			History: 1, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("creating bucket %s: %w", GrantKeysBucket, err)
	}
	g.ring.Store(cfg.Ring)
	return g, nil
}

// Ring returns the key ring that signs now.
func (g *Grants) Ring() *grant.Ring { return g.ring.Load() }

// SetRing publishes the public keys of r into the shared key set, then
// makes r the ring that signs: no grant of r's is issued before every
// verifier can find its key.
func (g *Grants) SetRing(ctx context.Context, r *grant.Ring) error {
	if err := g.publishKeys(ctx, r); err != nil {
		return err
	}
	g.ring.Store(r)
	return nil
}

// publishKeys merges r's public keys into the shared key set by
// compare-and-set, dropping keys no live grant can need.
func (g *Grants) publishKeys(ctx context.Context, r *grant.Ring) error {
	for range 10 {
		now := g.cfg.Now()
		cur, rev, err := g.loadKeys(ctx)
		if err != nil {
			return err
		}
		merged := grant.Merge(now, cur, r.Public(now))
		data, err := json.Marshal(merged)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = g.keys.Create(ctx, grantKeysKey, data)
		} else {
			_, err = g.keys.Update(ctx, grantKeysKey, data, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("publishing the grant keys: %w", err)
		}
	}
	return fmt.Errorf("publishing the grant keys: too many concurrent updates")
}

// loadKeys reads the shared key set and its revision (0: none yet).
func (g *Grants) loadKeys(ctx context.Context) (grant.KeySet, uint64, error) {
	e, err := g.keys.Get(ctx, grantKeysKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return grant.KeySet{Keys: []grant.Key{}}, 0, nil
	}
	if err != nil {
		return grant.KeySet{}, 0, fmt.Errorf("reading the grant keys: %w", err)
	}
	ks, err := grant.ParseKeySet(e.Value())
	if err != nil {
		return grant.KeySet{}, 0, fmt.Errorf("reading the grant keys from %s: %w", GrantKeysBucket, err)
	}
	return ks, e.Revision(), nil
}

// KeySet is the key set gated publishes: every gated's keys, less those
// no live grant can need.
func (g *Grants) KeySet(ctx context.Context) (grant.KeySet, error) {
	ks, _, err := g.loadKeys(ctx)
	if err != nil {
		return grant.KeySet{}, err
	}
	return grant.Merge(g.cfg.Now(), ks, g.Ring().Public(g.cfg.Now())), nil
}

// grantsSetup bounds Start's first publication of the keys.
const grantsSetup = 30 * time.Second

// Start publishes the keys, serves gated.grants.keys and
// gated.grants.<tenant>.use, and starts the expiry sweep.
func (g *Grants) Start(ctx context.Context) error {
	// The key bucket may have been created a moment ago on a cluster that
	// has not elected its leader yet: a read that goes unanswered is asked
	// again, as Setup asks again, for as long as a setup may take.
	pctx, stop := context.WithTimeout(ctx, grantsSetup)
	_, err := retry(pctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, g.publishKeys(ctx, g.Ring())
	})
	stop()
	if err != nil {
		return err
	}
	keys, err := g.nc.QueueSubscribe(wire.GrantKeysSubject, "gated", g.serveKeys)
	if err != nil {
		return fmt.Errorf("serving %s: %w", wire.GrantKeysSubject, err)
	}
	g.subs = []*nats.Subscription{keys}
	for _, subject := range []string{wire.GrantUseSubjects, wire.GrantUseAgentSubjects} {
		use, err := g.nc.QueueSubscribe(subject, "gated", g.serveUse)
		if err != nil {
			for _, s := range g.subs {
				_ = s.Unsubscribe()
			}
			g.subs = nil
			return fmt.Errorf("serving %s: %w", subject, err)
		}
		g.subs = append(g.subs, use)
	}
	sctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	g.wg.Go(func() { g.sweepLoop(sctx) })
	return nil
}

// Stop ends the endpoints and the sweep.
func (g *Grants) Stop() {
	for _, s := range g.subs {
		_ = s.Drain()
	}
	if g.cancel != nil {
		g.cancel()
	}
	g.wg.Wait()
}

func (g *Grants) serveKeys(msg *nats.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ks, err := g.KeySet(ctx)
	if err != nil {
		g.log.Warn("answering a grant key request", zap.Error(err))
		return // no answer: the requester times out rather than read a wrong set
	}
	data, _ := json.Marshal(ks)
	_ = msg.Respond(data)
}

func (g *Grants) serveUse(msg *nats.Msg) {
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
	if !found || !engine.ValidTenant(tenant) {
		return "", "", false
	}
	if rest == "use" {
		return tenant, "", true
	}
	agent, found = strings.CutPrefix(rest, "use.")
	if !found || !engine.ValidID(agent) {
		return tenant, "", false
	}
	return tenant, agent, true
}

// use decodes and applies one use request received on subject.
func (g *Grants) use(ctx context.Context, subject string, body []byte) GrantUseReply {
	tenant, agent, ok := parseUseSubject(subject)
	if !ok {
		if tenant == "" {
			tenant = engine.UnknownTenant
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
func (g *Grants) Use(ctx context.Context, tenant, token, by string) GrantUseReply {
	return g.UseAs(ctx, tenant, "", token, by)
}

// UseAs uses the grant token for tenant, once: it verifies the token
// under the published key set, checks the grant is tenant's and, when
// agent is not empty (a use on gated.grants.<tenant>.use.<agent>), that
// it was issued to agent, and moves its record from issued to used by
// compare-and-set, so that of two uses exactly one succeeds. Every use and
// refusal is audited (grant.used, grant.refused), with agent as "as".
func (g *Grants) UseAs(ctx context.Context, tenant, agent, token, by string) GrantUseReply {
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
		case GrantUsed:
			at := ""
			if rec.UsedAt != nil {
				at = rec.UsedAt.UTC().Format(time.RFC3339)
			}
			return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, fmt.Sprintf("already used at %s by %s", at, rec.UsedBy))
		case GrantExpired:
			return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "expired")
		}
		at := now.UTC()
		rec.State, rec.UsedAt, rec.UsedBy, rec.UsedAs = GrantUsed, &at, by, agent
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
		if err := g.audit(ctx, tenant, c.ProposalID, engine.EventGrantUsed, used); err != nil {
			g.log.Error("auditing a grant use", zap.String("key", key), zap.Error(err))
		}
		return GrantUseReply{OK: true, GID: c.GID}
	}
	return g.refuse(ctx, tenant, agent, c.GID, c.ProposalID, "the grant record kept changing; try again")
}

// issuedTo returns the agent the grant of rec, whose token is token, was
// issued to: the record's agent, or, for a record without one (written
// by a gated that did not keep it), the agent of the stored verdict that
// carries token.
func (g *Grants) issuedTo(ctx context.Context, rec GrantRecord, token string) (string, error) {
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
func (g *Grants) storedVerdict(ctx context.Context, key string) (storedGrant, error) {
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
func (g *Grants) recordFromVerdict(ctx context.Context, c grant.Claims, token string) (GrantRecord, error) {
	v, err := g.storedVerdict(ctx, c.Tenant+"."+c.ProposalID)
	if err != nil {
		return GrantRecord{}, err
	}
	if v.Grant != token {
		return GrantRecord{}, errors.New("the stored verdict does not carry this grant")
	}
	rec := GrantRecord{GID: c.GID, Tenant: c.Tenant, ProposalID: c.ProposalID, Exp: c.ExpiresAt, Agent: v.Agent, State: GrantIssued}
	data, _ := json.Marshal(rec)
	if _, err := g.records.Create(ctx, c.Tenant+"."+c.ProposalID, data); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return GrantRecord{}, err
	}
	return rec, nil
}

func (g *Grants) record(ctx context.Context, key string) (GrantRecord, uint64, error) {
	e, err := g.records.Get(ctx, key)
	if err != nil {
		return GrantRecord{}, 0, err
	}
	var rec GrantRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return GrantRecord{}, 0, fmt.Errorf("grant record %s is malformed: %w", key, err)
	}
	return rec, e.Revision(), nil
}

// refuse audits a refused use, asked on agent's subject when agent is
// not empty, and returns the refusal.
func (g *Grants) refuse(ctx context.Context, tenant, agent, gid, id, reason string) GrantUseReply {
	data := map[string]any{"reason": reason}
	if gid != "" {
		data["gid"] = gid
	}
	if agent != "" {
		data["as"] = agent
	}
	if err := g.audit(ctx, tenant, id, engine.EventGrantRefused, data); err != nil {
		g.log.Error("auditing a refused grant use", zap.String("tenant", tenant), zap.Error(err))
	}
	return GrantUseReply{Error: reason}
}

func (g *Grants) audit(ctx context.Context, tenant, id, event string, data any) error {
	body, err := json.Marshal(data)
	if err != nil {
		return err
	}
	_, err = g.cfg.Trails().Seal(ctx, engine.AuditEvent{
		V: engine.SchemaVersion, Event: event, Tenant: tenant, ProposalID: id, At: g.cfg.Now().UTC(), Data: body,
	})
	return err
}

// maxIssued bounds the grants Issued remembers until they are recorded.
const maxIssued = 4096

// Issued remembers the claims of a grant this process has just signed,
// until Record records it. engine.GrantIssuer calls it.
func (g *Grants) Issued(token string, c grant.Claims) {
	g.imu.Lock()
	defer g.imu.Unlock()
	if g.issued == nil {
		g.issued = map[string]grant.Claims{}
	}
	if len(g.order) >= maxIssued {
		delete(g.issued, g.order[0])
		g.order = g.order[1:]
	}
	g.issued[token] = c
	g.order = append(g.order, token)
}

// takeIssued returns and forgets the claims Issued remembered for token.
func (g *Grants) takeIssued(token string) (grant.Claims, bool) {
	g.imu.Lock()
	defer g.imu.Unlock()
	c, ok := g.issued[token]
	if ok {
		delete(g.issued, token)
		if i := slices.Index(g.order, token); i >= 0 {
			g.order = slices.Delete(g.order, i, i+1)
		}
	}
	return c, ok
}

// Record writes the record of the grant v carries, if any, as issued. It
// runs before the verdict is published and the proposal acknowledged, so
// a crash before it leaves the proposal to be redelivered and answered
// with the stored verdict, whose grant it records then: the record is
// always the stored verdict's grant. Recording the same grant again is a
// no-op. The grant must be one gated signed for v's tenant and proposal:
// one this process has just signed (Issued), or else one whose signature
// verifies under the published keys.
func (g *Grants) Record(ctx context.Context, v *engine.Verdict) error {
	if v.Grant == "" {
		return nil
	}
	c, ok := g.takeIssued(v.Grant)
	if !ok {
		ks, err := g.KeySet(ctx)
		if err != nil {
			return err
		}
		if c, err = grant.Decode(v.Grant, ks); err != nil {
			return fmt.Errorf("reading the grant of %s.%s: %w", v.Tenant, v.ProposalID, err)
		}
	}
	if c.Tenant != v.Tenant || c.ProposalID != v.ProposalID {
		return fmt.Errorf("the grant of %s.%s is one for %s.%s: not recorded", v.Tenant, v.ProposalID, c.Tenant, c.ProposalID)
	}
	key := v.Tenant + "." + v.ProposalID
	rec := GrantRecord{GID: c.GID, Tenant: c.Tenant, ProposalID: c.ProposalID, Exp: c.ExpiresAt, Agent: v.Agent, State: GrantIssued}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if _, err = g.records.Create(ctx, key, data); errors.Is(err, jetstream.ErrKeyExists) {
		err = g.replaceRecord(ctx, key, rec.GID, data)
	}
	if err != nil {
		return fmt.Errorf("recording the grant of %s: %w", key, err)
	}
	g.addDue(rec.Exp, key)
	return nil
}

// replaceRecord writes data, the record of grant gid, under key where a
// record is already: it is this grant's (recorded by another delivery),
// left as it is, or an older grant's, of a verdict stored under a reused
// id after the old one's TTL, which it replaces.
func (g *Grants) replaceRecord(ctx context.Context, key, gid string, data []byte) error {
	old, rev, err := g.record(ctx, key)
	if err != nil || old.GID == gid {
		return err
	}
	_, err = g.records.Update(ctx, key, data, rev)
	return err
}

// sweepLoop republishes the keys and sweeps expired grants every Sweep:
// every record at the first sweep and every FullSweep after (grants
// recorded by a gated that stopped before their exp, this one's previous
// run included), and in between only the grants this process recorded
// whose exp has passed. A full sweep reads the whole bucket, which holds
// the grants of the records' TTL (a week by default): done every few
// seconds, it grew with the history and came to dominate the process.
func (g *Grants) sweepLoop(ctx context.Context) {
	t := time.NewTicker(g.cfg.Sweep)
	defer t.Stop()
	var full time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := g.publishKeys(ctx, g.Ring()); err != nil && ctx.Err() == nil {
			g.log.Warn("republishing the grant keys", zap.Error(err))
		}
		now := time.Now()
		if full.IsZero() || now.Sub(full) >= g.cfg.FullSweep {
			if _, err := g.Sweep(ctx); err != nil {
				if ctx.Err() == nil {
					g.log.Warn("sweeping expired grants", zap.Error(err))
				}
				continue
			}
			full = now
			continue
		}
		if _, err := g.SweepDue(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("sweeping the expired grants of this gated", zap.Error(err))
		}
	}
}

// SweepDue marks as expired the grants this process recorded whose exp
// has passed and that are still issued, like Sweep, without reading the
// other records. It returns how many it marked.
func (g *Grants) SweepDue(ctx context.Context) (int, error) {
	n := 0
	for {
		now := g.cfg.Now().Unix()
		key, ok := g.takeDue(now)
		if !ok {
			return n, ctx.Err()
		}
		// A record that could not be read is left to the next full
		// sweep.
		marked, err := g.expire(ctx, key)
		if err != nil {
			return n, err
		}
		if marked {
			n++
		}
	}
}

// Sweep marks every grant still issued past its exp as expired, by
// compare-and-set (of several gated sweeping, one marks each), audits
// grant.expired for each, and returns how many it marked. It reads every
// record once, as the bucket holds it, and stops reading when it has
// read them all: a key listing followed by a read of each key held the
// listing open while the reads went on, and its subscription filled with
// the grants recorded meanwhile.
func (g *Grants) Sweep(ctx context.Context) (int, error) {
	w, err := g.records.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return 0, fmt.Errorf("reading the grants: %w", err)
	}
	defer func() { _ = w.Stop() }()
	n := 0
	for {
		select {
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return n, fmt.Errorf("reading the grants: the watch ended after %d marked", n)
			case e == nil:
				return n, nil // every record read
			}
			marked, err := g.expireAt(ctx, e.Key(), e.Value(), e.Revision())
			if err != nil {
				return n, err
			}
			if marked {
				n++
			}
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
}

// expire marks the grant under key expired when it is still issued and
// its exp has passed, and audits grant.expired. A record that cannot be
// read is left as it is.
func (g *Grants) expire(ctx context.Context, key string) (bool, error) {
	e, err := g.records.Get(ctx, key)
	if err != nil {
		return false, nil
	}
	return g.expireAt(ctx, key, e.Value(), e.Revision())
}

// expireAt marks the grant record data, at revision rev of key, expired
// when it is issued and its exp has passed, and audits grant.expired. A
// record that does not decode, or that changed since rev, is left as it
// is; the error is the audit's.
func (g *Grants) expireAt(ctx context.Context, key string, data []byte, rev uint64) (bool, error) {
	var rec GrantRecord
	if err := json.Unmarshal(data, &rec); err != nil || rec.State != GrantIssued || g.cfg.Now().Unix() < rec.Exp {
		return false, nil
	}
	rec.State = GrantExpired
	data, err := json.Marshal(rec)
	if err != nil {
		return false, nil
	}
	if _, err := g.records.Update(ctx, key, data, rev); err != nil {
		return false, nil // used or expired meanwhile
	}
	if err := g.audit(ctx, rec.Tenant, rec.ProposalID, engine.EventGrantExpired, map[string]any{
		"gid": rec.GID, "tenant": rec.Tenant, "proposal_id": rec.ProposalID, "exp": rec.Exp,
	}); err != nil {
		return true, fmt.Errorf("auditing an expired grant: %w", err)
	}
	return true, nil
}

// dueGrant is a grant this process recorded: its key and its exp.
type dueGrant struct {
	exp int64
	key string
}

// dueGrants is a min-heap of grants by exp (container/heap).
type dueGrants []dueGrant

func (h dueGrants) Len() int           { return len(h) }
func (h dueGrants) Less(i, j int) bool { return h[i].exp < h[j].exp }
func (h dueGrants) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueGrants) Push(x any)        { *h = append(*h, x.(dueGrant)) }
func (h *dueGrants) Pop() any {
	old := *h
	last := old[len(old)-1]
	old[len(old)-1] = dueGrant{}
	*h = old[:len(old)-1]
	return last
}

// addDue keeps the grant under key for SweepDue.
func (g *Grants) addDue(exp int64, key string) {
	g.dmu.Lock()
	defer g.dmu.Unlock()
	if len(g.due) >= maxDue {
		return // the next full sweep finds it
	}
	heap.Push(&g.due, dueGrant{exp, key})
}

// takeDue removes and returns the key of the grant with the soonest exp
// when that exp is at or before now.
func (g *Grants) takeDue(now int64) (string, bool) {
	g.dmu.Lock()
	defer g.dmu.Unlock()
	if len(g.due) == 0 || g.due[0].exp > now {
		return "", false
	}
	return heap.Pop(&g.due).(dueGrant).key, true
}
