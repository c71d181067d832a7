package budget

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// Bucket is the JetStream key-value bucket of the budget counters. Its
// keys are <tenant>.tenant and <tenant>.agent.<agent key> (see AgentKey).
const Bucket = "GATED_BUDGETS"

// bucketTTL is how long a counter record is kept after its last change:
// longer than the longest window, so a window's count outlives it.
const bucketTTL = MaxInterval + time.Hour

// commitTimeout bounds one update of a scope's counters, compare-and-set
// retries included.
const commitTimeout = 5 * time.Second

// Setup creates or updates the counter bucket. It is safe to run from
// many gated processes at once.
func Setup(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	if replicas == 0 {
		replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "Budget counters by tenant and agent: windows, leases of reviews and holds, refusals.",
		History:     1,
		TTL:         bucketTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("creating bucket %s: %w", Bucket, err)
	}
	return kv, nil
}

var plainAgent = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// AgentKey is the key token of an agent: the agent itself when it is a
// plain token, else "=" and its hex (which no plain token can be); "="
// alone for a proposal that names no agent.
func AgentKey(agent string) string {
	if plainAgent.MatchString(agent) {
		return agent
	}
	return "=" + hex.EncodeToString([]byte(agent))
}

func tenantKey(tenant string) string       { return tenant + ".tenant" }
func agentKey(tenant, agent string) string { return tenant + ".agent." + AgentKey(agent) }
func tenantScope(tenant string) string     { return tenant }
func agentScope(tenant, agent string) string {
	return tenant + "/" + AgentKey(agent)
}

// Event is what the store reports for metrics.
type Event struct {
	Tenant string
	// Use is set for an admission; Refused names the limit that refused
	// it ("" when admitted).
	Use     engine.BudgetUse
	Refused string
	// Tokens is set for tokens spent.
	Tokens int64
	// RefusalsUnwritten is set when a write of the refusals counted in
	// this process failed: they are kept for the next.
	RefusalsUnwritten error
}

// Store keeps the budget counters in the bucket and enforces the limits
// of its Config. It implements engine.Budgets. Every change of a scope's
// record is a compare-and-set; this process's concurrent changes to one
// record are committed together in one write (group commit), so a busy
// tenant costs a round trip per batch rather than a retry per proposal.
type Store struct {
	kv      jetstream.KeyValue
	cfg     atomic.Pointer[Config]
	observe func(Event)
	mu      sync.Mutex
	keys    map[string]*keyState
	// mine are the review leases this process wrote and has not yet
	// released, with the revision it wrote: the release removes them
	// without reading them first.
	mineMu sync.Mutex
	mine   map[string]leaseAt
	// allow are this process's allowances of reads by record key, and
	// allowFor how long a block of them stays unused before it goes back
	// (see allowance.go).
	allowMu  sync.Mutex
	allow    map[string]*allowance
	allowFor time.Duration
	// refusals are the refusals this process counted and has not
	// written yet, by record key, written every refEvery (see
	// refusals.go); refDue is set while a write is scheduled, and flushMu
	// is held by the write under way.
	refMu    sync.Mutex
	refusals map[string]*pendingRefusals
	refDue   bool
	refEvery time.Duration
	flushMu  sync.Mutex
}

var _ engine.Budgets = (*Store)(nil)

// New returns a store over kv enforcing cfg (nil: the built-in defaults).
// observe, when not nil, hears every admission, refusal and spend; it
// must not block.
func New(kv jetstream.KeyValue, cfg *Config, observe func(Event)) *Store {
	s := &Store{kv: kv, observe: observe, keys: map[string]*keyState{}, mine: map[string]leaseAt{},
		allow: map[string]*allowance{}, allowFor: allowanceLease,
		refusals: map[string]*pendingRefusals{}, refEvery: refusalFlush}
	s.SetConfig(cfg)
	return s
}

// SetConfig swaps the limits in force; counts are kept.
func (s *Store) SetConfig(cfg *Config) {
	if cfg == nil {
		cfg = &Config{}
	}
	s.cfg.Store(cfg)
}

// Config returns the limits in force.
func (s *Store) Config() *Config { return s.cfg.Load() }

// Check tells whether the counters can be reached, for readiness.
func (s *Store) Check(ctx context.Context) error {
	if _, err := s.kv.Status(ctx); err != nil {
		return fmt.Errorf("reaching the budget counters (bucket %s): %w", Bucket, err)
	}
	return nil
}

