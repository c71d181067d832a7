// Package grants is gated's side of signed grants: it publishes the key
// set grants verify under, serves the single-use endpoint, which records
// each grant when it is used, marks the grants left unused as expired and
// takes in executors' outcome reports on the grant records.
package grants

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
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

// Grant states of a Record. A grant has no record until it is used, or
// expires unused.
const (
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

// DefaultSweep is how often a gated looks for the grants it signed that
// expired unused, and republishes its keys.
const DefaultSweep = 10 * time.Second

// Record is a grant's record in wire.GrantsBucket, written when the grant
// is used (or found expired unused): its creation is the single use.
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
	// State is used or expired.
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
	// Now defaults to time.Now.
	Now func() time.Time
	Log *zap.Logger
	// Executed, when set, is told of each use of a grant before the use
	// is recorded: serve adds the action to its agent's flow state there. An error
	// refuses the use, and the grant stays unused: an action whose
	// labels cannot join the state does not run.
	Executed func(ctx context.Context, use Executed) error
}

// Executed is a grant's use as Config.Executed is told of it: the
// approved action about to run.
type Executed struct {
	Tenant, ProposalID, Action string
	// Agent is the agent the grant was issued to (requested_by.agent of
	// its proposal), "" for none.
	Agent string
	// Labels are the labels the proposal added to its action's.
	Labels []string
	At     time.Time
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
	// due holds the grants this process signed, soonest exp first, so
	// that the sweep reads only those whose exp passed.
	dmu sync.Mutex
	due dueGrants

	cancel context.CancelFunc
	wg     sync.WaitGroup
	subs   []*nats.Subscription
}

// New creates the grant buckets and returns a Service over them; the
// verdict bucket is where a grant is looked for when it is used: only the
// stored verdict's grant is usable.
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
			Bucket: wire.GrantsBucket, Description: "Grants used or expired unused, by <tenant>.<proposal id>.",
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

// Issued remembers a grant this process has just signed, for the sweep
// to look for at its exp: a grant still unused then, and carried by the
// stored verdict, is marked expired. engine.GrantIssuer calls it; it
// does no I/O.
func (g *Service) Issued(token string, c grant.Claims) {
	g.addDue(dueGrant{exp: c.ExpiresAt, key: c.Tenant + "." + c.ProposalID, gid: c.GID, token: sha256.Sum256([]byte(token))})
}
