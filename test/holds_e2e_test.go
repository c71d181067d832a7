package test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// holdPolicy is a policy file a tenant adds: cache flushes are held for an
// operator for three seconds only.
const holdPolicy = `package gated

hold contains {"rule": "hold_cache_flush", "why": "a cache flush empties every edge", "deadline": "3s"} if {
	startswith(input.proposal.action, "dns_flush_")
}
`

// holdGated starts gated holding acme's dns_* actions for an operator (the
// default bundle's hold_listed_action, from policy data) and dns_flush_*
// ones for three seconds (a policy file), with two operators: alice for
// acme, bob for globex. It returns gated and the seed files by operator.
func holdGated(t *testing.T) (*serveProc, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	var list strings.Builder
	seeds := map[string]string{}
	for _, op := range []struct{ id, tenant string }{{"alice", "acme"}, {"bob", "globex"}} {
		seed := filepath.Join(dir, op.id+".seed")
		code, stdout, stderr := gatedCLI(t, "operator", "keygen", "--out", seed, "--id", op.id, "--tenant", op.tenant)
		if code != 0 {
			t.Fatalf("keygen: exit %d\n%s%s", code, stdout, stderr)
		}
		entry := stdout[strings.Index(stdout, "operators:"):]
		if list.Len() > 0 {
			entry = strings.TrimPrefix(entry, "operators:\n")
		}
		list.WriteString(entry)
		seeds[op.id] = seed
	}
	operators := filepath.Join(dir, "operators.yaml")
	data := filepath.Join(dir, "holds.yaml")
	policiesDir := filepath.Join(dir, "policies")
	for path, content := range map[string]string{
		operators: list.String(),
		data:      "gated:\n  config:\n    operator_holds:\n      actions: {acme: [\"dns_*\"]}\n",
		filepath.Join(policiesDir, "holds_mine.rego"): holdPolicy,
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	g := startGated(t, "--review-service", "--operators", operators, "--policy-data", data, "--policies", policiesDir)
	return g, seeds
}

func dnsProposal(id, action string) *gated.Proposal {
	return &gated.Proposal{
		V: 1, ID: id, Tenant: "acme", Kind: gated.KindAction, Action: action, Class: gated.ClassWrite,
		BlastRadius: gated.BlastSingleDevice, Target: map[string]any{"zone": "example.org", "record": id},
		Reason: "retire a record", RequestedBy: &gated.RequestedBy{Agent: "dns-bot", Session: "s-1"},
	}
}

// proposeHeld proposes p and checks that its verdict is held for an
// operator, never approved.
func proposeHeld(t *testing.T, ctx context.Context, c *fleet.Client, p *gated.Proposal) *gated.Verdict {
	t.Helper()
	v, err := c.Propose(ctx, p)
	if !errors.Is(err, fleet.ErrAwaitingOperator) || v == nil || v.AwaitingOperator == nil || v.Approved {
		t.Fatalf("proposal %s: %v, %+v", p.ID, err, v)
	}
	return v
}

// auditEvents returns the events of the audit stream for one proposal.
func auditEvents(t *testing.T, natsURL, tenant, id string) []string {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, audit.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"gated.audit." + tenant + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := info.NumPending; n > 0; n-- {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		r, err := audit.DecodeRecord(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			t.Fatalf("audit message %s: %v", m.Subject(), err)
		}
		if r.ProposalID != id {
			continue
		}
		for _, ev := range r.Events() {
			names = append(names, ev.Event)
		}
	}
	return names
}

// TestHeldActionEndToEnd runs held actions through the real gated, its
// NATS, its policy and the operator CLI: an approval and a rejection
// signed by the tenant's operator reach the fleet, a hold times out at its
// deadline and takes no decision after it, and a forged, wrongly scoped or
// hard-rule-denied decision approves nothing.
func TestHeldActionEndToEnd(t *testing.T) {
	g, seeds := holdGated(t)
	client := fleetClient(t, g.natsURL)
	decide := func(id, who string, flags ...string) (int, string) {
		args := append([]string{"operator", "decide", "acme", id, "--operator", who, "--seed-file", seeds[who], "--nats-url", g.natsURL}, flags...)
		code, stdout, stderr := gatedCLI(t, args...)
		return code, stdout + stderr
	}

	t.Run("approved by the tenant's operator", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		held := proposeHeld(t, ctx, client, dnsProposal("hold-approve", "dns_delete_record"))
		if held.AwaitingOperator.Rule != "hold_listed_action" || !held.AwaitingOperator.Deadline.After(time.Now().Add(50*time.Minute)) {
			t.Errorf("hold %+v: want hold_listed_action until about an hour from now", held.AwaitingOperator)
		}
		final := make(chan error, 1)
		var got *gated.Verdict
		go func() {
			v, err := client.AwaitDecision(ctx, held)
			got = v
			final <- err
		}()
		if code, out := decide(held.ProposalID, "alice", "--approve", "--reason", "change CHG-7 agreed"); code != 0 {
			t.Fatalf("decide: exit %d\n%s", code, out)
		}
		if err := <-final; err != nil {
			t.Fatal(err)
		}
		if err := fleet.CheckVerdict(got); err != nil || got.Stage != gated.StageOperator || got.Operator == nil ||
			got.Operator.ID != "alice" || !strings.HasPrefix(got.Operator.Key, "U") || got.Operator.Reason != "change CHG-7 agreed" {
			t.Fatalf("fleet got %+v (%v), want an approval by alice with her key and reason", got, err)
		}
		// The operator's approval carries a grant naming alice, recorded
		// before the verdict went out: it is used once.
		gnc, err := nats.Connect(g.natsURL)
		if err != nil {
			t.Fatal(err)
		}
		defer gnc.Close()
		grants, err := fleet.NewGrants(gnc)
		if err != nil {
			t.Fatal(err)
		}
		if err := grants.Use(ctx, "acme", got.Grant, "e2e"); err != nil {
			t.Fatalf("the operator approval's grant: %v", err)
		}
		if err := grants.Use(ctx, "acme", got.Grant, "e2e"); !errors.Is(err, fleet.ErrGrantRefused) {
			t.Fatalf("second use of the operator approval's grant: %v", err)
		}
		events := strings.Join(auditEvents(t, g.natsURL, "acme", held.ProposalID), ",")
		if !strings.Contains(events, "operator.awaited") || !strings.Contains(events, "operator.decided,grant.issued,verdict.decided") {
			t.Errorf("audit events %s", events)
		}
	})
	t.Run("rejected", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		held := proposeHeld(t, ctx, client, dnsProposal("hold-reject", "dns_delete_record"))
		if code, out := decide(held.ProposalID, "alice", "--reject", "--reason", "not in a change window"); code != 0 {
			t.Fatalf("decide: exit %d\n%s", code, out)
		}
		v, err := client.AwaitDecision(ctx, held)
		if !errors.Is(fleet.CheckVerdict(v), fleet.ErrReviewRejected) || err != nil || v.Operator.Decision != engine.OperatorReject {
			t.Fatalf("fleet got %+v, %v", v, err)
		}
	})
	t.Run("wrong tenant and forged decisions are refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		held := proposeHeld(t, ctx, client, dnsProposal("hold-scope", "dns_delete_record"))
		if code, out := decide(held.ProposalID, "bob", "--approve"); code != 3 || !strings.Contains(out, "403") {
			t.Fatalf("bob (globex) deciding for acme: exit %d, want 3 and a 403\n%s", code, out)
		}
		// A key not in the operators file signs in alice's name.
		kp, _ := nkeys.CreateUser()
		forged, _ := kp.Seed()
		body, hdr, err := operator.Sign(forged, operator.Message{Tenant: "acme", ProposalID: held.ProposalID,
			ProposalSHA256: held.ProposalSHA256, Operator: "alice", Decision: engine.OperatorApprove})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(g.natsURL)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if _, err := operator.Send(ctx, nc, body, hdr); !errors.Is(err, operator.ErrUnauthenticated) {
			t.Fatalf("decision signed by an unlisted key: %v, want ErrUnauthenticated", err)
		}
		// The same signature under alice's listed key does not verify.
		raw, err := os.ReadFile(seeds["alice"])
		if err != nil {
			t.Fatal(err)
		}
		akp, err := nkeys.ParseDecoratedUserNKey(raw)
		if err != nil {
			t.Fatal(err)
		}
		alicePub, _ := akp.PublicKey()
		hdr.Set(wire.OperatorKeyHeader, alicePub)
		if _, err := operator.Send(ctx, nc, body, hdr); !errors.Is(err, operator.ErrUnauthenticated) {
			t.Fatalf("forged signature under alice's key: %v, want ErrUnauthenticated", err)
		}
		// Unsigned: no key, no signature.
		unsigned := nats.Header{}
		if _, err := operator.Send(ctx, nc, body, unsigned); !errors.Is(err, operator.ErrUnauthenticated) {
			t.Fatalf("unsigned decision: %v, want ErrUnauthenticated", err)
		}
		// Expired: alice's own signature, made ten minutes ago.
		old, oldHdr, err := operator.Sign(raw, operator.Message{Tenant: "acme", ProposalID: held.ProposalID,
			ProposalSHA256: held.ProposalSHA256, Operator: "alice", Decision: engine.OperatorApprove,
			SignedAt: time.Now().Add(-10 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := operator.Send(ctx, nc, old, oldHdr); !errors.Is(err, operator.ErrUnauthenticated) {
			t.Fatalf("expired decision: %v, want ErrUnauthenticated", err)
		}
		v, err := client.Verdict(ctx, "acme", held.ProposalID)
		if err != nil || v.Outcome != gated.OutcomeBlocked || v.AwaitingOperator == nil {
			t.Fatalf("after refusals the verdict is %+v, %v", v, err)
		}
		if n := strings.Count(strings.Join(auditEvents(t, g.natsURL, "acme", held.ProposalID), ","), "operator.refused"); n != 5 {
			t.Errorf("%d refusals audited, want 5", n)
		}
		// Alice's valid rejection, sent twice: the replay is refused.
		rej, rejHdr, err := operator.Sign(raw, operator.Message{Tenant: "acme", ProposalID: held.ProposalID,
			ProposalSHA256: held.ProposalSHA256, Operator: "alice", Decision: engine.OperatorReject})
		if err != nil {
			t.Fatal(err)
		}
		if v, err := operator.Send(ctx, nc, rej, rejHdr); err != nil || v.Outcome != gated.OutcomeRejected {
			t.Fatalf("alice's rejection: %+v, %v", v, err)
		}
		if _, err := operator.Send(ctx, nc, rej, rejHdr); !errors.Is(err, operator.ErrConflict) {
			t.Fatalf("replayed decision: %v, want ErrConflict", err)
		}
	})
	t.Run("timed out, then no decision is taken", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		held := proposeHeld(t, ctx, client, dnsProposal("hold-timeout", "dns_flush_cache"))
		if held.AwaitingOperator.Rule != "hold_cache_flush" {
			t.Fatalf("hold %+v", held.AwaitingOperator)
		}
		v, err := client.AwaitDecision(ctx, held)
		if err != nil || v.Outcome != gated.OutcomeTimeout || v.Approved || v.Stage != gated.StageOperator {
			t.Fatalf("fleet got %+v, %v, want a timeout", v, err)
		}
		if code, out := decide(held.ProposalID, "alice", "--approve"); code != 3 {
			t.Fatalf("approval after the deadline: exit %d, want 3\n%s", code, out)
		}
		if v, err := client.Verdict(ctx, "acme", held.ProposalID); err != nil || v.Outcome != gated.OutcomeTimeout {
			t.Fatalf("stored verdict %+v, %v", v, err)
		}
	})
	t.Run("a hard rule denies, nothing is held", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		p := dnsProposal("hold-denied", "dns_delete_record")
		p.Flags.SkipReview = true
		v, err := client.Propose(ctx, p)
		if !errors.Is(err, fleet.ErrReviewRejected) || v.AwaitingOperator != nil {
			t.Fatalf("proposal: %v, %+v", err, v)
		}
		if code, out := decide(p.ID, "alice", "--approve"); code != 3 {
			t.Fatalf("approving a denied action: exit %d, want 3\n%s", code, out)
		}
	})
}

