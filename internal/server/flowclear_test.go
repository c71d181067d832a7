package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/flow"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/internal/natstest"
)

// TestOperatorClearsFlowThroughServe: through gated serve, an agent
// refused a mail after a secret read is refused until an operator clears
// its flow state with a signed clear; then its mail is approved, a
// corrupt state is cleared alike, and the audit stream verifies with the
// flow.cleared events in it.
func TestOperatorClearsFlowThroughServe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts gated serve")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "flows.json")
	if err := os.WriteFile(data, []byte(strings.Replace(flowsData, `"window": "2s"`, `"window": "1h"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	ops := filepath.Join(dir, "operators.yaml")
	if err := os.WriteFile(ops, fmt.Appendf(nil, "operators:\n  - id: alice\n    key: %s\n    tenants: [acme]\n", pub), 0o600); err != nil {
		t.Fatal(err)
	}
	ns := natstest.Server(t)
	sc := Defaults()
	sc.DataDir, sc.NATSURL = t.TempDir(), ns.ClientURL()
	sc.PersonasWatch, sc.PolicyWatch = false, false
	sc.ShutdownGrace = 5 * time.Second
	sc.Policy.DataFiles = []string{data}
	sc.Operators = ops
	s, err := New(sc, WithLogger(zaptest.NewLogger(t)), WithoutPlugins())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.WithoutCancel(t.Context())
	if err := s.Build(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })

	nc, js := natstest.Connect(t, ns)
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	grants, err := fleet.NewGrants(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, flow.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	flows := flow.New(kv)
	n, start := 0, time.Now().UnixNano()
	propose := func(agent, action string, class gated.Class) *gated.Verdict {
		t.Helper()
		n++
		id := fmt.Sprintf("clear-%d-%d", start, n)
		p := &gated.Proposal{V: 1, ID: id, Tenant: "acme", Action: action, Class: class,
			Target: map[string]any{"doc": id}, Reason: "flows", RequestedBy: &gated.RequestedBy{Agent: agent, Session: "s1"}}
		if class != gated.ClassRead {
			p.BlastRadius = gated.BlastSingleDevice
		}
		v, err := client.Propose(ctx, p)
		if v == nil {
			t.Fatalf("%s by %s: %v", action, agent, err)
		}
		return v
	}
	mailRefused := func(agent, rule string) bool {
		t.Helper()
		v := propose(agent, "send_email", gated.ClassWrite)
		return v.Outcome == gated.OutcomeRejected && v.Policy != nil && len(v.Policy.Rules) > 0 && v.Policy.Rules[0] == rule
	}
	clear := func(agent string) *operator.Cleared {
		t.Helper()
		snap, err := flows.Snapshot(ctx, "acme", agent)
		if err != nil {
			t.Fatal(err)
		}
		body, hdr, err := operator.SignClear(seed, operator.ClearMessage{Tenant: "acme", Agent: agent, Revision: snap.Revision, Operator: "alice", Reason: "reviewed"})
		if err != nil {
			t.Fatal(err)
		}
		c, err := operator.SendClear(ctx, nc, body, hdr)
		if err != nil {
			t.Fatalf("clearing %s: %v", agent, err)
		}
		return c
	}

	v := propose("mailer", "read_secret", gated.ClassRead)
	if !v.Approved || v.Grant == "" {
		t.Fatalf("read_secret: %s (%s)", v.Outcome, v.Reason)
	}
	if err := grants.Use(ctx, "acme", v.Grant, "test"); err != nil {
		t.Fatal(err)
	}
	if !mailRefused("mailer", "flow_egress_after_private") {
		t.Fatal("a mail after a secret read was not refused")
	}
	if c := clear("mailer"); c.Actions != 1 || c.AuditSeq == 0 {
		t.Fatalf("cleared %+v", c)
	}
	if v := propose("mailer", "send_email", gated.ClassWrite); !v.Approved {
		t.Fatalf("a mail after the operator cleared the state: %s (%s), want approved", v.Outcome, v.Reason)
	}

	if _, err := kv.Put(ctx, flow.Key("acme", "broken"), []byte("{")); err != nil {
		t.Fatal(err)
	}
	if !mailRefused("broken", "flow_state_unreadable") {
		t.Fatal("a mail on a corrupt state was not refused")
	}
	clear("broken")
	if v := propose("broken", "send_email", gated.ClassWrite); !v.Approved {
		t.Fatalf("a mail after the corrupt state was cleared: %s (%s), want approved", v.Outcome, v.Reason)
	}

	rep, err := audit.Verify(ctx, js, audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 0 {
		t.Fatalf("audit verify: %+v", rep.Problems)
	}
}
