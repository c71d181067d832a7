package budget

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gated/gated"
)

// MarshalJSON writes the rate as {"max": 60, "interval": "1m"}; max 0 is
// unlimited.
func (r Rate) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Max      int64  `json:"max"`
		Interval string `json:"interval"`
	}{r.Max, shortDuration(r.Interval)})
}

// UnmarshalJSON reads a rate as MarshalJSON writes it, with the checks
// of a budgets file: max 0 (unlimited) or more, an interval from 1s to
// MaxInterval in whole seconds. Errors wrap ErrInvalidConfig.
func (r *Rate) UnmarshalJSON(data []byte) error {
	var w struct {
		Max      *int64  `json:"max"`
		Interval *string `json:"interval"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("%w: a rate: %v", ErrInvalidConfig, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: a rate: data after the object", ErrInvalidConfig)
	}
	switch {
	case w.Max == nil || w.Interval == nil:
		return fmt.Errorf("%w: a rate needs max and interval", ErrInvalidConfig)
	case *w.Max < 0:
		return fmt.Errorf("%w: a rate's max %d is negative", ErrInvalidConfig, *w.Max)
	}
	d, err := parseInterval(*w.Interval)
	if err != nil {
		return fmt.Errorf("%w: a rate's interval: %v", ErrInvalidConfig, err)
	}
	*r = Rate{Max: *w.Max, Interval: d}
	return nil
}

// Usage is one scope's counters beside its limits, as `gated budgets
// show` and the console show them.
type Usage struct {
	// Scope is gated.ScopeTenant for the tenant as a whole, or
	// gated.ScopeAgent for one of its agents, named by Agent ("" for the
	// proposals that name no agent).
	Scope string `json:"scope"`
	Agent string `json:"agent,omitempty"`
	// Override is true for an agent the budgets file gives limits of its
	// own (tenants.<tenant>.agents.<agent>).
	Override bool   `json:"override,omitempty"`
	Limits   Limits `json:"limits"`
	// Counters are the counts at the time asked.
	Counters gated.BudgetCounters `json:"counters"`
	// ResetsAt says, by limit name, when its count starts again: the end
	// of the current window for proposals, reads and tokens; for
	// reviews_in_flight and holds_pending, when the earliest live lease
	// stops counting (its end rounded up to the 10-second slot), absent
	// while none is live.
	ResetsAt map[string]time.Time `json:"resets_at"`
}

// TenantUsage is one tenant's budget: the tenant's own scope and every
// agent that has counters or limits of its own, ordered by agent.
type TenantUsage struct {
	Tenant string  `json:"tenant"`
	Whole  Usage   `json:"whole"`
	Agents []Usage `json:"agents"`
}

// Usage reads the counters of tenant and of each of its agents that has
// counters or an override in the budgets file, beside the limits in
// force, at now. Errors: NATS errors, and ErrCorruptCounters for a
// record that does not decode.
func (s *Store) Usage(ctx context.Context, tenant string, now time.Time) (*TenantUsage, error) {
	cfg := s.Config()
	c, err := s.read(ctx, tenantKey(tenant), tenantScope(tenant))
	if err != nil {
		return nil, err
	}
	out := &TenantUsage{Tenant: tenant, Whole: c.usage(gated.ScopeTenant, cfg.Tenant(tenant), now), Agents: []Usage{}}
	keys, err := s.Keys(ctx, tenant)
	if err != nil {
		return nil, err
	}
	agents := cfg.Overrides(tenant)
	for _, k := range keys {
		if a, ok := strings.CutPrefix(k, tenant+".agent."); ok {
			agents = append(agents, agentOfKey(a))
		}
	}
	slices.Sort(agents)
	for _, agent := range slices.Compact(agents) {
		c, err := s.read(ctx, agentKey(tenant, agent), agentScope(tenant, agent))
		if err != nil {
			return nil, err
		}
		u := c.usage(gated.ScopeAgent, cfg.Agent(tenant, agent), now)
		u.Agent, u.Override = agent, cfg.overrides(tenant, agent)
		out.Agents = append(out.Agents, u)
	}
	return out, nil
}

// Tenants lists the tenants that have counters or limits of their own in
// the budgets file, sorted.
func (s *Store) Tenants(ctx context.Context) ([]string, error) {
	keys, err := s.Keys(ctx, "*")
	if err != nil {
		return nil, err
	}
	tenants := s.Config().Tenants()
	for _, k := range keys {
		t, _, _ := strings.Cut(k, ".")
		tenants = append(tenants, t)
	}
	slices.Sort(tenants)
	return slices.Compact(tenants), nil
}

// agentOfKey is the agent an agent key token names (see AgentKey).
func agentOfKey(key string) string {
	if enc, ok := strings.CutPrefix(key, "="); ok {
		if b, err := hex.DecodeString(enc); err == nil {
			return string(b)
		}
	}
	return key
}

// usage is the record's counters beside l at now.
func (c *counters) usage(scope string, l Limits, now time.Time) Usage {
	u := Usage{Scope: scope, Limits: l, Counters: c.state(l, now), ResetsAt: map[string]time.Time{}}
	for name, r := range map[string]Rate{gated.LimitProposals: l.Proposals, gated.LimitReads: l.Reads, gated.LimitTokens: l.Tokens} {
		if r.Interval > 0 {
			u.ResetsAt[name] = time.UnixMilli(windowStart(now, r.Interval)).Add(r.Interval).UTC()
		}
	}
	for name, slots := range map[string][]slotCount{gated.LimitReviewsInFlight: c.ReviewEnds, gated.LimitHoldsPending: c.HoldEnds} {
		if n, first := live(slots, now); n > 0 {
			u.ResetsAt[name] = time.UnixMilli(first).UTC()
		}
	}
	return u
}
