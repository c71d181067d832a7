package grants_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/grants"
	"github.com/gated/gated/engine/grant"
	"github.com/gated/gated/engine/wire"
)

// grantedFleet starts gated with grants (5-minute grants) and a fleet
// client of it.
func grantedFleet(t *testing.T) (*bustest.Gated, *fleet.Client) {
	t.Helper()
	g := bustest.StartGrantingGated(t, bus.Config{}, 5*time.Minute, nil)
	c, err := fleet.NewClient(g.NC)
	if err != nil {
		t.Fatal(err)
	}
	return g, c
}

// approve proposes the read action id and returns its approved verdict.
func approve(t *testing.T, c *fleet.Client, id string) (*gated.Verdict, []byte) {
	t.Helper()
	data := bustest.Proposal(id, "read", "host_list_services", "")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	v, err := c.ProposeRaw(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	if v.Outcome != gated.OutcomeApproved || v.Grant == "" {
		t.Fatalf("verdict %s with grant %q: %s", v.Outcome, v.Grant, v.Reason)
	}
	return v, data
}

func useGrant(t *testing.T, g *bustest.Gated, tenant string, body any) grants.UseReply {
	t.Helper()
	data, ok := body.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	msg, err := g.NC.Request(wire.GrantUseSubject(tenant), data, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var reply grants.UseReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		t.Fatalf("use reply %s: %v", msg.Data, err)
	}
	return reply
}

func publishedKeys(t *testing.T, g *bustest.Gated) grant.KeySet {
	t.Helper()
	msg, err := g.NC.Request(wire.GrantKeysSubject, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := grant.ParseKeySet(msg.Data)
	if err != nil {
		t.Fatalf("the published key set %s: %v", msg.Data, err)
	}
	return ks
}

func grantRecord(t *testing.T, g *bustest.Gated, key string) grants.Record {
	t.Helper()
	kv, err := g.JS.KeyValue(t.Context(), wire.GrantsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("grant record %s: %v", key, err)
	}
	var rec grants.Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// noGrantRecord fails t when the grant of key has a record: a grant has
// one only once used or expired.
func noGrantRecord(t *testing.T, g *bustest.Gated, key string) {
	t.Helper()
	kv, err := g.JS.KeyValue(t.Context(), wire.GrantsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(t.Context(), key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		if err == nil {
			t.Fatalf("grant record %s: %s, want none", key, e.Value())
		}
		t.Fatalf("grant record %s: %v, want none", key, err)
	}
}

func countEvents(events []string, name string) int {
	n := 0
	for _, e := range events {
		if e == name {
			n++
		}
	}
	return n
}

// TestGrantUsedOnce: an approved verdict's grant verifies under the
// published keys against what the proposal asked, has no record until it
// is used, is used once, and a second use is refused naming the first,
// both audited.
func TestGrantUsedOnce(t *testing.T) {
	g, c := grantedFleet(t)
	v, data := approve(t, c, "p-once")
	if _, err := grant.Verify(v.Grant, publishedKeys(t, g), time.Now(), grant.Expect{
		Tenant: "acme", ProposalID: "p-once", ProposalSHA256: grant.ProposalSHA256(data), Action: "host_list_services",
		Target: []byte(`{"service":"nginx"}`),
	}); err != nil {
		t.Fatalf("the grant does not verify under the published keys: %v", err)
	}
	noGrantRecord(t, g, "acme.p-once")
	if r := useGrant(t, g, "acme", grants.UseRequest{Grant: v.Grant, By: "agent-1"}); !r.OK || r.GID == "" {
		t.Fatalf("first use refused: %+v", r)
	}
	r := useGrant(t, g, "acme", grants.UseRequest{Grant: v.Grant, By: "agent-2"})
	if r.OK || !strings.Contains(r.Error, "already used at") || !strings.Contains(r.Error, "by agent-1") {
		t.Fatalf("second use: %+v, want a refusal naming the first use", r)
	}
	if rec := grantRecord(t, g, "acme.p-once"); rec.State != grants.StateUsed || rec.UsedBy != "agent-1" || rec.UsedAt == nil {
		t.Errorf("record %+v, want used by agent-1", rec)
	}
	// The replay of the proposal answers the stored verdict's grant.
	again, _ := approve(t, c, "p-once")
	if again.Grant != v.Grant {
		t.Error("a replayed verdict carries another grant")
	}
	events := waitEvents(t, g, "p-once", gated.EventGrantRefused)
	for _, want := range []string{gated.EventGrantIssued, gated.EventGrantUsed, gated.EventGrantRefused} {
		if countEvents(events, want) != 1 {
			t.Errorf("audit %v: want one %s", events, want)
		}
	}
}

// waitEvents returns the audit events of proposal id once name is among
// them (audit writes are asynchronous to the reply).
func waitEvents(t *testing.T, g *bustest.Gated, id, name string) []string {
	t.Helper()
	var events []string
	for range 100 {
		events = bustest.AuditEvents(t, g.Resources.Audit, "acme", id)
		if countEvents(events, name) > 0 {
			return events
		}
		time.Sleep(50 * time.Millisecond)
	}
	return events
}

// TestGrantUseRace: of many uses of one grant at once, through the
// endpoint and straight at two gated's Grants on the same bucket, exactly
// one is ok.
func TestGrantUseRace(t *testing.T) {
	g, c := grantedFleet(t)
	second, err := grants.New(t.Context(), g.NC, g.JS, g.Resources.Verdicts, grants.Config{
		Ring: g.Grants.Ring(), Trails: g.Audit.Trail, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Stop)
	for _, via := range []string{"endpoint", "direct"} {
		t.Run(via, func(t *testing.T) {
			v, _ := approve(t, c, "p-race-"+via)
			const n = 16
			var (
				wg  sync.WaitGroup
				oks atomic.Int32
			)
			start := make(chan struct{})
			for i := range n {
				wg.Go(func() {
					<-start
					by := fmt.Sprintf("racer-%d", i)
					var r grants.UseReply
					if via == "direct" {
						gr := g.Grants
						if i%2 == 1 {
							gr = second
						}
						r = gr.Use(t.Context(), "acme", v.Grant, by)
					} else {
						body, _ := json.Marshal(grants.UseRequest{Grant: v.Grant, By: by})
						msg, err := g.NC.Request(wire.GrantUseSubject("acme"), body, 10*time.Second)
						if err != nil {
							t.Error(err)
							return
						}
						if err := json.Unmarshal(msg.Data, &r); err != nil {
							t.Error(err)
							return
						}
					}
					if r.OK {
						oks.Add(1)
					} else if !strings.Contains(r.Error, "already used") {
						t.Errorf("a losing use was refused for %q, want already used", r.Error)
					}
				})
			}
			close(start)
			wg.Wait()
			if got := oks.Load(); got != 1 {
				t.Fatalf("%d of %d concurrent uses succeeded, want exactly 1", got, n)
			}
		})
	}
}

// TestGrantUseRefusals: bad uses are refused with a reason, audited, and
// leave the grant usable.
func TestGrantUseRefusals(t *testing.T) {
	g, c := grantedFleet(t)
	v, data := approve(t, c, "p-bad")
	parts := strings.Split(v.Grant, ".")
	forged := parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2]))
	unknown, _, err := g.Grants.Ring().Issue(grant.Claims{Tenant: "acme", ProposalID: "never-decided",
		ProposalSHA256: grant.ProposalSHA256(data), Action: "host_list_services", TargetSHA256: strings.Repeat("0", 64)}, time.Now(), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		note, tenant string
		body         any
		want         string
	}{
		{"another tenant's subject", "globex", grants.UseRequest{Grant: v.Grant, By: "x"}, "tenant"},
		{"forged signature", "acme", grants.UseRequest{Grant: forged, By: "x"}, "signature"},
		{"not a token", "acme", grants.UseRequest{Grant: "grant", By: "x"}, "format"},
		{"a grant gated never recorded", "acme", grants.UseRequest{Grant: unknown, By: "x"}, "unknown grant"},
		{"not JSON", "acme", []byte("use it"), "request is not"},
		{"unknown member", "acme", []byte(`{"grant":"x","by":"y","force":true}`), `"force" is unknown`},
		{"no grant", "acme", grants.UseRequest{By: "x"}, "names no grant"},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			r := useGrant(t, g, tc.tenant, tc.body)
			if r.OK || !strings.Contains(r.Error, tc.want) {
				t.Fatalf("reply %+v, want a refusal containing %q", r, tc.want)
			}
		})
	}
	if r := useGrant(t, g, "acme", grants.UseRequest{Grant: v.Grant, By: "agent"}); !r.OK {
		t.Fatalf("the grant was spoiled by refused uses: %+v", r)
	}
	// The refusal that names the grant is audited under the tenant that
	// asked, with the grant's proposal.
	var events []string
	for range 100 {
		if events = bustest.AuditEvents(t, g.Resources.Audit, "globex", "p-bad"); len(events) > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if countEvents(events, gated.EventGrantRefused) != 1 {
		t.Errorf("audit of globex: %v, want one grant.refused", events)
	}
}

// TestGrantExpiresUnused: a gated marks a grant it signed expired once
// its exp has passed, when the stored verdict carries it and nobody used
// it, audits it once, and a use then is refused as expired; a used grant,
// and a grant signed for a verdict that was never stored, are left alone.
// A use after exp is refused by the token's exp whether or not the sweep
// ran.
func TestGrantExpiresUnused(t *testing.T) {
	g, c := grantedFleet(t)
	unused, _ := approve(t, c, "p-unused")
	used, _ := approve(t, c, "p-used")
	approve(t, c, "p-kept")
	if r := useGrant(t, g, "acme", grants.UseRequest{Grant: used.Grant, By: "agent"}); !r.OK {
		t.Fatal(r.Error)
	}
	// A gated whose clock the test moves, which signed these grants.
	var ahead atomic.Int64
	later, err := grants.New(t.Context(), g.NC, g.JS, g.Resources.Verdicts, grants.Config{
		Ring: g.Grants.Ring(), Trails: g.Audit.Trail, Log: zaptest.NewLogger(t),
		Now: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	ks := publishedKeys(t, g)
	for _, v := range []*gated.Verdict{unused, used} {
		claims, err := grant.Decode(v.Grant, ks)
		if err != nil {
			t.Fatal(err)
		}
		later.Issued(v.Grant, claims)
	}
	// The grant of a delivery whose verdict lost the store to another's
	// (p-kept's stored grant is another gated's, not this one's).
	lost, lostClaims, err := g.Grants.Ring().Issue(grant.Claims{Tenant: "acme", ProposalID: "p-kept",
		ProposalSHA256: strings.Repeat("0", 64), Action: "host_list_services", TargetSHA256: strings.Repeat("0", 64)}, time.Now(), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	later.Issued(lost, lostClaims)

	ahead.Store(int64(time.Minute))
	if n, err := later.SweepDue(t.Context()); err != nil || n != 0 {
		t.Fatalf("before the exp: marked %d, %v; want none", n, err)
	}
	noGrantRecord(t, g, "acme.p-unused")
	if r := later.Use(t.Context(), "acme", lost, "x"); r.OK || r.Error != "unknown grant" {
		t.Fatalf("use of the grant of a verdict never stored: %+v", r)
	}
	ahead.Store(int64(6 * time.Minute))
	if r := later.Use(t.Context(), "acme", unused.Grant, "late"); r.OK || !strings.Contains(r.Error, "exp") {
		t.Fatalf("use past the exp before the sweep: %+v", r)
	}
	if n, err := later.SweepDue(t.Context()); err != nil || n != 1 {
		t.Fatalf("past the exp: marked %d, %v; want the one unused grant", n, err)
	}
	if rec := grantRecord(t, g, "acme.p-unused"); rec.State != grants.StateExpired || rec.GID != gidOf(t, unused.Grant, ks) {
		t.Errorf("unused grant %+v, want expired", rec)
	}
	if rec := grantRecord(t, g, "acme.p-used"); rec.State != grants.StateUsed {
		t.Errorf("used grant %+v, want used", rec)
	}
	noGrantRecord(t, g, "acme.p-kept")
	if n, err := later.SweepDue(t.Context()); err != nil || n != 0 {
		t.Errorf("second sweep marked %d, %v", n, err)
	}
	if r := useGrant(t, g, "acme", grants.UseRequest{Grant: unused.Grant, By: "late"}); r.OK || r.Error != "expired" {
		t.Errorf("use of an expired grant: %+v", r)
	}
	if events := waitEvents(t, g, "p-unused", gated.EventGrantExpired); countEvents(events, gated.EventGrantExpired) != 1 {
		t.Errorf("audit %v: want one grant.expired", events)
	}
}

// gidOf is the gid of token.
func gidOf(t *testing.T, token string, ks grant.KeySet) string {
	t.Helper()
	c, err := grant.Decode(token, ks)
	if err != nil {
		t.Fatal(err)
	}
	return c.GID
}

// TestGrantUsableOnlyAsStored: only the grant the stored verdict carries
// is usable. A grant gated signed for the proposal but that is not the
// stored verdict's (a delivery that lost the store to another, or that
// crashed before storing) is refused, an altered token is refused, and
// neither spends the stored grant; a record an older grant left under a
// reused id does not stand in the new grant's way.
func TestGrantUsableOnlyAsStored(t *testing.T) {
	g, c := grantedFleet(t)
	v, data := approve(t, c, "p-stored")
	ks := publishedKeys(t, g)
	stored, err := grant.Decode(v.Grant, ks)
	if err != nil {
		t.Fatal(err)
	}
	loser, _, err := g.Grants.Ring().Issue(grant.Claims{Tenant: "acme", ProposalID: "p-stored",
		ProposalSHA256: grant.ProposalSHA256(data), Action: stored.Action, TargetSHA256: stored.TargetSHA256,
		PolicyRevision: stored.PolicyRevision, Reviewers: stored.Reviewers}, time.Now(), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(v.Grant, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	altered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), `"p-stored"`, `"p-storee"`, 1))) + "." + parts[2]
	for _, tc := range []struct{ note, token, want string }{
		{"a grant the stored verdict does not carry", loser, "unknown grant"},
		{"an altered token", altered, "signature"},
	} {
		if r := useGrant(t, g, "acme", grants.UseRequest{Grant: tc.token, By: "x"}); r.OK || !strings.Contains(r.Error, tc.want) {
			t.Errorf("%s: %+v, want a refusal naming %q", tc.note, r, tc.want)
		}
	}
	noGrantRecord(t, g, "acme.p-stored")
	// An older grant's record under the same key (an id reused after the
	// verdict's TTL) is replaced by the use of the stored grant, once.
	kv, err := g.JS.KeyValue(t.Context(), wire.GrantsBucket)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := json.Marshal(grants.Record{GID: "AAAAAAAAAAAAAAAAAAAAAA", Tenant: "acme", ProposalID: "p-stored", State: grants.StateUsed})
	if _, err := kv.Put(t.Context(), "acme.p-stored", old); err != nil {
		t.Fatal(err)
	}
	if r := useGrant(t, g, "acme", grants.UseRequest{Grant: v.Grant, By: "a"}); !r.OK {
		t.Fatalf("use of the stored grant: %+v", r)
	}
	if r := useGrant(t, g, "acme", grants.UseRequest{Grant: v.Grant, By: "b"}); r.OK || !strings.Contains(r.Error, "already used") {
		t.Fatalf("second use: %+v", r)
	}
}

// useGrantOn requests a use on subject, a tenant's or an agent's.
func useGrantOn(t *testing.T, g *bustest.Gated, subject string, body any) grants.UseReply {
	t.Helper()
	data, ok := body.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	msg, err := g.NC.Request(subject, data, 10*time.Second)
	if err != nil {
		t.Fatalf("using a grant on %s: %v", subject, err)
	}
	var reply grants.UseReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		t.Fatalf("use reply %s: %v", msg.Data, err)
	}
	return reply
}

// approveAs proposes the read action id on behalf of agent (requested_by
// left out when agent is empty) and returns its approval.
func approveAs(t *testing.T, c *fleet.Client, id, agent string) *gated.Verdict {
	t.Helper()
	extra := ""
	if agent != "" {
		extra = fmt.Sprintf(`,"requested_by":{"agent":%q,"session":"s-1"}`, agent)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	v, err := c.ProposeRaw(ctx, bustest.Proposal(id, "read", "host_list_services", extra))
	if err != nil {
		t.Fatal(err)
	}
	if v.Outcome != gated.OutcomeApproved || v.Grant == "" {
		t.Fatalf("verdict %s with grant %q: %s", v.Outcome, v.Grant, v.Reason)
	}
	return v
}

// TestGrantUseDecodedStrictly: a use request is read as every gated input
// is: a member given twice (as written or escaped), a name in another
// case, a member of another type, data after the object are refused with
// the member named, and none of them spends the grant.
func TestGrantUseDecodedStrictly(t *testing.T) {
	g, c := grantedFleet(t)
	v, _ := approve(t, c, "p-strict")
	other, _ := approve(t, c, "p-strict-other")
	q := strconv.Quote
	for _, tc := range []struct{ note, body, want string }{
		{"grant twice, the last one valid", `{"grant":` + q(other.Grant) + `,"grant":` + q(v.Grant) + `,"by":"x"}`, `"grant" appears twice`},
		{"grant twice, the same token", `{"grant":` + q(v.Grant) + `,"grant":` + q(v.Grant) + `}`, `"grant" appears twice`},
		{"grant twice, once escaped", `{"grant":"x","gr\u0061nt":` + q(v.Grant) + `}`, `"grant" appears twice`},
		{"by twice", `{"grant":` + q(v.Grant) + `,"by":"a","by":"b"}`, `"by" appears twice`},
		{"GRANT", `{"GRANT":` + q(v.Grant) + `,"by":"x"}`, `"GRANT" is unknown`},
		{"Grant beside grant", `{"grant":"x","Grant":` + q(v.Grant) + `}`, `"Grant" is unknown`},
		{"by a number", `{"grant":` + q(v.Grant) + `,"by":7}`, "by is not a string"},
		{"grant null", `{"grant":null,"by":"x"}`, "grant is not a string"},
		{"data after the object", `{"grant":` + q(v.Grant) + `}{"grant":"x"}`, "request is not"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			r := useGrant(t, g, "acme", []byte(tc.body))
			if r.OK || !strings.Contains(r.Error, tc.want) {
				t.Fatalf("reply %+v, want a refusal containing %s", r, tc.want)
			}
		})
	}
	if r := useGrant(t, g, "acme", grants.UseRequest{Grant: v.Grant, By: "agent"}); !r.OK {
		t.Fatalf("the grant was spent by a refused request: %+v", r)
	}
}

// TestGrantUseOnlyByItsAgent: on an agent's subject,
// gated.grants.<tenant>.use.<agent>, gated lets a grant be used only by
// the agent it was issued to (the proposal's requested_by.agent), and
// records and audits that agent as the one that used it; another agent's
// attempt is refused, audited, and leaves the grant to its agent. (That
// the subject is the agent's own is NATS's to enforce: see
// test/agent_isolation_test.go.)
func TestGrantUseOnlyByItsAgent(t *testing.T) {
	g, c := grantedFleet(t)
	v := approveAs(t, c, "p-agent-a", "agent-a")
	for _, tc := range []struct{ note, subject string }{
		{"another agent", "gated.grants.acme.use.agent-b"},
		{"an agent whose name starts alike", "gated.grants.acme.use.agent"},
		{"not an agent token", "gated.grants.acme.use.agent@a"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			r := useGrantOn(t, g, tc.subject, grants.UseRequest{Grant: v.Grant, By: "agent-a"})
			if r.OK {
				t.Fatalf("%s used agent-a's grant: %+v", tc.subject, r)
			}
		})
	}
	noGrantRecord(t, g, "acme.p-agent-a")
	if r := useGrantOn(t, g, "gated.grants.acme.use.agent-a", grants.UseRequest{Grant: v.Grant, By: "whatever it says"}); !r.OK {
		t.Fatalf("agent-a using its own grant: %+v", r)
	}
	if rec := grantRecord(t, g, "acme.p-agent-a"); rec.State != grants.StateUsed || rec.UsedAs != "agent-a" || rec.Agent != "agent-a" {
		t.Fatalf("record %+v, want used as agent-a", rec)
	}
	data := waitRecord(t, g, "p-agent-a", gated.EventGrantUsed)
	if data["as"] != "agent-a" {
		t.Errorf("grant.used %v, want as agent-a", data)
	}
	refused := 0
	for _, ev := range bustest.AuditRecords(t, g.Resources.Audit, "acme", "p-agent-a") {
		if ev.Event == gated.EventGrantRefused && strings.Contains(string(ev.Data), `"as":"agent-b"`) &&
			strings.Contains(string(ev.Data), `not issued to agent \"agent-b\"`) {
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("want one grant.refused as agent-b naming why: %v", bustest.AuditEvents(t, g.Resources.Audit, "acme", "p-agent-a"))
	}

	// A grant of a proposal that names no agent is no agent's.
	anon := approveAs(t, c, "p-no-agent", "")
	if r := useGrantOn(t, g, "gated.grants.acme.use.agent-a", grants.UseRequest{Grant: anon.Grant}); r.OK {
		t.Fatalf("an agent used a grant issued to no agent: %+v", r)
	}
	// The tenant's subject still takes any grant of the tenant: NATS
	// permissions decide who may publish there.
	if r := useGrant(t, g, "acme", grants.UseRequest{Grant: anon.Grant, By: "executor"}); !r.OK {
		t.Fatalf("the tenant's subject: %+v", r)
	}
}
