package budget

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is a windowed limit: at most Max in each fixed window of Interval,
// windows aligned on the Unix epoch. Max 0 is unlimited: the window is
// still counted, so the policy and `gated budgets show` see it.
type Rate struct {
	Max      int64
	Interval time.Duration
}

// String is the rate as the budgets file writes it, e.g. 60/1m.
func (r Rate) String() string {
	if r.Max == 0 {
		return "unlimited"
	}
	return strconv.FormatInt(r.Max, 10) + "/" + shortDuration(r.Interval)
}

// Limits are the limits of one scope: a tenant as a whole, or one agent.
// A zero Max (or a zero count) is unlimited.
type Limits struct {
	// Proposals bounds proposals that go to review or are held for an
	// operator, per interval.
	Proposals Rate `json:"proposals"`
	// Reads bounds proposals the policy approves without a review, per
	// interval: higher than Proposals, since they cost no review.
	Reads Rate `json:"reads"`
	// Tokens bounds the reviewer tokens (prompt and completion, as the
	// reviewers report them) per interval; a proposal is refused review
	// once they are spent.
	Tokens Rate `json:"tokens"`
	// ReviewsInFlight bounds proposals under review at once.
	ReviewsInFlight int64 `json:"reviews_in_flight"`
	// HoldsPending bounds actions held for an operator and not yet
	// decided.
	HoldsPending int64 `json:"holds_pending"`
}

// DefaultTenant and DefaultAgent are the built-in limits, used for every
// limit a budgets file does not set. They are meant to be noticed by an
// agent in a loop long before its tenant's bill is: an agent may propose
// one review-bound change a second on average, a tenant ten.
var (
	DefaultTenant = Limits{
		Proposals:       Rate{Max: 600, Interval: time.Minute},
		Reads:           Rate{Max: 6000, Interval: time.Minute},
		Tokens:          Rate{Max: 5_000_000, Interval: time.Hour},
		ReviewsInFlight: 128,
		HoldsPending:    500,
	}
	DefaultAgent = Limits{
		Proposals:       Rate{Max: 60, Interval: time.Minute},
		Reads:           Rate{Max: 600, Interval: time.Minute},
		Tokens:          Rate{Max: 1_000_000, Interval: time.Hour},
		ReviewsInFlight: 16,
		HoldsPending:    50,
	}
)

// MaxInterval is the longest window a rate may have; the counters are
// kept a little longer than it.
const MaxInterval = 24 * time.Hour

// partial is a scope's limits as a budgets file gives them: nil fields
// are taken from the next level.
type partial struct {
	proposals, reads, tokens *Rate
	reviews, holds           *int64
}

func (p partial) over(base Limits) Limits {
	if p.proposals != nil {
		base.Proposals = *p.proposals
	}
	if p.reads != nil {
		base.Reads = *p.reads
	}
	if p.tokens != nil {
		base.Tokens = *p.tokens
	}
	if p.reviews != nil {
		base.ReviewsInFlight = *p.reviews
	}
	if p.holds != nil {
		base.HoldsPending = *p.holds
	}
	return base
}

// tenantConfig is one tenant's section of a budgets file.
type tenantConfig struct {
	tenant, agent partial
	agents        map[string]partial
}

// Config is a budgets file: defaults and per-tenant limits with per-agent
// overrides. The zero Config is the built-in defaults for every tenant.
type Config struct {
	// Path is the file it was read from, "" for the built-in defaults.
	Path     string
	defaults tenantConfig
	tenants  map[string]tenantConfig
}

// Tenant returns the limits of tenant as a whole.
func (c *Config) Tenant(tenant string) Limits {
	l := c.defaults.tenant.over(DefaultTenant)
	if t, ok := c.tenants[tenant]; ok {
		l = t.tenant.over(l)
	}
	return l
}

// Agent returns the limits of one agent of tenant: the agent's own
// override, over the tenant's agent limits, over the file's default
// agent limits, over DefaultAgent.
func (c *Config) Agent(tenant, agent string) Limits {
	l := c.defaults.agent.over(DefaultAgent)
	if t, ok := c.tenants[tenant]; ok {
		l = t.agent.over(l)
		if a, ok := t.agents[agent]; ok {
			l = a.over(l)
		}
	}
	return l
}

// Overrides lists the agents of tenant the file gives limits of their
// own (tenants.<tenant>.agents), sorted.
func (c *Config) Overrides(tenant string) []string {
	t := c.tenants[tenant]
	out := make([]string, 0, len(t.agents))
	for a := range t.agents {
		out = append(out, a)
	}
	sortStrings(out)
	return out
}

// overrides tells whether the file gives agent of tenant limits of its
// own.
func (c *Config) overrides(tenant, agent string) bool {
	_, ok := c.tenants[tenant].agents[agent]
	return ok
}

// Tenants lists the tenants the file names, sorted.
func (c *Config) Tenants() []string {
	out := make([]string, 0, len(c.tenants))
	for t := range c.tenants {
		out = append(out, t)
	}
	sortStrings(out)
	return out
}

// parseRate reads "N/INTERVAL" (e.g. 60/1m) or "unlimited".
func parseRate(s string) (Rate, error) {
	s = strings.TrimSpace(s)
	if s == "unlimited" {
		return Rate{Interval: time.Minute}, nil
	}
	n, per, ok := strings.Cut(s, "/")
	if !ok {
		return Rate{}, fmt.Errorf("%q: want COUNT/INTERVAL such as 60/1m, or unlimited", s)
	}
	max, err := parseCount(n)
	if err != nil {
		return Rate{}, err
	}
	d, err := parseInterval(per)
	if err != nil {
		return Rate{}, fmt.Errorf("%q: %v", s, err)
	}
	return Rate{Max: max, Interval: d}, nil
}

// parseInterval reads a rate's interval: a duration from 1s to
// MaxInterval in whole seconds.
func parseInterval(per string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(per))
	switch {
	case err != nil:
		return 0, fmt.Errorf("the interval %q is not a duration such as 1m or 1h", per)
	case d <= 0:
		return 0, fmt.Errorf("the interval must be positive")
	case d < time.Second:
		return 0, fmt.Errorf("the interval must be at least 1s")
	case d > MaxInterval:
		return 0, fmt.Errorf("the interval must be at most %s", shortDuration(MaxInterval))
	case d%time.Second != 0:
		return 0, fmt.Errorf("the interval must be a whole number of seconds")
	}
	return d, nil
}

// parseCount reads a limit of at least 1.
func parseCount(s string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q: want a whole number of at least 1, or unlimited", s)
	case n < 1:
		return 0, fmt.Errorf("%q: a limit must be at least 1 (write unlimited for none)", s)
	}
	return n, nil
}

func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
