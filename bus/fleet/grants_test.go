package fleet_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/engine/grant"
)

func grantingGated(t *testing.T) (*bustest.Gated, *fleet.Client) {
	t.Helper()
	return bustest.StartGrantingFleet(t)
}

// tamperingProposer proposes through the real client, then hands the
// ToolGate the verdict as tamper rewrites it: what a compromised or buggy
// transport could do.
type tamperingProposer struct {
	c      *fleet.Client
	tamper func(v *gated.Verdict)
}

func (p tamperingProposer) Propose(ctx context.Context, prop *gated.Proposal) (*gated.Verdict, error) {
	v, err := p.c.Propose(ctx, prop)
	if err == nil && p.tamper != nil {
		p.tamper(v)
	}
	return v, err
}

// TestToolGateUsesGrant: through real gated, an approved write runs once
// after its grant is verified and used; the grant is then spent.
func TestToolGateUsesGrant(t *testing.T) {
	g, c := grantingGated(t)
	var ids atomic.Int32
	gate, err := fleet.NewToolGate(c, identity, fleet.WithProposalIDs(func() string { return "use-" + string(rune('a'+ids.Add(1))) }))
	if err != nil {
		t.Fatal(err)
	}
	var tool countingTool
	var seen *gated.Verdict
	observed, err := fleet.NewToolGate(c, identity, fleet.WithProposalIDs(func() string { return "use-seen" }),
		fleet.WithVerdictObserver(func(_ *gated.Proposal, v *gated.Verdict) { seen = v }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Guard(gate, restartSpec, tool.run)(t.Context(), restartArgs{Host: "web-1", Service: "nginx"}); err != nil {
		t.Fatalf("approved restart: %v", err)
	}
	if _, err := fleet.Guard(observed, restartSpec, tool.run)(t.Context(), restartArgs{Host: "web-2", Service: "nginx"}); err != nil {
		t.Fatalf("approved restart: %v", err)
	}
	if n := tool.runs.Load(); n != 2 {
		t.Fatalf("the tool ran %d times, want 2", n)
	}
	grants, err := fleet.NewGrants(g.NC)
	if err != nil {
		t.Fatal(err)
	}
	if err := grants.Use(t.Context(), "acme", seen.Grant, "again"); !errors.Is(err, fleet.ErrGrantRefused) || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("a spent grant used again: %v", err)
	}
}

// TestToolGateRefusesBadGrants: an approval whose grant is forged,
// altered, another proposal's, another tenant's, missing or spent never
// runs the tool; the error matches ErrGrantRefused and names what is
// wrong.
func TestToolGateRefusesBadGrants(t *testing.T) {
	g, c := grantingGated(t)
	// A real approval of another proposal, whose grant the cases reuse.
	other, err := c.Propose(t.Context(), &gated.Proposal{ID: "other", Tenant: "acme", Action: "host_restart_service",
		Class: gated.ClassWrite, BlastRadius: gated.BlastSingleDevice, Target: map[string]any{"host": "web-9", "service": "nginx"},
		RequestedBy: &gated.RequestedBy{Agent: "other-agent"}})
	if err != nil {
		t.Fatal(err)
	}
	// A grant of another tenant, signed with gated's own key.
	foreign, _, err := g.Grants.Ring().Issue(grant.Claims{Tenant: "globex", ProposalID: "x", ProposalSHA256: strings.Repeat("0", 64),
		Action: "host_restart_service", TargetSHA256: strings.Repeat("0", 64)}, time.Now(), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var spent string
	cases := []struct {
		note   string
		tamper func(v *gated.Verdict)
		member string
	}{
		{"forged signature", func(v *gated.Verdict) {
			p := strings.Split(v.Grant, ".")
			v.Grant = p[0] + "." + p[1] + "." + strings.Repeat("A", len(p[2]))
		}, "signature"},
		{"altered payload", func(v *gated.Verdict) {
			p := strings.Split(v.Grant, ".")
			v.Grant = p[0] + "." + strings.Split(other.Grant, ".")[1] + "." + p[2]
		}, "signature"},
		{"another proposal's grant", func(v *gated.Verdict) { v.Grant = other.Grant }, "proposal_id"},
		{"another tenant's grant", func(v *gated.Verdict) { v.Grant = foreign }, "tenant"},
		{"no grant", func(v *gated.Verdict) { v.Grant = "" }, "grant"},
		{"alg none", func(v *gated.Verdict) {
			p := strings.Split(v.Grant, ".")
			hdr := strings.ReplaceAll(string(mustB64(t, p[0])), `"EdDSA"`, `"none"`)
			v.Grant = b64(hdr) + "." + p[1] + "."
		}, "alg"},
		{"spent grant of this proposal", func(v *gated.Verdict) {
			if spent == "" {
				spent = v.Grant
			}
			v.Grant = spent
		}, "use"},
	}
	for i, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			gate, err := fleet.NewToolGate(tamperingProposer{c: c, tamper: tc.tamper}, identity,
				fleet.WithGrants(mustGrants(t, c, g)), fleet.WithProposalIDs(func() string { return "bad-" + string(rune('a'+i)) }))
			if err != nil {
				t.Fatal(err)
			}
			var tool countingTool
			run := fleet.Guard(gate, restartSpec, tool.run)
			host := "case-" + string(rune('a'+i)) // a target of its own: no cooldown
			if tc.note == "spent grant of this proposal" {
				// Spend it first through an honest gate on the same id.
				honest, _ := fleet.NewToolGate(c, identity, fleet.WithProposalIDs(func() string { return "bad-" + string(rune('a'+i)) }))
				var first countingTool
				if _, err := fleet.Guard(honest, restartSpec, first.run)(t.Context(), restartArgs{Host: host, Service: "nginx"}); err != nil {
					t.Fatal(err)
				}
			}
			_, err = run(t.Context(), restartArgs{Host: host, Service: "nginx"})
			if !errors.Is(err, fleet.ErrGrantRefused) || !strings.Contains(err.Error(), tc.member) {
				t.Fatalf("err = %v, want a grant refusal naming %s", err, tc.member)
			}
			if n := tool.runs.Load(); n != 0 {
				t.Fatalf("the tool ran %d times on a bad grant", n)
			}
			// A refusal of the ToolGate's own reaches gated's audit trail;
			// one of gated's (the spent grant) gated audits itself.
			id := "bad-" + string(rune('a'+i))
			by := "executor"
			if tc.note == "spent grant of this proposal" {
				by = ""
			}
			if data := waitAudit(t, g, id, gated.EventGrantRefused, by); !strings.Contains(fmt.Sprint(data["reason"]), tc.member) {
				t.Fatalf("grant.refused %v does not name %s", data, tc.member)
			}
		})
	}
}