// State implements engine.Budgets: the tenant's and agent's records are
// read side by side.
func (s *Store) State(ctx context.Context, tenant, agent string, now time.Time) (gated.BudgetState, error) {
	cfg := s.Config()
	var st gated.BudgetState
	var terr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		var c *counters
		if c, terr = s.read(ctx, tenantKey(tenant), tenantScope(tenant)); terr == nil {
			st.Tenant = s.withPending(tenantKey(tenant), c.state(cfg.Tenant(tenant), now), now)
		}
	}()
	c, err := s.read(ctx, agentKey(tenant, agent), agentScope(tenant, agent))
	if err == nil {
		st.Agent = s.withPending(agentKey(tenant, agent), c.state(cfg.Agent(tenant, agent), now), now)
	}
	<-done
	if err = errors.Join(terr, err); err != nil {
		return gated.BudgetState{}, err
	}
	return st, nil
}

// Read returns the counters of one scope as stored, for `gated budgets
// show`: agent "" with tenantWide true reads the tenant's own.
func (s *Store) Read(ctx context.Context, tenant, agent string, tenantWide bool, now time.Time) (gated.BudgetCounters, error) {
	cfg := s.Config()
	if tenantWide {
		c, err := s.read(ctx, tenantKey(tenant), tenantScope(tenant))
		if err != nil {
			return gated.BudgetCounters{}, err
		}
		return s.withPending(tenantKey(tenant), c.state(cfg.Tenant(tenant), now), now), nil
	}
	c, err := s.read(ctx, agentKey(tenant, agent), agentScope(tenant, agent))
	if err != nil {
		return gated.BudgetCounters{}, err
	}
	return s.withPending(agentKey(tenant, agent), c.state(cfg.Agent(tenant, agent), now), now), nil
}

// Admit implements engine.Budgets: the agent's limits first, then the
// tenant's; a refusal by the tenant's takes back the agent's count. A
// read is admitted from the blocks of reads this process leased (see
// admitRead).
//
// A review or hold also takes a lease under a key of its own, written
// with create-if-absent after both records counted it. The order fails
// closed: a crash between the counts and the lease leaves a count with no
// lease, which stops counting at the end of its slot (and a redelivery
// counts once more meanwhile); a lease is never written without its
// counts, so no proposal goes uncounted. A redelivered proposal whose
// lease is live is admitted again without counting, its lease moved to
// the later end.
//
// The lease is not read first: nearly every admission is a proposal's
// first, and the create-if-absent finds the others. A proposal that holds
// a lease already then counts for the moment between its count and the
// write that finds the lease, and its count is taken back (over-counting
// for that moment, never under-counting); a refusal is only given after
// reading the lease, so that a redelivery is never refused for the lease
// it holds itself.
func (s *Store) Admit(ctx context.Context, req engine.BudgetRequest) (*gated.BudgetRefusal, error) {
	if req.Use != engine.BudgetReview && req.Use != engine.BudgetHold {
		refusal, err := s.admitRead(ctx, req)
		s.emitAdmission(req, refusal, err)
		return refusal, err
	}
	key := leaseKey(req.Tenant, req.Use, req.ID)
	var held *lease
	var rev uint64
	read := false
	// readLease reads the lease and, when it is live, admits the
	// proposal under it.
	readLease := func() (admitted bool, err error) {
		read = true
		if held, rev, err = s.lease(ctx, key); err != nil || !held.liveAt(req.Now) {
			return false, err
		}
		s.emit(Event{Tenant: req.Tenant, Use: req.Use})
		return true, s.extend(ctx, req, key, held, rev)
	}
	for range 8 {
		if read {
			if admitted, err := readLease(); admitted || err != nil {
				return nil, err
			}
		}
		refusal, err := s.admitCounts(ctx, req)
		if refusal != nil && !read {
			// Refused before the lease was read: a live lease of this
			// proposal admits it, whatever the counts say.
			if admitted, err := readLease(); admitted || err != nil {
				return nil, err
			}
		}
		if err != nil || refusal != nil {
			s.emitAdmission(req, refusal, err)
			return refusal, err
		}
		l := lease{Agent: req.Agent, End: slotEnd(ms(req.Until))}
		written, werr := s.putLease(ctx, key, l, rev)
		if werr == nil {
			s.keepLease(req.Use, key, l, written)
			s.emitAdmission(req, nil, nil)
			return nil, nil
		}
		// Not leased: the counts are taken back (a failure to take them
		// back over-counts until the slot ends).
		if uerr := s.uncount(ctx, req); uerr != nil || !casConflict(werr) {
			return nil, errors.Join(werr, uerr)
		}
		// The lease is there (a redelivery, or another delivery of the
		// proposal took it, most likely): read it.
		read = true
	}
	return nil, fmt.Errorf("%w: lease %s", ErrBusy, key)
}

// emitAdmission reports an admission or a refusal for metrics.
func (s *Store) emitAdmission(req engine.BudgetRequest, refusal *gated.BudgetRefusal, err error) {
	switch {
	case err != nil:
	case refusal != nil:
		s.emit(Event{Tenant: req.Tenant, Use: req.Use, Refused: refusal.Limit})
	default:
		s.emit(Event{Tenant: req.Tenant, Use: req.Use})
	}
}

