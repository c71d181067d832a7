package console_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/console"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

func TestSignIn(t *testing.T) {
	g := startGate(t)
	sig := func(k operatorKey, ch string) string { return k.signRaw(t, []byte(console.SignInPrefix+ch)) }
	cases := []struct {
		note string
		// body builds the sign-in of a fresh challenge ch.
		body   func(c *client, ch string) map[string]string
		origin string // "" keeps the console's own
		want   int
	}{
		{note: "listed key, its own signature", want: http.StatusOK,
			body: func(_ *client, ch string) map[string]string {
				return map[string]string{"key": g.alice.pub, "challenge": ch, "sig": sig(g.alice, ch)}
			}},
		{note: "key not listed", want: http.StatusUnauthorized,
			body: func(_ *client, ch string) map[string]string {
				return map[string]string{"key": g.mallory.pub, "challenge": ch, "sig": sig(g.mallory, ch)}
			}},
		{note: "listed key, signed by another seed", want: http.StatusUnauthorized,
			body: func(_ *client, ch string) map[string]string {
				return map[string]string{"key": g.alice.pub, "challenge": ch, "sig": sig(g.mallory, ch)}
			}},
		{note: "challenge never handed out", want: http.StatusUnauthorized,
			body: func(_ *client, ch string) map[string]string {
				// Another first character: "A" when the challenge does
				// not start with one, else "B".
				first := "A"
				if ch[0] == 'A' {
					first = "B"
				}
				other := first + ch[1:]
				return map[string]string{"key": g.alice.pub, "challenge": other, "sig": sig(g.alice, other)}
			}},
		{note: "challenge answered twice", want: http.StatusUnauthorized,
			body: func(c *client, ch string) map[string]string {
				first, _ := json.Marshal(map[string]string{"key": g.alice.pub, "challenge": ch, "sig": sig(g.alice, ch)})
				if code, data := c.do(http.MethodPost, "/api/signin", first); code != http.StatusOK {
					t.Fatalf("first answer: %d %s", code, data)
				}
				return map[string]string{"key": g.alice.pub, "challenge": ch, "sig": sig(g.alice, ch)}
			}},
		{note: "signature of the challenge without the prefix", want: http.StatusUnauthorized,
			body: func(_ *client, ch string) map[string]string {
				return map[string]string{"key": g.alice.pub, "challenge": ch, "sig": g.alice.signRaw(t, []byte(ch))}
			}},
		{note: "another origin", origin: "http://evil.example", want: http.StatusForbidden,
			body: func(_ *client, ch string) map[string]string {
				return map[string]string{"key": g.alice.pub, "challenge": ch, "sig": sig(g.alice, ch)}
			}},
		{note: "unknown field", want: http.StatusBadRequest,
			body: func(_ *client, ch string) map[string]string {
				return map[string]string{"key": g.alice.pub, "challenge": ch, "sig": sig(g.alice, ch), "tenants": "globex"}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			c := g.client(t)
			ch := c.challenge()
			body, _ := json.Marshal(tc.body(c, ch))
			if tc.origin != "" {
				c.origin = tc.origin
			}
			code, data := c.do(http.MethodPost, "/api/signin", body)
			if code != tc.want {
				t.Fatalf("sign-in: %d %s, want %d", code, data, tc.want)
			}
			var me console.Me
			c.getJSON("/api/me", http.StatusOK, &me)
			if signedIn := tc.want == http.StatusOK; me.SignedIn != signedIn && tc.note != "challenge answered twice" {
				t.Fatalf("signed in %v after a %d sign-in", me.SignedIn, code)
			}
		})
	}

	t.Run("refusals without a session are not audited", func(t *testing.T) {
		if recs := g.refusals(t, gated.UnknownTenant); len(recs) != 0 {
			t.Fatalf("console.refused records without a session: %v", recs)
		}
	})
	t.Run("an expired challenge", func(t *testing.T) {
		c := g.client(t)
		ch := c.challenge()
		g.ahead.Store(int64(3 * time.Minute))
		defer g.ahead.Store(0)
		body, _ := json.Marshal(map[string]string{"key": g.alice.pub, "challenge": ch, "sig": sig(g.alice, ch)})
		if code, data := c.do(http.MethodPost, "/api/signin", body); code != http.StatusUnauthorized {
			t.Fatalf("sign-in with a challenge 3m old: %d %s, want 401", code, data)
		}
	})
	t.Run("an expired session", func(t *testing.T) {
		c := g.client(t)
		c.signIn(g.alice)
		c.getJSON("/api/verdicts", http.StatusOK, nil)
		g.ahead.Store(int64(console.DefaultSessionTTL + time.Minute))
		defer g.ahead.Store(0)
		c.getJSON("/api/verdicts", http.StatusUnauthorized, nil)
		var me console.Me
		c.getJSON("/api/me", http.StatusOK, &me)
		if me.SignedIn {
			t.Fatal("signed in past the session's expiry")
		}
	})
	t.Run("the session cookie", func(t *testing.T) {
		c := g.client(t)
		ch := c.challenge()
		body, _ := json.Marshal(map[string]string{"key": g.alice.pub, "challenge": ch, "sig": sig(g.alice, ch)})
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, g.http.URL+"/api/signin", strings.NewReader(string(body)))
		req.Header.Set("Origin", g.http.URL)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		cookies := res.Cookies()
		if len(cookies) != 1 {
			t.Fatalf("cookies %v", cookies)
		}
		ck := cookies[0]
		if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.MaxAge <= 0 || ck.Path != "/" {
			t.Fatalf("cookie %+v: want HttpOnly, SameSite=Strict, an expiry, path /", ck)
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Fatalf("CSP %q", csp)
		}
		// Signed out, the cookie opens nothing.
		c.signIn(g.alice)
		if code, data := c.do(http.MethodPost, "/api/signout", []byte("{}")); code != http.StatusOK {
			t.Fatalf("sign-out: %d %s", code, data)
		}
		c.getJSON("/api/verdicts", http.StatusUnauthorized, nil)
	})
}

