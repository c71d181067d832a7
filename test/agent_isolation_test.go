package test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/engine/grant"
)

// agentProposal is a read proposal of acme's that the default policy
// approves at once, made by agent.
func agentProposal(id, agent string) *gated.Proposal {
	return &gated.Proposal{ID: id, Tenant: "acme", Action: "host_list_services", Class: gated.ClassRead,
		Target: map[string]any{"device_id": 7}, Reason: "agent isolation test",
		RequestedBy: &gated.RequestedBy{Agent: agent, Session: "s-1"}}
}

// agentAudit waits for event on acme's proposal id whose data satisfies
// match, read as gated's user, and returns that data.
func agentAudit(t *testing.T, c *tenantConn, id, event string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		recs := tenantAudit(ctx, t, c.js, "acme")
		cancel()
		for _, rec := range recs {
			var data map[string]any
			if rec.ev.ProposalID == id && rec.ev.Event == event && json.Unmarshal(rec.ev.Data, &data) == nil && match(data) {
				return data
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no matching %s audited for acme.%s", event, id)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestAgentIsolation runs the real gated against the nats-server
// configuration of docs/NATS.md, where tenant acme has a NATS user per
// agent that may use grants and report outcomes on its own agent's
// subjects alone: agent db-agent can neither use ops-agent's grant nor
// report its outcome, by any subject, while ops-agent does both.
func TestAgentIsolation(t *testing.T) {
	url, pw := startTenantsServer(t)
	g := startGated(t, "--nats-url", url, "--nats-user", "gated")
	defer func() {
		if logs := g.logs.String(); strings.Contains(logs, "Permissions Violation") {
			t.Errorf("the documented permissions refused gated something it needs:\n%s", logs)
		}
	}()
	admin := isoConnect(t, url, "gated", pw["gated"], "")
	ops := isoConnect(t, url, "acme-ops-agent", pw["acme-ops-agent"], "_INBOX_acme_ops-agent")
	db := isoConnect(t, url, "acme-db-agent", pw["acme-db-agent"], "_INBOX_acme_db-agent")

	// ops-agent proposes through the fleet client, on its own connection.
	client, err := fleet.NewClient(ops.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const id = "agent-own-1"
	v, err := client.Propose(ctx, agentProposal(id, "ops-agent"))
	if err != nil || v.Grant == "" {
		t.Fatalf("ops-agent's proposal: %v (%+v)", err, v)
	}
	use := func(c *tenantConn, subject string) (reply struct {
		OK    bool   `json:"ok"`
		GID   string `json:"gid"`
		Error string `json:"error"`
	}) {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"grant": v.Grant, "by": "ops-agent"})
		m, err := c.nc.Request(subject, body, 10*time.Second)
		if err != nil {
			t.Fatalf("%s using a grant on %s: %v", c.user, subject, err)
		}
		if err := json.Unmarshal(m.Data, &reply); err != nil {
			t.Fatalf("use reply %q: %v", m.Data, err)
		}
		return reply
	}

	t.Run("db-agent cannot use ops-agent's grant", func(t *testing.T) {
		body, _ := json.Marshal(map[string]string{"grant": v.Grant, "by": "ops-agent"})
		db.deniedRequest(t, "gated.grants.acme.use", body)
		db.deniedRequest(t, "gated.grants.acme.use.ops-agent", body)
		// Its own subject is open to it, and gated refuses the grant there.
		if r := use(db, "gated.grants.acme.use.db-agent"); r.OK || !strings.Contains(r.Error, `not issued to agent "db-agent"`) {
			t.Fatalf("db-agent using ops-agent's grant on its own subject: %+v", r)
		}
		// Nor does db-agent hear ops-agent's replies.
		db.deniedSub(t, "_INBOX_acme_ops-agent.>")
		db.deniedSub(t, "_INBOX_acme.>")
		agentAudit(t, admin, id, gated.EventGrantRefused, func(d map[string]any) bool { return d["as"] == "db-agent" })
	})

	var gid string
	t.Run("ops-agent uses its own grant", func(t *testing.T) {
		body, _ := json.Marshal(map[string]string{"grant": v.Grant, "by": "ops-agent"})
		ops.deniedRequest(t, "gated.grants.acme.use", body)
		grants, err := fleet.NewGrants(ops.nc, fleet.WithGrantsAgent("ops-agent"))
		if err != nil {
			t.Fatal(err)
		}
		claims, err := grants.Check(ctx, v.Grant, mustExpect(t, agentProposal(id, "ops-agent")), "ops-agent")
		if err != nil {
			t.Fatalf("ops-agent checking and using its own grant: %v", err)
		}
		gid = claims.GID
		agentAudit(t, admin, id, gated.EventGrantUsed, func(d map[string]any) bool { return d["as"] == "ops-agent" })
	})

	t.Run("db-agent cannot report the outcome of ops-agent's grant", func(t *testing.T) {
		report := func(c *tenantConn, subject string) error {
			body, _ := json.Marshal(map[string]any{"v": 1, "gid": gid, "tenant": "acme", "proposal_id": id,
				"status": "failed", "error": "made up", "at": time.Now().UTC().Format(time.RFC3339)})
			m := nats.NewMsg(subject)
			m.Data = body
			rctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			_, err := c.js.PublishMsg(rctx, m)
			return err
		}
		for _, subject := range []string{"gated.outcomes.acme." + id, "gated.outcomes.acme." + id + ".ops-agent"} {
			if err := report(db, subject); err == nil {
				t.Fatalf("the stream acknowledged db-agent's report on %s", subject)
			}
			db.wantDenied(t, "Publish", subject)
		}
		if err := report(db, "gated.outcomes.acme."+id+".db-agent"); err != nil {
			t.Fatalf("db-agent's report on its own subject: %v", err)
		}
		agentAudit(t, admin, id, gated.EventGrantOutcomeRefused, func(d map[string]any) bool { return d["as"] == "db-agent" })
	})

	t.Run("ops-agent reports the outcome of its own grant", func(t *testing.T) {
		grants, err := fleet.NewGrants(ops.nc, fleet.WithGrantsAgent("ops-agent"))
		if err != nil {
			t.Fatal(err)
		}
		if err := grants.Report(ctx, "acme", id, gid, gated.ExecutionSucceeded, ""); err != nil {
			t.Fatalf("ops-agent reporting its own outcome: %v", err)
		}
		agentAudit(t, admin, id, gated.EventGrantOutcome, func(d map[string]any) bool { return d["as"] == "ops-agent" && d["status"] == "succeeded" })
		// db-agent's made-up failure was stored nowhere: the history holds
		// ops-agent's success alone.
		kv, err := admin.js.KeyValue(t.Context(), "GATED_GRANTS")
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(t.Context(), "acme."+id)
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Agent   string          `json:"agent"`
			UsedAs  string          `json:"used_as"`
			Outcome gated.Execution `json:"outcome"`
		}
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Agent != "ops-agent" || rec.UsedAs != "ops-agent" || rec.Outcome.Status != gated.ExecutionSucceeded {
			t.Fatalf("grant record %s, want issued to and used by ops-agent, succeeded", e.Value())
		}
	})
}

// mustExpect is what the grant of p, proposed with the fleet client, must
// name.
func mustExpect(t *testing.T, p *gated.Proposal) grant.Expect {
	t.Helper()
	want, err := fleet.GrantExpect(p)
	if err != nil {
		t.Fatal(err)
	}
	return want
}
