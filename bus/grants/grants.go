// Package grants is gated's side of signed grants: it records the grant of
// each approved verdict, publishes the key set grants verify under, serves
// the single-use endpoint, expires the grants left unused and takes in
// executors' outcome reports on the grant records.
package grants

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/engine/grant"
	"github.com/gated/gated/engine/wire"
)

// Grant states of a Record.
const (
	StateIssued  = "issued"
	StateUsed    = "used"
	StateExpired = "expired"
)

// KeysBucket holds the grant key set every gated on the cluster
// publishes into (under grantKeysKey): the public keys of each gated's
// key file, merged, so that a grant any of them signs verifies under the
// set any of them answers gated.grants.keys with.
const (
	KeysBucket   = "GATED_GRANT_KEYS"
	grantKeysKey = "keys"
)

// DefaultSweep is how often a gated looks for grants that expired
// unused, and republishes its keys.
const DefaultSweep = 10 * time.Second

// DefaultFullSweep is how often a gated reads every grant record for
// ones that expired unused. Between those, it looks only at the grants it
// recorded itself, as their exp passes.
const DefaultFullSweep = time.Hour

// Record is a grant's record in wire.GrantsBucket.
type Record struct {
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

// Config configures a Service.
type Config struct {
	// Ring is gated's signing key ring (required).
	Ring *grant.Ring
	// Trails starts the audit trail of grant events (required).
	Trails bus.Trails
	// Replicas of the two buckets; TTL of the grant records (default 7
	// days, the verdicts').
	Replicas int
	TTL      time.Duration
	// Sweep is how often expired grants are looked for. Default
	// DefaultSweep.
	Sweep time.Duration
	// FullSweep is how often every grant record is read, the first time
	// at the first sweep. Default DefaultFullSweep.
	FullSweep time.Duration
	// Now defaults to time.Now.
	Now func() time.Time
	Log *zap.Logger
}

// Service is gated's side of signed grants: the key set it publishes, the
// grant records, the single-use endpoint, and the expiry of grants left
// unused. Every gated of a cluster runs one; the buckets are shared.
type Service struct {
	nc       *nats.Conn
	records  jetstream.KeyValue
	keys     jetstream.KeyValue
	verdicts jetstream.KeyValue
	cfg      Config
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

// New creates the grant buckets and returns a Service over them; the
// verdict bucket is where a grant without its record is looked for.
// Start publishes the keys and serves the endpoints.
func New(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, verdicts jetstream.KeyValue, cfg Config) (*Service, error) {
	switch {
	case cfg.Ring == nil || cfg.Trails == nil || verdicts == nil:
		return nil, fmt.Errorf("%w: grants need a key ring, audit trails and the verdict bucket", bus.ErrInvalidConfig)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.TTL == 0 {
		cfg.TTL = 7 * 24 * time.Hour
	}
	if cfg.Sweep <= 0 {
		cfg.Sweep = DefaultSweep
	}
	if cfg.FullSweep <= 0 {
		cfg.FullSweep = DefaultFullSweep
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	g := &Service{nc: nc, verdicts: verdicts, cfg: cfg, log: cfg.Log}
	var err error
	g.records, err = bus.Retry(ctx, func(ctx context.Context) (jetstream.KeyValue, error) {
		return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: wire.GrantsBucket, Description: "Grants gated issued, by <tenant>.<proposal id>: issued, used or expired.",
			History: 1, TTL: cfg.TTL, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("creating bucket %s: %w", wire.GrantsBucket, err)
	}
	g.keys, err = bus.Retry(ctx, func(ctx context.Context) (jetstream.KeyValue, error) {
		return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: KeysBucket, Description: "The grant key set every gated publishes into.",
			History: 1, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("creating bucket %s: %w", KeysBucket, err)
	}
	g.ring.Store(cfg.Ring)
	return g, nil
}

// grantsSetup bounds Start's first publication of the keys.
const grantsSetup = 30 * time.Second

// Start publishes the keys, serves gated.grants.keys and
// gated.grants.<tenant>.use, and starts the expiry sweep.
func (g *Service) Start(ctx context.Context) error {
	// The key bucket may have been created a moment ago on a cluster that
	// has not elected its leader yet: a read that goes unanswered is asked
	// again, as Setup asks again, for as long as a setup may take.
	pctx, stop := context.WithTimeout(ctx, grantsSetup)
	_, err := bus.Retry(pctx, func(ctx context.Context) (struct{}, error) {
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
func (g *Service) Stop() {
	for _, s := range g.subs {
		_ = s.Drain()
	}
	if g.cancel != nil {
		g.cancel()
	}
	g.wg.Wait()
}

func (g *Service) record(ctx context.Context, key string) (Record, uint64, error) {
	e, err := g.records.Get(ctx, key)
	if err != nil {
		return Record{}, 0, err
	}
	var rec Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return Record{}, 0, fmt.Errorf("grant record %s is malformed: %w", key, err)
	}
	return rec, e.Revision(), nil
}

func (g *Service) audit(ctx context.Context, tenant, id, event string, data any) error {
	body, err := json.Marshal(data)
	if err != nil {
		return err
	}
	_, err = g.cfg.Trails().Seal(ctx, gated.AuditEvent{
		V: gated.SchemaVersion, Event: event, Tenant: tenant, ProposalID: id, At: g.cfg.Now().UTC(), Data: body,
	})
	return err
}

// maxIssued bounds the grants Issued remembers until they are recorded.
const maxIssued = 4096

// Issued remembers the claims of a grant this process has just signed,
// until Record records it. engine.GrantIssuer calls it.
func (g *Service) Issued(token string, c grant.Claims) {
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
func (g *Service) takeIssued(token string) (grant.Claims, bool) {
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
func (g *Service) Record(ctx context.Context, v *gated.Verdict) error {
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
	rec := Record{GID: c.GID, Tenant: c.Tenant, ProposalID: c.ProposalID, Exp: c.ExpiresAt, Agent: v.Agent, State: StateIssued}
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
func (g *Service) replaceRecord(ctx context.Context, key, gid string, data []byte) error {
	old, rev, err := g.record(ctx, key)
	if err != nil || old.GID == gid {
		return err
	}
	_, err = g.records.Update(ctx, key, data, rev)
	return err
}