// waitAudit waits for the audit record of event on acme's proposal id
// whose data has by (any when by is empty) and returns its data.
func waitAudit(t *testing.T, g *bustest.Gated, id, event, by string) map[string]any {
	t.Helper()
	for range 200 {
		for _, ev := range bustest.AuditRecords(t, g.Resources.Audit, "acme", id) {
			var data map[string]any
			if ev.Event != event || json.Unmarshal(ev.Data, &data) != nil {
				continue
			}
			if by == "" || data["by"] == by {
				return data
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no %s (by %q) audited for %s: %v", event, by, id, bustest.AuditEvents(t, g.Resources.Audit, "acme", id))
	return nil
}

// TestToolGateReportsOutcomes: a guarded tool that ran is reported to
// gated, started before it runs, then succeeded, or failed with its
// error; gated audits each against the grant.
func TestToolGateReportsOutcomes(t *testing.T) {
	g, c := grantingGated(t)
	for _, tc := range []struct {
		note, id, host string
		fail           error
		status         string
	}{
		{note: "succeeded", id: "ran-ok", host: "web-31", status: gated.ExecutionSucceeded},
		{note: "failed", id: "ran-bad", host: "web-32", fail: errors.New("nginx did not come back"), status: gated.ExecutionFailed},
	} {
		t.Run(tc.note, func(t *testing.T) {
			gate, err := fleet.NewToolGate(c, identity, fleet.WithProposalIDs(func() string { return tc.id }))
			if err != nil {
				t.Fatal(err)
			}
			var startedFirst bool
			run := fleet.Guard(gate, restartSpec, func(_ context.Context, a restartArgs) (string, error) {
				startedFirst = slices.Contains(statuses(t, g, tc.id), gated.ExecutionStarted)
				return "", tc.fail
			})
			if _, err := run(t.Context(), restartArgs{Host: tc.host, Service: "nginx"}); !errors.Is(err, tc.fail) {
				t.Fatalf("err = %v, want the tool's %v", err, tc.fail)
			}
			data := waitAuditStatus(t, g, tc.id, tc.status)
			if !startedFirst {
				t.Errorf("started was not audited before the tool ran")
			}
			if tc.fail != nil && data["error"] != tc.fail.Error() {
				t.Errorf("grant.outcome error %v, want %q", data["error"], tc.fail)
			}
		})
	}
}

// statuses lists the statuses of the grant.outcome records of id, waiting
// briefly for the first.
func statuses(t *testing.T, g *bustest.Gated, id string) []string {
	t.Helper()
	var out []string
	for range 100 {
		for _, ev := range bustest.AuditRecords(t, g.Resources.Audit, "acme", id) {
			var data map[string]any
			if ev.Event == gated.EventGrantOutcome && json.Unmarshal(ev.Data, &data) == nil {
				out = append(out, fmt.Sprint(data["status"]))
			}
		}
		if len(out) > 0 {
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
	return out
}

func waitAuditStatus(t *testing.T, g *bustest.Gated, id, status string) map[string]any {
	t.Helper()
	for range 200 {
		for _, ev := range bustest.AuditRecords(t, g.Resources.Audit, "acme", id) {
			var data map[string]any
			if ev.Event == gated.EventGrantOutcome && json.Unmarshal(ev.Data, &data) == nil && data["status"] == status {
				return data
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no grant.outcome %s audited for %s: %v", status, id, bustest.AuditEvents(t, g.Resources.Audit, "acme", id))
	return nil
}

func mustGrants(t *testing.T, _ *fleet.Client, g *bustest.Gated) *fleet.Grants {
	t.Helper()
	gr, err := fleet.NewGrants(g.NC)
	if err != nil {
		t.Fatal(err)
	}
	return gr
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := b64enc.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func b64(s string) string { return b64enc.EncodeToString([]byte(s)) }

// TestGrantVectorsThroughFleet: the fleet's Grants, given a vector key set
// and clock, accepts exactly the valid vectors and refuses each invalid
// one naming its member.
func TestGrantVectorsThroughFleet(t *testing.T) {
	data, err := os.ReadFile("../../test/vectors/grants.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Now     int64                      `json:"now"`
		Keysets map[string]json.RawMessage `json:"keysets"`
		Grants  []struct {
			Name   string `json:"name"`
			Keyset string `json:"keyset"`
			Now    int64  `json:"now"`
			Token  string `json:"token"`
			Expect struct {
				Tenant         string `json:"tenant"`
				ProposalID     string `json:"proposal_id"`
				ProposalSHA256 string `json:"proposal_sha256"`
				Action         string `json:"action"`
				TargetJSON     string `json:"target_json"`
			} `json:"expect"`
			Valid       bool   `json:"valid"`
			ErrorMember string `json:"error_member"`
		} `json:"grants"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	s := bustest.Server(t)
	nc, _ := bustest.Connect(t, s)
	for _, v := range f.Grants {
		t.Run(v.Name, func(t *testing.T) {
			ks, err := grant.ParseKeySet(f.Keysets[v.Keyset])
			if err != nil {
				t.Fatal(err)
			}
			now := f.Now
			if v.Now != 0 {
				now = v.Now
			}
			gr, err := fleet.NewGrants(nc, fleet.WithGrantKeys(ks), fleet.WithGrantClock(func() time.Time { return time.Unix(now, 0) }))
			if err != nil {
				t.Fatal(err)
			}
			_, err = gr.Verify(t.Context(), v.Token, grant.Expect{Tenant: v.Expect.Tenant, ProposalID: v.Expect.ProposalID,
				ProposalSHA256: v.Expect.ProposalSHA256, Action: v.Expect.Action, Target: []byte(v.Expect.TargetJSON)})
			switch {
			case v.Valid && err != nil:
				t.Fatalf("refused a valid grant: %v", err)
			case !v.Valid && (!errors.Is(err, fleet.ErrGrantRefused) || !strings.Contains(err.Error(), v.ErrorMember)):
				t.Fatalf("err = %v, want a refusal naming %s", err, v.ErrorMember)
			}
		})
	}
}

var b64enc = base64.RawURLEncoding

// TestGrantsFetchRotatedKey: a Grants that cached the key set before a
// rotation fetches it again for a grant of the new key, and still
// verifies a grant of the retired one.
func TestGrantsFetchRotatedKey(t *testing.T) {
	g, c := grantingGated(t)
	grants, err := fleet.NewGrants(g.NC)
	if err != nil {
		t.Fatal(err)
	}
	approveRestart := func(id, host string) (*gated.Verdict, grant.Expect) {
		t.Helper()
		p := &gated.Proposal{V: 1, ID: id, Tenant: "acme", Kind: gated.KindAction, Action: "host_restart_service", Class: gated.ClassWrite,
			BlastRadius: gated.BlastSingleDevice, Target: map[string]any{"host": host}, RequestedBy: &gated.RequestedBy{Agent: "a"}}
		v, err := c.Propose(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return v, grant.Expect{Tenant: "acme", ProposalID: id, ProposalSHA256: grant.ProposalSHA256(data),
			Action: "host_restart_service", Target: []byte(`{"host":"` + host + `"}`)}
	}
	old, oldWant := approveRestart("rot-1", "web-1")
	if _, err := grants.Verify(t.Context(), old.Grant, oldWant); err != nil {
		t.Fatal(err)
	}
	// Rotate a copy of gated's ring and have gated sign with it.
	data, err := json.Marshal(g.Grants.Ring())
	if err != nil {
		t.Fatal(err)
	}
	ring, err := grant.ParseRing(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := ring.Rotate(time.Now(), 0, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := g.Grants.SetRing(t.Context(), ring); err != nil {
		t.Fatal(err)
	}
	fresh, freshWant := approveRestart("rot-2", "web-2")
	if _, err := grants.Verify(t.Context(), fresh.Grant, freshWant); err != nil {
		t.Fatalf("a grant of the new key, with the old key set cached: %v", err)
	}
	if _, err := grants.Check(t.Context(), old.Grant, oldWant, "late"); err != nil {
		t.Fatalf("a grant of the retired key, issued before the rotation: %v", err)
	}
}

// TestCheckReportsRefusal: a service handed a grant it cannot match to
// what it is about to do refuses it with Check, and gated audits the
// refusal as the executor's, with its reason.
func TestCheckReportsRefusal(t *testing.T) {
	g, c := grantingGated(t)
	gate, err := fleet.NewToolGate(tamperingProposer{c: c}, identity, fleet.WithoutGrantCheck(),
		fleet.WithProposalIDs(func() string { return "handed" }))
	if err != nil {
		t.Fatal(err)
	}
	v, err := gate.Authorize(t.Context(), "host_restart_service", gated.ClassWrite,
		fleet.Change{Target: map[string]any{"host": "web-41", "service": "nginx"}, BlastRadius: gated.BlastSingleDevice})
	if err != nil {
		t.Fatal(err)
	}
	_, err = mustGrants(t, c, g).Check(t.Context(), v.Grant, grant.Expect{Tenant: "acme", ProposalID: "handed",
		Action: "host_restart_service", Target: []byte(`{"host":"web-42","service":"nginx"}`)}, "restarter")
	if !errors.Is(err, fleet.ErrGrantRefused) {
		t.Fatalf("Check of another target: %v", err)
	}
	if data := waitAudit(t, g, "handed", gated.EventGrantRefused, "executor"); data["reason"] != err.Error() {
		t.Fatalf("grant.refused %v, want the reason %q", data, err)
	}
}

// TestGrantsAsAgent: Grants made WithGrantsAgent use grants and report
// outcomes on the agent's subjects, where gated accepts a grant issued to
// that agent alone: ops-agent's ToolGate runs its tool and reports as
// ops-agent, while another agent's Grants can neither use the grant nor
// report its outcome. Each report carries a Nats-Msg-Id of its own.
func TestGrantsAsAgent(t *testing.T) {
	g, c := grantingGated(t)
	if _, err := fleet.NewGrants(g.NC, fleet.WithGrantsAgent("ops.agent")); !errors.Is(err, fleet.ErrInvalidConfig) {
		t.Fatalf("an agent that is not a token: %v, want ErrInvalidConfig", err)
	}
	mine, err := fleet.NewGrants(g.NC, fleet.WithGrantsAgent(identity.Agent))
	if err != nil {
		t.Fatal(err)
	}
	other, err := fleet.NewGrants(g.NC, fleet.WithGrantsAgent("other-agent"))
	if err != nil {
		t.Fatal(err)
	}
	ids := make(chan string, 1)
	msgIDs := make(chan string, 8)
	sub, err := g.NC.Subscribe("gated.outcomes.acme.>", func(m *nats.Msg) { msgIDs <- m.Subject + " " + m.Header.Get(jetstream.MsgIDHeader) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	// another agent cannot spend the approval of ops-agent's proposal.
	var stolen error
	thief, err := fleet.NewToolGate(c, identity, fleet.WithGrants(other), fleet.WithProposalIDs(func() string { return "as-agent-1" }))
	if err != nil {
		t.Fatal(err)
	}
	tool := &countingTool{}
	if _, stolen = fleet.Guard(thief, restartSpec, tool.run)(t.Context(), restartArgs{Host: "web-41", Service: "nginx"}); !errors.Is(stolen, fleet.ErrGrantRefused) ||
		!strings.Contains(stolen.Error(), `not issued to agent "other-agent"`) || tool.runs.Load() != 0 {
		t.Fatalf("another agent's gate: err %v, %d runs; want a refusal naming it and no run", stolen, tool.runs.Load())
	}
	// ops-agent's own gate, on the next proposal.
	ids <- "as-agent-2"
	gate, err := fleet.NewToolGate(c, identity, fleet.WithGrants(mine), fleet.WithProposalIDs(func() string { return <-ids }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Guard(gate, restartSpec, tool.run)(t.Context(), restartArgs{Host: "web-42", Service: "nginx"}); err != nil || tool.runs.Load() != 1 {
		t.Fatalf("ops-agent's own gate: err %v, %d runs", err, tool.runs.Load())
	}
	data := waitAuditStatus(t, g, "as-agent-2", gated.ExecutionSucceeded)
	if data["as"] != identity.Agent {
		t.Errorf("grant.outcome %v, want as %s", data, identity.Agent)
	}
	if used := waitAudit(t, g, "as-agent-2", gated.EventGrantUsed, ""); used["as"] != identity.Agent {
		t.Errorf("grant.used %v, want as %s", used, identity.Agent)
	}
	gid := fmt.Sprint(data["gid"])
	if err := other.Report(t.Context(), "acme", "as-agent-2", gid, gated.ExecutionFailed, "made up"); err != nil {
		t.Fatal(err)
	}
	refused := waitAudit(t, g, "as-agent-2", gated.EventGrantOutcomeRefused, "")
	if refused["as"] != "other-agent" {
		t.Errorf("grant.outcome_refused %v, want as other-agent", refused)
	}
	seen := map[string]bool{}
	for range 3 { // refused of as-agent-1, started and succeeded of as-agent-2, failed by other-agent: read the first three
		select {
		case s := <-msgIDs:
			subject, id, _ := strings.Cut(s, " ")
			parts := strings.Split(id, ".")
			if len(parts) != 4 || len(parts[3]) != 22 || seen[id] {
				t.Errorf("report on %s has Nats-Msg-Id %q, want <tenant>.<id>.<status>.<nonce> of its own", subject, id)
			}
			seen[id] = true
			if !strings.HasSuffix(subject, ".ops-agent") && !strings.HasSuffix(subject, ".other-agent") {
				t.Errorf("report on %s, want an agent's subject", subject)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no report seen on the outcome subjects")
		}
	}
}
