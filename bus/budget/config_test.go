package budget_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/bus/budget"
)

// TestParseConfig: a budgets file's limits resolve agent over tenant over
// defaults over the built-in ones.
func TestParseConfig(t *testing.T) {
	cfg, err := budget.ParseConfig("budgets.yaml", []byte(`
defaults:
  agent: {proposals: 30/1m, reviews_in_flight: 4}
tenants:
  acme:
    tenant: {tokens: 1000/1h}
    agent: {reads: unlimited}
    agents:
      deploy-bot: {proposals: 5/10s, holds_pending: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		note string
		got  budget.Limits
		want budget.Limits
	}{
		{"an agent's own override", cfg.Agent("acme", "deploy-bot"), budget.Limits{
			Proposals: budget.Rate{Max: 5, Interval: 10 * time.Second}, Reads: budget.Rate{Interval: time.Minute},
			Tokens: budget.DefaultAgent.Tokens, ReviewsInFlight: 4, HoldsPending: 1}},
		{"another agent of the tenant", cfg.Agent("acme", "other"), budget.Limits{
			Proposals: budget.Rate{Max: 30, Interval: time.Minute}, Reads: budget.Rate{Interval: time.Minute},
			Tokens: budget.DefaultAgent.Tokens, ReviewsInFlight: 4, HoldsPending: budget.DefaultAgent.HoldsPending}},
		{"an agent of a tenant not listed", cfg.Agent("zeta", "deploy-bot"), budget.Limits{
			Proposals: budget.Rate{Max: 30, Interval: time.Minute}, Reads: budget.DefaultAgent.Reads,
			Tokens: budget.DefaultAgent.Tokens, ReviewsInFlight: 4, HoldsPending: budget.DefaultAgent.HoldsPending}},
		{"the tenant", cfg.Tenant("acme"), budget.Limits{
			Proposals: budget.DefaultTenant.Proposals, Reads: budget.DefaultTenant.Reads,
			Tokens: budget.Rate{Max: 1000, Interval: time.Hour}, ReviewsInFlight: budget.DefaultTenant.ReviewsInFlight,
			HoldsPending: budget.DefaultTenant.HoldsPending}},
		{"a tenant not listed", cfg.Tenant("zeta"), budget.DefaultTenant},
	} {
		t.Run(tc.note, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %+v\nwant %+v", tc.got, tc.want)
			}
		})
	}
}

// TestParseConfigRefusesBadLimits: each bad limit is refused with the
// file and the line it is on.
func TestParseConfigRefusesBadLimits(t *testing.T) {
	for _, tc := range []struct {
		note, file, want string
	}{
		{"zero interval", "defaults:\n  agent:\n    proposals: 10/0s\n", "budgets.yaml:3: defaults.agent.proposals: \"10/0s\": the interval must be positive"},
		{"negative interval", "defaults:\n  agent:\n    reads: 10/-1m\n", "budgets.yaml:3: defaults.agent.reads: \"10/-1m\": the interval must be positive"},
		{"interval too long", "defaults:\n  tenant:\n    tokens: 10/48h\n", "budgets.yaml:3: defaults.tenant.tokens: \"10/48h\": the interval must be at most 24h"},
		{"no interval", "defaults:\n  agent:\n    proposals: 10\n", "budgets.yaml:3: defaults.agent.proposals: \"10\": want COUNT/INTERVAL"},
		{"zero limit", "tenants:\n  acme:\n    agent:\n      reviews_in_flight: 0\n", "budgets.yaml:4: tenants.acme.agent.reviews_in_flight: \"0\": a limit must be at least 1"},
		{"negative count", "tenants:\n  acme:\n    agent:\n      proposals: -3/1m\n", "budgets.yaml:4: tenants.acme.agent.proposals: \"-3\": a limit must be at least 1"},
		{"not a number", "tenants:\n  acme:\n    agent:\n      holds_pending: many\n", "budgets.yaml:4: tenants.acme.agent.holds_pending: \"many\": want a whole number"},
		{"unknown limit", "defaults:\n  agent:\n    proposal: 1/1m\n", "budgets.yaml:3: defaults.agent.proposal: unknown limit"},
		{"unknown section", "tenant:\n  agent: {}\n", "budgets.yaml:1: tenant: unknown key"},
		{"bad tenant", "tenants:\n  Acme!: {}\n", "budgets.yaml:2: tenants.Acme!: not a tenant token"},
		{"agents in defaults", "defaults:\n  agents: {}\n", "budgets.yaml:2: defaults.agents: unknown key"},
		{"twice", "defaults:\n  agent: {reads: 1/1m}\n  agent: {reads: 2/1m}\n", "budgets.yaml:3: defaults.agent: already set at line 2"},
		{"a list", "defaults:\n  agent:\n    reads: [1, 2]\n", "budgets.yaml:3: defaults.agent.reads: want a single value"},
		{"not YAML", "defaults: {agent: [\n", "budgets.yaml:"},
		{"two documents", "defaults: {}\n---\ntenants: {}\n", "budgets.yaml:2: a budgets file holds one YAML document"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			_, err := budget.ParseConfig("budgets.yaml", []byte(tc.file))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, budget.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want one with %q", err, tc.want)
			}
		})
	}
}

// TestLoadConfigNamesTheFile: a file that cannot be read is an error
// naming it.
func TestLoadConfigNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "budgets.yaml")
	if _, err := budget.LoadConfig(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("LoadConfig of a missing file: %v", err)
	}
	if err := os.WriteFile(path, []byte("defaults:\n  agent:\n    proposals: 0/1m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := budget.LoadConfig(path); err == nil || !strings.Contains(err.Error(), path+":3:") {
		t.Fatalf("LoadConfig of a bad file: %v", err)
	}
}

// FuzzParseConfig: any file is a config or an ErrInvalidConfig naming the
// file, never a panic, and a config's limits are never negative.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"", "defaults: {agent: {proposals: 1/1s}}", "tenants: {acme: {agents: {bot: {tokens: unlimited}}}}",
		"defaults:\n  tenant:\n    reviews_in_flight: 3\n", "tenants: {a: {tenant: {reads: 9/24h}}}", "- 1\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := budget.ParseConfig("f.yaml", data)
		if err != nil {
			if !errors.Is(err, budget.ErrInvalidConfig) || !strings.Contains(err.Error(), "f.yaml") {
				t.Fatalf("error %v", err)
			}
			return
		}
		for _, tenant := range append(cfg.Tenants(), "zz") {
			for _, l := range []budget.Limits{cfg.Tenant(tenant), cfg.Agent(tenant, "bot")} {
				for _, r := range []budget.Rate{l.Proposals, l.Reads, l.Tokens} {
					if r.Max < 0 || r.Interval < time.Second || r.Interval > budget.MaxInterval {
						t.Fatalf("rate %+v", r)
					}
				}
				if l.ReviewsInFlight < 0 || l.HoldsPending < 0 {
					t.Fatalf("limits %+v", l)
				}
			}
		}
	})
}
