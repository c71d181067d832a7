package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/console"
)

// change proposes a write of action on host for tenant through the fleet
// client and returns its verdict: the default policy sends it to review.
func (g *gate) change(t *testing.T, tenant, id, action, host string) *gated.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	v, err := g.fleet.ProposeRaw(ctx, fmt.Appendf(nil, `{"v":1,"id":%q,"tenant":%q,"action":%q,"class":"write","blast_radius":"single_device",`+
		`"target":{"host":%q,"service":"nginx"},"reason":"nginx on %s stopped answering","requested_by":{"agent":"agent-1","session":"s-1"}}`,
		id, tenant, action, host, host))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// nearestRank is the q-quantile of xs by the nearest-rank method.
func nearestRank(xs []float64, q float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[max(int(math.Ceil(q*float64(len(s))))-1, 0)]
}

// TestReviewers: the reviewers page sums each reviewer's reviews of the
// window on the session's tenants alone; a tenant out of scope is
// refused and audited; a window that is not one is a 400 that names it.
func TestReviewers(t *testing.T) {
	g := startGateWith(t, gateOptions{reviewer: true})
	latencies := map[string][]float64{}
	var key audit.ReviewerKey
	for _, c := range []struct{ tenant, id, action, host string }{
		{"acme", "a-1", "host_restart_service", "web-1"},
		{"acme", "a-2", "host_restart_service", "web-2"},
		{"acme", "a-3", "app_deploy", "app-1"},
		{"globex", "g-1", "host_restart_service", "web-1"},
	} {
		v := g.change(t, c.tenant, c.id, c.action, c.host)
		if len(v.Reviews) != 1 {
			t.Fatalf("%s.%s: %s (%s) with %d reviews, want one review", c.tenant, c.id, v.Outcome, v.Reason, len(v.Reviews))
		}
		want := gated.OutcomeApproved
		if c.action == "app_deploy" {
			want = gated.OutcomeRejected
		}
		if v.Outcome != want {
			t.Fatalf("%s.%s: %s (%s), want %s", c.tenant, c.id, v.Outcome, v.Reason, want)
		}
		r := v.Reviews[0]
		key = audit.ReviewerKey{Plugin: r.Plugin, PluginVersion: r.PluginVersion, Persona: r.Persona, Model: r.Model}
		latencies[c.tenant] = append(latencies[c.tenant], r.LatencyMS)
	}
	row := func(reviews, approvals, rejections int, lat []float64) []audit.ReviewerStats {
		p50, p99 := nearestRank(lat, 0.5), nearestRank(lat, 0.99)
		return []audit.ReviewerStats{{ReviewerKey: key, Reviews: reviews, Approvals: approvals, Rejections: rejections, LatencyP50MS: &p50, LatencyP99MS: &p99}}
	}
	acme := row(3, 2, 1, latencies["acme"])
	globex := row(1, 1, 0, latencies["globex"])
	every := row(4, 3, 1, append(slices.Clone(latencies["acme"]), latencies["globex"]...))

	alice, bob, root := g.client(t), g.client(t), g.client(t)
	alice.signIn(g.alice)
	bob.signIn(g.bob)
	root.signIn(g.root)
	cases := []struct {
		note    string
		c       *client
		path    string
		tenants []string
		want    []audit.ReviewerStats
	}{
		{note: "alice sees acme's reviews", c: alice, path: "/api/reviewers", tenants: []string{"acme"}, want: acme},
		{note: "alice names acme", c: alice, path: "/api/reviewers?tenant=acme&since=1h", tenants: []string{"acme"}, want: acme},
		{note: "bob sees globex's reviews", c: bob, path: "/api/reviewers?since=7d", tenants: []string{"globex"}, want: globex},
		{note: "root sees every tenant's", c: root, path: "/api/reviewers", tenants: []string{}, want: every},
		{note: "root names globex", c: root, path: "/api/reviewers?tenant=globex", tenants: []string{"globex"}, want: globex},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			var got console.Reviewers
			tc.c.getJSON(tc.path, http.StatusOK, &got)
			gotJSON, _ := json.Marshal(got.Reviewers)
			wantJSON, _ := json.Marshal(tc.want)
			if string(gotJSON) != string(wantJSON) || !slices.Equal(got.Tenants, tc.tenants) {
				t.Fatalf("GET %s:\n got %s on %v\nwant %s on %v", tc.path, gotJSON, got.Tenants, wantJSON, tc.tenants)
			}
		})
	}
	t.Run("the window ends the figures", func(t *testing.T) {
		g.ahead.Store(int64(2 * time.Hour))
		defer g.ahead.Store(0)
		var got console.Reviewers
		alice.getJSON("/api/reviewers?since=1h", http.StatusOK, &got)
		if len(got.Reviewers) != 0 {
			t.Fatalf("the hour that began an hour after the reviews holds %+v", got.Reviewers)
		}
		alice.getJSON("/api/reviewers?since=3h", http.StatusOK, &got)
		if len(got.Reviewers) != 1 || got.Reviewers[0].Reviews != 3 {
			t.Fatalf("the last three hours hold %+v, want acme's three reviews", got.Reviewers)
		}
	})
	t.Run("another tenant is refused and audited", func(t *testing.T) {
		before := len(g.refusals(t, "globex"))
		code, data := alice.do(http.MethodGet, "/api/reviewers?tenant=globex", nil)
		if code != http.StatusForbidden || strings.Contains(string(data), "approvals") {
			t.Fatalf("alice asks for globex's reviewers: %d %s, want 403", code, data)
		}
		recs := g.refusals(t, "globex")
		if len(recs) != before+1 || recs[before]["operator"] != "alice" || recs[before]["path"] != "/api/reviewers" {
			t.Fatalf("console.refused records of globex: %v", recs)
		}
	})
	bad := []struct{ note, query, want string }{
		{note: "not a duration", query: "since=banana", want: `since \"banana\": want a duration from 1m to 7d`},
		{note: "zero", query: "since=0s", want: `since \"0s\"`},
		{note: "negative", query: "since=-1h", want: `since \"-1h\"`},
		{note: "under a minute", query: "since=30s", want: `since \"30s\"`},
		{note: "over seven days", query: "since=8d", want: `since \"8d\"`},
		{note: "over seven days in hours", query: "since=169h", want: `since \"169h\"`},
		{note: "a fraction of days", query: "since=1.5d", want: `since \"1.5d\"`},
		{note: "a tenant that is no token", query: "tenant=Acme%20Corp", want: `tenant \"Acme Corp\" must match`},
	}
	for _, tc := range bad {
		t.Run(tc.note, func(t *testing.T) {
			code, data := root.do(http.MethodGet, "/api/reviewers?"+tc.query, nil)
			if code != http.StatusBadRequest || !strings.Contains(string(data), tc.want) {
				t.Fatalf("GET /api/reviewers?%s: %d %s, want 400 saying %s", tc.query, code, data, tc.want)
			}
		})
	}
	t.Run("signed out", func(t *testing.T) {
		g.client(t).getJSON("/api/reviewers", http.StatusUnauthorized, nil)
	})
}