// admitCounts checks and counts req against the agent's record, then the
// tenant's. It reports nothing for metrics: the caller does, once it
// knows whether the answer stands.
func (s *Store) admitCounts(ctx context.Context, req engine.BudgetRequest) (*gated.BudgetRefusal, error) {
	cfg := s.Config()
	al, tl := cfg.Agent(req.Tenant, req.Agent), cfg.Tenant(req.Tenant)
	ak, as := agentKey(req.Tenant, req.Agent), agentScope(req.Tenant, req.Agent)
	res, err := s.apply(ctx, ak, as, func(c *counters) (any, bool) {
		r := c.admit(al, req)
		return r, r == nil
	})
	if err != nil {
		return nil, err
	}
	if r, _ := res.(*gated.BudgetRefusal); r != nil {
		r.Scope, r.Agent = gated.ScopeAgent, req.Agent
		return r, nil
	}
	res, err = s.apply(ctx, tenantKey(req.Tenant), tenantScope(req.Tenant), func(c *counters) (any, bool) {
		r := c.admit(tl, req)
		return r, r == nil
	})
	var refusal *gated.BudgetRefusal
	if err == nil {
		refusal, _ = res.(*gated.BudgetRefusal)
	}
	if err != nil || refusal != nil {
		// Not admitted: the agent's count is taken back.
		_, uerr := s.apply(ctx, ak, as, func(c *counters) (any, bool) {
			c.unadmit(al, req)
			return nil, true
		})
		if err != nil {
			return nil, errors.Join(err, uerr)
		}
		refusal.Scope = gated.ScopeTenant
		return refusal, nil
	}
	return nil, nil
}

// uncount takes back what admitCounts counted for req in both records.
func (s *Store) uncount(ctx context.Context, req engine.BudgetRequest) error {
	cfg := s.Config()
	al, tl := cfg.Agent(req.Tenant, req.Agent), cfg.Tenant(req.Tenant)
	return s.onBoth(ctx, req.Tenant, req.Agent,
		func(c *counters) (any, bool) { c.unadmit(al, req); return nil, true },
		func(c *counters) (any, bool) { c.unadmit(tl, req); return nil, true })
}

// onBoth applies fa to the record of tenant's agent and ft to the
// tenant's, side by side.
func (s *Store) onBoth(ctx context.Context, tenant, agent string, fa, ft func(c *counters) (any, bool)) error {
	var terr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, terr = s.apply(ctx, tenantKey(tenant), tenantScope(tenant), ft)
	}()
	_, aerr := s.apply(ctx, agentKey(tenant, agent), agentScope(tenant, agent), fa)
	<-done
	return errors.Join(aerr, terr)
}

// extend moves the live lease held (at rev) of a redelivered proposal to
// req.Until when that is in a later slot: the records first, then the
// lease. A crash between the two leaves the records counting the lease at
// its later end while the lease names the earlier one, whose release then
// takes one off the earlier slot: the total is right until the earlier
// slot ends and one too many after, never one too few.
func (s *Store) extend(ctx context.Context, req engine.BudgetRequest, key string, held *lease, rev uint64) error {
	from, to := held.End, slotEnd(ms(req.Until))
	if to <= from {
		return nil
	}
	moveAll := func(from, to int64) error {
		mv := func(c *counters) (any, bool) {
			c.move(req.Use, from, to)
			return nil, true
		}
		return s.onBoth(ctx, req.Tenant, held.Agent, mv, mv)
	}
	if err := moveAll(from, to); err != nil {
		return err
	}
	moved := lease{Agent: held.Agent, End: to}
	written, werr := s.putLease(ctx, key, moved, rev)
	if werr == nil {
		s.keepLease(req.Use, key, moved, written)
		return nil
	}
	// The lease changed meanwhile (released, or moved by another
	// delivery): the move is taken back.
	uerr := moveAll(to, from)
	if casConflict(werr) {
		return uerr
	}
	return errors.Join(werr, uerr)
}