// TestTenantScope: an operator sees its own tenants' verdicts alone, and a
// request for another tenant's data is refused and audited.
func TestTenantScope(t *testing.T) {
	g := startGate(t)
	g.propose(t, "acme", "a-1", "read", "host_list_services")
	g.propose(t, "globex", "g-1", "read", "host_list_services")
	g.hold(t, "acme", "held-a")
	g.hold(t, "globex", "held-g")
	alice := g.client(t)
	alice.signIn(g.alice)

	t.Run("listing", func(t *testing.T) {
		var got console.Verdicts
		alice.getJSON("/api/verdicts", http.StatusOK, &got)
		var keys []string
		for _, v := range got.Verdicts {
			keys = append(keys, v.Tenant+"."+v.ProposalID)
		}
		slices.Sort(keys)
		if want := []string{"acme.a-1", "acme.held-a"}; !slices.Equal(keys, want) {
			t.Fatalf("alice sees %v, want %v", keys, want)
		}
		var q console.Queue
		alice.getJSON("/api/queue", http.StatusOK, &q)
		if len(q.Items) != 1 || q.Items[0].Verdict.ProposalID != "held-a" || q.Items[0].Held.Kind != "run" {
			t.Fatalf("alice's queue %+v", q.Items)
		}
		root := g.client(t)
		root.signIn(g.root)
		root.getJSON("/api/verdicts", http.StatusOK, &got)
		if len(got.Verdicts) != 4 {
			t.Fatalf("root sees %d verdicts, want every tenant's 4", len(got.Verdicts))
		}
	})

	refused := []struct {
		note, method, path string
		body               []byte
	}{
		{note: "another tenant's proposal", method: http.MethodGet, path: "/api/proposals/globex/g-1"},
		{note: "another tenant's verdicts", method: http.MethodGet, path: "/api/verdicts?tenant=globex"},
		{note: "another tenant's feed", method: http.MethodGet, path: "/api/feed?tenant=globex"},
		{note: "another tenant's runs", method: http.MethodGet, path: "/api/runs?tenant=globex"},
	}
	for i, tc := range refused {
		t.Run(tc.note, func(t *testing.T) {
			code, data := alice.do(tc.method, tc.path, tc.body)
			if code != http.StatusForbidden {
				t.Fatalf("%s %s: %d %s, want 403", tc.method, tc.path, code, data)
			}
			recs := g.refusals(t, "globex")
			if len(recs) != i+1 || recs[i]["operator"] != "alice" || recs[i]["path"] != strings.Split(tc.path, "?")[0] {
				t.Fatalf("console.refused records of globex: %v", recs)
			}
		})
	}
	t.Run("the feed streams only the operator's tenants", func(t *testing.T) {
		feed := alice.feed("/api/feed")
		g.propose(t, "globex", "g-2", "read", "host_list_services")
		g.propose(t, "acme", "a-2", "read", "host_list_services")
		select {
		case v := <-feed:
			if v.Tenant != "acme" || v.ProposalID != "a-2" {
				t.Fatalf("alice's feed streamed %s.%s before acme.a-2", v.Tenant, v.ProposalID)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no verdict on the feed within 20s")
		}
	})
}

// TestDecisionThroughTheConsole: a decision signed as the browser signs it
// is forwarded unchanged and verified by gated; forged, wrongly scoped and
// cross-origin decisions are refused and change nothing.
func TestDecisionThroughTheConsole(t *testing.T) {
	g := startGate(t)
	held := g.hold(t, "acme", "held-1")
	g.hold(t, "globex", "held-g")
	msg := func(tenant, id string) operator.Message {
		return operator.Message{Tenant: tenant, ProposalID: id, ProposalSHA256: held.ProposalSHA256, Operator: "alice",
			Criteria: []engine.OperatorFinding{{ID: "ux-check", Pass: true, Reason: "checked on a phone"}}, Reason: "release review"}
	}
	alice := g.client(t)
	alice.signIn(g.alice)
	stillHeld := func(tenant, id string) {
		t.Helper()
		v, err := g.store.Get(t.Context(), tenant, id)
		if err != nil || v.Outcome != gated.OutcomeBlocked || v.Stage != gated.StageReview {
			t.Fatalf("%s.%s changed: %+v %v", tenant, id, v, err)
		}
	}

	t.Run("forged: alice's key, another seed's signature", func(t *testing.T) {
		body, hdr, err := operator.Sign(g.alice.seed, msg("acme", "held-1"))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := json.Marshal(map[string]string{"body": string(body), "key": g.alice.pub, "sig": g.mallory.signRaw(t, body)})
		_ = hdr
		code, data := alice.do(http.MethodPost, "/api/decisions", req)
		if code != http.StatusUnauthorized || !strings.Contains(string(data), "does not verify") {
			t.Fatalf("forged decision: %d %s, want gated's 401", code, data)
		}
		stillHeld("acme", "held-1")
	})
	t.Run("wrongly scoped: alice decides for globex", func(t *testing.T) {
		m := msg("globex", "held-g")
		code, data := alice.decide(g.alice, m)
		if code != http.StatusForbidden {
			t.Fatalf("decision for globex: %d %s, want 403", code, data)
		}
		if recs := g.refusals(t, "globex"); len(recs) != 1 || recs[0]["path"] != "/api/decisions" {
			t.Fatalf("console.refused records of globex: %v", recs)
		}
		stillHeld("globex", "held-g")
	})
	t.Run("signed by another operator than the one signed in", func(t *testing.T) {
		m := msg("acme", "held-1")
		m.Operator = "root"
		code, data := alice.decide(g.root, m)
		if code != http.StatusForbidden {
			t.Fatalf("root's decision in alice's session: %d %s, want 403", code, data)
		}
		stillHeld("acme", "held-1")
	})
	t.Run("from another origin", func(t *testing.T) {
		c := g.client(t)
		c.signIn(g.alice)
		c.origin = "http://evil.example"
		if code, data := c.decide(g.alice, msg("acme", "held-1")); code != http.StatusForbidden {
			t.Fatalf("cross-origin decision: %d %s, want 403", code, data)
		}
		stillHeld("acme", "held-1")
		recs := g.refusals(t, gated.UnknownTenant)
		if len(recs) != 1 || recs[0]["operator"] != "alice" || !strings.Contains(recs[0]["reason"].(string), "evil.example") {
			t.Fatalf("console.refused records under _: %v", recs)
		}
	})
	t.Run("approved", func(t *testing.T) {
		sub, err := g.nc.SubscribeSync(wire.VerdictSubject("acme", "held-1"))
		if err != nil {
			t.Fatal(err)
		}
		code, data := alice.decide(g.alice, msg("acme", "held-1"))
		if code != http.StatusOK {
			t.Fatalf("decision: %d %s", code, data)
		}
		var v gated.Verdict
		if err := json.Unmarshal(data, &v); err != nil || v.Outcome != gated.OutcomeApproved || v.Stage != gated.StageOperator {
			t.Fatalf("answer %s (%v)", data, err)
		}
		stored, err := g.store.Get(t.Context(), "acme", "held-1")
		if err != nil || stored.Outcome != gated.OutcomeApproved || stored.AuditSeq != v.AuditSeq {
			t.Fatalf("stored %+v %v", stored, err)
		}
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("the fleet got no verdict: %v", err)
		}
		var published gated.Verdict
		if err := json.Unmarshal(m.Data, &published); err != nil || !published.Approved {
			t.Fatalf("published %s", m.Data)
		}
		// Sent again, gated refuses it: decided already.
		if code, data := alice.decide(g.alice, msg("acme", "held-1")); code != http.StatusConflict {
			t.Fatalf("second decision: %d %s, want 409", code, data)
		}
	})
}