// TestHeldActionUnderTenantPermissions: under the documented account
// permissions a tenant's held action reaches the tenant, times out at its
// deadline, and gated's hold timer acknowledges its hold without a
// permissions violation.
func TestHeldActionUnderTenantPermissions(t *testing.T) {
	url, pw := startTenantsServer(t)
	data := filepath.Join(t.TempDir(), "holds.yaml")
	if err := os.WriteFile(data, []byte("gated:\n  config:\n    operator_holds:\n      actions: {acme: [\"dns_*\"]}\n      deadline: 2s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGated(t, "--nats-url", url, "--nats-user", "gated", "--policy-data", data)
	admin := isoConnect(t, url, "gated", pw["gated"], "")
	acme := isoConnect(t, url, "acme", pw["acme"], "_INBOX_acme")
	client, err := fleet.NewClient(acme.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	held := proposeHeld(t, ctx, client, dnsProposal("tenant-hold", "dns_delete_record"))
	v, err := client.AwaitDecision(ctx, held)
	if err != nil || v.Outcome != gated.OutcomeTimeout {
		t.Fatalf("acme got %+v, %v, want the timeout", v, err)
	}
	holds, err := admin.js.Stream(ctx, "GATED_HOLDS")
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := holds.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("GATED_HOLDS still holds %d messages: the hold timer's ack did not land", info.State.Msgs)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if logs := g.logs.String(); strings.Contains(logs, "Permissions Violation") {
		t.Errorf("the documented permissions refused gated something it needs:\n%s", logs)
	}
}