// Release implements engine.Budgets; the lease names the agent whose
// record counts it. The lease key goes first, then its count in the
// agent's and the tenant's records, in the same change as the tokens
// spent. A crash between the two leaves the counts, which end with their
// slot: over-counting for a while, never under-counting. A review lease
// this process wrote is removed at the revision it wrote, without reading
// it first; one that changed since is read and removed as it stands.
func (s *Store) Release(ctx context.Context, rel engine.BudgetRelease) error {
	held, err := s.removeLease(ctx, leaseKey(rel.Tenant, rel.Use, rel.ID))
	if err != nil {
		// The lease stays until its slot ends; the tokens still count.
		return errors.Join(err, s.spend(ctx, rel.Tenant, rel.Agent, rel.Tokens, rel.Now))
	}
	if held == nil {
		return s.spend(ctx, rel.Tenant, rel.Agent, rel.Tokens, rel.Now)
	}
	if held.Agent != rel.Agent {
		// Counted for the agent the lease names (a lease taken under
		// another agent's name by an earlier delivery); the tokens go
		// to the agent that spent them.
		free := func(c *counters) (any, bool) { return nil, c.release(rel.Use, held.End) }
		return errors.Join(s.onBoth(ctx, rel.Tenant, held.Agent, free, free),
			s.spend(ctx, rel.Tenant, rel.Agent, rel.Tokens, rel.Now))
	}
	cfg := s.Config()
	end := func(tokens Rate) func(c *counters) (any, bool) {
		return func(c *counters) (any, bool) {
			changed := c.release(rel.Use, held.End)
			if rel.Tokens > 0 {
				c.add(gated.LimitTokens, tokens, rel.Now, rel.Tokens)
				changed = true
			}
			return nil, changed
		}
	}
	err = s.onBoth(ctx, rel.Tenant, rel.Agent, end(cfg.Agent(rel.Tenant, rel.Agent).Tokens), end(cfg.Tenant(rel.Tenant).Tokens))
	if rel.Tokens > 0 {
		s.emit(Event{Tenant: rel.Tenant, Tokens: rel.Tokens})
	}
	return err
}

// removeLease removes the lease under key and returns it; nil when there
// is none.
func (s *Store) removeLease(ctx context.Context, key string) (*lease, error) {
	if mine, ok := s.takeLease(key); ok {
		err := s.kv.Delete(ctx, key, jetstream.LastRevision(mine.rev))
		if err == nil {
			return &mine.lease, nil
		}
		if !casConflict(err) {
			return nil, fmt.Errorf("removing budget lease %s: %w", key, err)
		}
		// Moved by a redelivery, or removed, since this process wrote
		// it: read it as it stands.
	}
	for range 8 {
		held, rev, err := s.lease(ctx, key)
		if err != nil || held == nil {
			return nil, err
		}
		err = s.kv.Delete(ctx, key, jetstream.LastRevision(rev))
		if casConflict(err) {
			// A redelivery moved the lease meanwhile: read it again.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("removing budget lease %s: %w", key, err)
		}
		return held, nil
	}
	return nil, fmt.Errorf("%w: lease %s", ErrBusy, key)
}

// spend adds tokens to the token counts of tenant and its agent.
func (s *Store) spend(ctx context.Context, tenant, agent string, tokens int64, now time.Time) error {
	if tokens <= 0 {
		return nil
	}
	cfg := s.Config()
	al, tl := cfg.Agent(tenant, agent), cfg.Tenant(tenant)
	err := s.onBoth(ctx, tenant, agent,
		func(c *counters) (any, bool) { c.add(gated.LimitTokens, al.Tokens, now, tokens); return nil, true },
		func(c *counters) (any, bool) { c.add(gated.LimitTokens, tl.Tokens, now, tokens); return nil, true })
	s.emit(Event{Tenant: tenant, Tokens: tokens})
	return err
}

// Reset removes the records of tenant (its own and every agent's) and
// its leases: every count and lease starts again from zero.
func (s *Store) Reset(ctx context.Context, tenant string) (int, error) {
	lister, err := s.kv.ListKeysFiltered(ctx, tenant+".>")
	if err != nil {
		return 0, fmt.Errorf("listing the budget counters of %s: %w", tenant, err)
	}
	n := 0
	for key := range lister.Keys() {
		if err := s.kv.Purge(ctx, key); err != nil {
			return n, fmt.Errorf("removing budget counters %s: %w", key, err)
		}
		n++
	}
	s.mu.Lock()
	clear(s.keys)
	s.mu.Unlock()
	s.mineMu.Lock()
	clear(s.mine)
	s.mineMu.Unlock()
	s.dropAllowances()
	s.refMu.Lock()
	clear(s.refusals)
	s.refMu.Unlock()
	return n, nil
}

// Keys lists the keys of tenant's records (its own and its agents'), not
// those of its leases; tenant "*" lists every tenant's.
func (s *Store) Keys(ctx context.Context, tenant string) ([]string, error) {
	lister, err := s.kv.ListKeysFiltered(ctx, tenantKey(tenant), tenant+".agent.*")
	if err != nil {
		return nil, fmt.Errorf("listing the budget counters of %s: %w", tenant, err)
	}
	var keys []string
	for key := range lister.Keys() {
		keys = append(keys, key)
	}
	return keys, nil
}

func (s *Store) emit(e Event) {
	if s.observe != nil {
		s.observe(e)
	}
}