// TestProposalPage: the page holds the proposal as the policy read it, the
// verdict, and the proposal's audit records, each verified; a record
// forged onto the stream is shown as not verified.
func TestProposalPage(t *testing.T) {
	g := startGate(t)
	v := g.propose(t, "acme", "p-1", "denied", "host_restart_service")
	if v.Outcome != gated.OutcomeRejected || len(v.Policy.Denies) == 0 {
		t.Fatalf("verdict %s: %s", v.Outcome, v.Reason)
	}
	alice := g.client(t)
	alice.signIn(g.alice)
	var p console.Proposal
	alice.getJSON("/api/proposals/acme/p-1", http.StatusOK, &p)
	if p.Verdict == nil || p.Verdict.AuditSeq != v.AuditSeq || !p.MACsChecked {
		t.Fatalf("page verdict %+v macs %v", p.Verdict, p.MACsChecked)
	}
	var prop struct {
		ID     string `json:"id"`
		Action string `json:"action"`
	}
	if err := json.Unmarshal(p.Proposal, &prop); err != nil || prop.ID != "p-1" || prop.Action != "host_restart_service" {
		t.Fatalf("proposal %s (%v)", p.Proposal, err)
	}
	var events []string
	for _, a := range p.Audit {
		events = append(events, a.Event)
		if !a.Verified {
			t.Fatalf("record %d %s not verified: %+v", a.Seq, a.Event, a.Problems)
		}
	}
	if events[0] != gated.EventReceived || events[len(events)-1] != gated.EventVerdict {
		t.Fatalf("events %v", events)
	}

	// A record that follows the format but is not MACed with gated's key.
	forged := gated.AuditEvent{V: 1, Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p-1", At: time.Now().UTC(), Data: json.RawMessage(`{"outcome":"approved"}`)}
	data, _ := json.Marshal(forged)
	if _, err := g.js.Publish(t.Context(), wire.AuditSubject("acme", gated.EventVerdict), data); err != nil {
		t.Fatal(err)
	}
	alice.getJSON("/api/proposals/acme/p-1", http.StatusOK, &p)
	last := p.Audit[len(p.Audit)-1]
	if last.Verified || len(last.Problems) == 0 || last.Problems[0].Kind != audit.ProblemForged {
		t.Fatalf("forged record shown as %+v", last)
	}

	t.Run("unknown proposal", func(t *testing.T) {
		alice.getJSON("/api/proposals/acme/never", http.StatusOK, &p)
		if p.Verdict != nil || len(p.Audit) != 0 {
			t.Fatalf("page %+v", p)
		}
	})
	t.Run("bad tokens", func(t *testing.T) {
		alice.getJSON("/api/proposals/acme/a.b", http.StatusBadRequest, nil)
		alice.getJSON("/api/verdicts?outcome=maybe", http.StatusBadRequest, nil)
		alice.getJSON("/api/verdicts?action=a.b", http.StatusBadRequest, nil)
		alice.getJSON("/api/verdicts?limit=0", http.StatusBadRequest, nil)
	})
}

func TestFeedFilters(t *testing.T) {
	g := startGate(t)
	root := g.client(t)
	root.signIn(g.root)
	feed := root.feed("/api/feed?outcome=rejected&action=host_restart_service")
	g.propose(t, "acme", "ok-1", "read", "host_list_services")
	g.propose(t, "globex", "bad-1", "denied", "host_restart_service")
	select {
	case v := <-feed:
		if v.ProposalID != "bad-1" || v.Outcome != gated.OutcomeRejected {
			t.Fatalf("the filtered feed streamed %s.%s (%s)", v.Tenant, v.ProposalID, v.Outcome)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no verdict on the feed within 20s")
	}
	var got console.Verdicts
	root.getJSON("/api/verdicts?outcome=approved", http.StatusOK, &got)
	if len(got.Verdicts) != 1 || got.Verdicts[0].ProposalID != "ok-1" {
		t.Fatalf("approved verdicts %+v", got.Verdicts)
	}
}

// TestShadowAgreement: the system page's shadow summary counts the
// proposals decided with a shadow policy beside the live one and names
// those it decided otherwise, for the operator's tenants alone.
func TestShadowAgreement(t *testing.T) {
	g := startGateWithShadow(t, "../examples/policies")
	// The example policy refuses skills to acme (skills_forbidden); the
	// live default lets a read skill through.
	g.propose(t, "acme", "skill-1", "read", "web_skill")
	g.propose(t, "acme", "list-1", "read", "host_list_services")
	g.propose(t, "globex", "skill-g", "read", "web_skill")
	g.propose(t, "globex", "skill-g2", "read", "host_list_services")
	alice := g.client(t)
	alice.signIn(g.alice)
	var got console.Shadow
	alice.getJSON("/api/shadow?hours=1", http.StatusOK, &got)
	sum := got.Summary
	if sum.Decisions != 2 || sum.Differences != 1 || len(sum.First) != 1 || sum.First[0].ProposalID != "skill-1" || sum.ByRule["skills_forbidden"] != 1 {
		t.Fatalf("alice's shadow summary %+v", sum)
	}
	root := g.client(t)
	root.signIn(g.root)
	root.getJSON("/api/shadow", http.StatusOK, &got)
	if got.Summary.Decisions != 4 || got.Summary.Differences != 1 {
		t.Fatalf("root's shadow summary %+v", got.Summary)
	}
	alice.getJSON("/api/shadow?hours=0", http.StatusBadRequest, nil)
}

// TestHeldActionInTheQueue: a held action, as the contract names it
// (outcome blocked, the verdict's awaiting_operator naming why, an
// operator.awaited record with the deadline, the reason and the rule),
// is in the queue beside a held run review, oldest first, with its
// deadline; its page says why it is held.
func TestHeldActionInTheQueue(t *testing.T) {
	g := startGate(t)
	g.hold(t, "acme", "held-run") // a minute old
	decided := time.Now().UTC().Add(-2 * time.Minute)
	deadline := decided.Add(time.Hour).Truncate(time.Second)
	v := map[string]any{
		"v": 1, "proposal_id": "held-act", "tenant": "acme", "action": "db_drop_table", "kind": "action",
		"outcome": "blocked", "approved": false, "stage": "policy", "reason": "held for an operator: tenant-wide destructive change",
		"decided_at": decided, "latency_ms": 1, "audit_seq": 9, "proposal_sha256": strings.Repeat("cd", 32),
		"awaiting_operator": map[string]any{"deadline": deadline, "reason": "tenant-wide destructive change", "rule": "human_for_tenant_wide"},
	}
	raw, _ := json.Marshal(v)
	if _, err := g.res.Verdicts.Create(t.Context(), "acme.held-act", raw); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(map[string]any{"deadline": deadline.Format(time.RFC3339), "reason": "tenant-wide destructive change", "rule": "human_for_tenant_wide"})
	if _, err := g.trails().Seal(t.Context(), gated.AuditEvent{V: 1, Event: gated.EventOperatorAwaited, Tenant: "acme", ProposalID: "held-act", At: decided, Data: data}); err != nil {
		t.Fatal(err)
	}
	alice := g.client(t)
	alice.signIn(g.alice)
	var q console.Queue
	alice.getJSON("/api/queue", http.StatusOK, &q)
	if len(q.Items) != 2 || q.Items[0].Verdict.ProposalID != "held-act" || q.Items[1].Verdict.ProposalID != "held-run" {
		t.Fatalf("queue %+v: want held-act, then the newer held-run", q.Items)
	}
	h := q.Items[0].Held
	if h.Kind != "action" || h.Rule != "human_for_tenant_wide" || h.Deadline == nil || !h.Deadline.Equal(deadline) {
		t.Fatalf("held action %+v, want kind action, rule human_for_tenant_wide, deadline %s", h, deadline)
	}
	var p console.Proposal
	alice.getJSON("/api/proposals/acme/held-act", http.StatusOK, &p)
	if p.Held == nil || p.Held.Kind != "action" || p.Held.Deadline == nil || p.Held.Reason != "tenant-wide destructive change" {
		t.Fatalf("page held %+v", p.Held)
	}
}

// TestRuns: the runs page lists each run's decided rounds and the
// follow-up each sent, for the operator's tenants alone.
func TestRuns(t *testing.T) {
	g := startGate(t)
	for _, v := range []*gated.Verdict{
		bustest.RunVerdict("r1-p1", "run-1", 1, gated.NextContinuation),
		bustest.RunVerdict("r1-p2", "run-1", 2, ""),
	} {
		if _, err := g.store.Create(t.Context(), v); err != nil {
			t.Fatal(err)
		}
	}
	other := bustest.RunVerdict("g-p1", "run-g", 1, gated.NextContinuation)
	other.Tenant = "globex"
	if _, err := g.store.Create(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	alice := g.client(t)
	alice.signIn(g.alice)
	var got console.Runs
	alice.getJSON("/api/runs", http.StatusOK, &got)
	if len(got.Runs) != 1 {
		t.Fatalf("alice sees %d runs, want acme's one: %+v", len(got.Runs), got.Runs)
	}
	r := got.Runs[0]
	if r.Tenant != "acme" || r.RunID != "run-1" || r.Closed != gated.RunAccepted || len(r.Rounds) != 2 || r.Rounds[0].Next != gated.NextContinuation {
		t.Fatalf("run %+v", r)
	}
	root := g.client(t)
	root.signIn(g.root)
	root.getJSON("/api/runs", http.StatusOK, &got)
	if len(got.Runs) != 2 {
		t.Fatalf("root sees %d runs, want 2", len(got.Runs))
	}
}