// TestBudgets: the budgets page shows each tenant's limits from the
// budgets file, its counters and when they reset, its agents' (those with
// counters and those the file overrides) and the budget refusals by
// limit, on the session's tenants alone.
func TestBudgets(t *testing.T) {
	g := startGateWith(t, gateOptions{budgets: "tenants:\n  acme:\n    tenant: {reads: 100/24h}\n    agents:\n" +
		"      agent-1: {reads: 2/24h}\n      quiet-bot: {proposals: 5/1m, holds_pending: 3}\n"})
	for i := range 2 {
		if v := g.propose(t, "acme", fmt.Sprintf("r-%d", i), "read", "host_list_services"); v.Outcome != gated.OutcomeApproved {
			t.Fatalf("read %d: %s (%s)", i, v.Outcome, v.Reason)
		}
	}
	refused := g.propose(t, "acme", "r-2", "read", "host_list_services")
	if refused.Outcome != gated.OutcomeBlocked || refused.Budget == nil || refused.Budget.Limit != gated.LimitReads || refused.Budget.Scope != gated.ScopeAgent {
		t.Fatalf("the third read: %s (%s), want blocked by agent-1's reads", refused.Outcome, refused.Reason)
	}
	g.propose(t, "globex", "g-1", "read", "host_list_services")
	resets := refused.Budget.ResetsAt
	// The refusal is counted off the decision path, then written.
	for i := 0; ; i++ {
		if err := g.budgets.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		c, err := g.budgets.Read(t.Context(), "acme", "", true, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if c.BudgetRefusals == 1 {
			break
		}
		if i == 10000 {
			t.Fatal("the budget refusal was never written")
		}
		time.Sleep(time.Millisecond)
	}

	alice, bob, root := g.client(t), g.client(t), g.client(t)
	alice.signIn(g.alice)
	bob.signIn(g.bob)
	root.signIn(g.root)

	t.Run("alice sees acme's", func(t *testing.T) {
		var got console.Budgets
		alice.getJSON("/api/budgets", http.StatusOK, &got)
		if got.File != "budgets.yaml" || len(got.Tenants) != 1 || got.Tenants[0].Tenant != "acme" {
			t.Fatalf("alice's budgets: %+v", got)
		}
		a := got.Tenants[0]
		whole := a.Whole
		if whole.Scope != gated.ScopeTenant || whole.Limits.Reads.Max != 100 || whole.Limits.Reads.Interval != 24*time.Hour ||
			whole.Limits.Proposals.Max != 600 || whole.Counters.Reads != 2 || !whole.ResetsAt[gated.LimitReads].Equal(resets) ||
			whole.Counters.BudgetRefusals != 1 {
			t.Fatalf("acme as a whole: %+v", whole)
		}
		if _, ok := whole.ResetsAt[gated.LimitReviewsInFlight]; ok {
			t.Fatalf("acme has no review in flight, yet a reset of it: %v", whole.ResetsAt)
		}
		var agents []string
		for _, u := range a.Agents {
			agents = append(agents, u.Agent)
		}
		if !slices.Equal(agents, []string{"agent-1", "quiet-bot"}) {
			t.Fatalf("acme's agents %v, want agent-1 (counters) and quiet-bot (an override)", agents)
		}
		bot, quiet := a.Agents[0], a.Agents[1]
		if !bot.Override || bot.Limits.Reads.Max != 2 || bot.Counters.Reads != 2 || !bot.ResetsAt[gated.LimitReads].Equal(resets) ||
			bot.Counters.Refusals != 1 || bot.Counters.BudgetRefusals != 1 {
			t.Fatalf("agent-1: %+v", bot)
		}
		if !quiet.Override || quiet.Limits.Proposals.Max != 5 || quiet.Limits.Proposals.Interval != time.Minute || quiet.Limits.HoldsPending != 3 ||
			quiet.Counters != (gated.BudgetCounters{}) {
			t.Fatalf("quiet-bot: %+v", quiet)
		}
		want := []console.RefusedByLimit{{Scope: gated.ScopeAgent, Agent: "agent-1", Limit: gated.LimitReads, Count: 1}}
		if len(a.Refused) != 1 || a.Refused[0].Last.IsZero() {
			t.Fatalf("acme's refusals by limit: %+v, want %+v", a.Refused, want)
		}
		a.Refused[0].Last = time.Time{}
		if a.Refused[0] != want[0] {
			t.Fatalf("acme's refusals by limit: %+v, want %+v", a.Refused, want)
		}
	})
	t.Run("bob sees globex's", func(t *testing.T) {
		var got console.Budgets
		bob.getJSON("/api/budgets", http.StatusOK, &got)
		if len(got.Tenants) != 1 || got.Tenants[0].Tenant != "globex" {
			t.Fatalf("bob's budgets: %+v", got)
		}
		gl := got.Tenants[0]
		if gl.Whole.Counters.Reads != 1 || gl.Whole.Limits.Reads.Max != 6000 || len(gl.Agents) != 1 || gl.Agents[0].Agent != "agent-1" ||
			gl.Agents[0].Override || gl.Agents[0].Limits.Reads.Max != 600 || len(gl.Refused) != 0 {
			t.Fatalf("globex: %+v", gl)
		}
	})
	t.Run("root sees every tenant's", func(t *testing.T) {
		var got console.Budgets
		root.getJSON("/api/budgets", http.StatusOK, &got)
		var tenants []string
		for _, tb := range got.Tenants {
			tenants = append(tenants, tb.Tenant)
		}
		if !slices.Equal(tenants, []string{"acme", "globex"}) {
			t.Fatalf("root's budgets name %v", tenants)
		}
		root.getJSON("/api/budgets?tenant=globex", http.StatusOK, &got)
		if len(got.Tenants) != 1 || got.Tenants[0].Tenant != "globex" {
			t.Fatalf("root's budgets of globex: %+v", got)
		}
	})
	t.Run("another tenant is refused and audited", func(t *testing.T) {
		code, data := alice.do(http.MethodGet, "/api/budgets?tenant=globex", nil)
		if code != http.StatusForbidden || strings.Contains(string(data), "counters") {
			t.Fatalf("alice asks for globex's budgets: %d %s, want 403", code, data)
		}
		recs := g.refusals(t, "globex")
		if len(recs) != 1 || recs[0]["operator"] != "alice" || recs[0]["path"] != "/api/budgets" {
			t.Fatalf("console.refused records of globex: %v", recs)
		}
	})
	t.Run("a tenant that is no token", func(t *testing.T) {
		code, data := root.do(http.MethodGet, "/api/budgets?tenant=..", nil)
		if code != http.StatusBadRequest || !strings.Contains(string(data), `tenant \"..\" must match`) {
			t.Fatalf("GET /api/budgets?tenant=..: %d %s, want 400", code, data)
		}
	})
}

// FuzzParseWindow: whatever the since parameter holds, it reads as a
// window from 1m to 7d or is refused with ErrBadRequest naming since.
func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"1h", "24h", "7d", "8d", "0s", "-1h", "1.5d", "+1d", "1m", "59s", "168h", "", "d", "9223372036854775807d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := console.ParseWindow(s)
		if err != nil {
			if !errors.Is(err, console.ErrBadRequest) || !strings.Contains(err.Error(), "since") {
				t.Fatalf("ParseWindow(%q): %v", s, err)
			}
			return
		}
		if d < time.Minute || d > 7*24*time.Hour {
			t.Fatalf("ParseWindow(%q) = %s", s, d)
		}
	})
}
