package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/flow"
	"github.com/gated/gated/internal/natstest"
)

// flowsData labels a secret read, a page fetch (untrusted content) and a
// mail (egress), lets the writes through without review, and turns both
// flow rules on over a short window.
const flowsData = `{"gated": {
  "tools": {"read_secret": {"class": "read"}, "fetch_page": {"class": "read"}, "read_notes": {"class": "read"}},
  "config": {
    "skip_review_actions": ["send_email", "update_doc"],
    "flows": {
      "labels": {"read_secret": ["secret"], "fetch_page": ["untrusted"], "send_email": ["egress"]},
      "window": "2s",
      "rules": {"egress_after_private": true, "write_after_untrusted": "review"}
    }
  }
}}`

// startServe starts gated serve on the NATS server at url with the flow
// data, and no reviewer.
func startServe(t *testing.T, url, data string) *Server {
	t.Helper()
	sc := Defaults()
	sc.DataDir, sc.NATSURL = t.TempDir(), url
	sc.PersonasWatch, sc.PolicyWatch, sc.ReviewService = false, false, false
	sc.ShutdownGrace = 5 * time.Second
	sc.Policy.DataFiles = []string{data}
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
	t.Cleanup(func() { _ = s.Stop() }) // a test may have stopped it
	return s
}

// TestFlowRulesThroughServe drives the flow rules through two gated
// serve processes on one NATS server and the Go fleet client: an agent
// that used a secret read's grant is refused a mail, naming the read,
// under its session and under a new one, until the window passes; another
// agent is not; a write after a page fetch goes to review with the flow;
// an action executed through one gated is seen by the other; and a
// corrupt or missing state refuses when the rules are on.
func TestFlowRulesThroughServe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two gated serve processes")
	}
	data := filepath.Join(t.TempDir(), "flows.json")
	if err := os.WriteFile(data, []byte(flowsData), 0o600); err != nil {
		t.Fatal(err)
	}
	ns := natstest.Server(t)
	a := startServe(t, ns.ClientURL(), data)
	startServe(t, ns.ClientURL(), data) // decides alone once a is stopped
	nc, js := natstest.Connect(t, ns)
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	grants, err := fleet.NewGrants(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	n, start := 0, time.Now().UnixNano()
	var labels []string // the next proposal's own
	propose := func(agent, session, action string, class gated.Class) *gated.Verdict {
		t.Helper()
		n++
		id := fmt.Sprintf("flow-%d-%d", start, n)
		p := &gated.Proposal{V: 1, ID: id, Tenant: "acme", Action: action, Class: class,
			Target: map[string]any{"doc": id}, Reason: "flows", RequestedBy: &gated.RequestedBy{Agent: agent, Session: session}, Labels: labels}
		labels = nil
		if class != gated.ClassRead {
			p.BlastRadius = gated.BlastSingleDevice
		}
		v, err := client.Propose(ctx, p)
		if v == nil {
			t.Fatalf("%s by %s: %v", action, agent, err)
		}
		return v
	}
	execute := func(agent, action string) {
		t.Helper()
		v := propose(agent, "s1", action, gated.ClassRead)
		if !v.Approved || v.Grant == "" {
			t.Fatalf("%s by %s: %s (%s), want approved with a grant", action, agent, v.Outcome, v.Reason)
		}
		if err := grants.Use(ctx, "acme", v.Grant, "test"); err != nil {
			t.Fatalf("using the grant of %s: %v", action, err)
		}
	}
	refusedBy := func(v *gated.Verdict, rule string) bool {
		return v.Outcome == gated.OutcomeRejected && v.Policy != nil && len(v.Policy.Rules) > 0 && v.Policy.Rules[0] == rule
	}

	execute("agent-1", "read_secret")
	v := propose("agent-1", "s1", "send_email", gated.ClassWrite)
	if !refusedBy(v, "flow_egress_after_private") || !strings.Contains(v.Reason, "read_secret") {
		t.Fatalf("a mail after a secret read: %s (%s) %+v, want refused naming the read", v.Outcome, v.Reason, v.Policy)
	}
	if v := propose("agent-1", "s2", "send_email", gated.ClassWrite); !refusedBy(v, "flow_egress_after_private") {
		t.Fatalf("a mail under a new session id: %s (%s), want refused", v.Outcome, v.Reason)
	}
	if v := propose("agent-2", "s1", "send_email", gated.ClassWrite); !v.Approved {
		t.Fatalf("another agent's mail: %s (%s), want approved", v.Outcome, v.Reason)
	}

	if v := propose("agent-3", "s1", "update_doc", gated.ClassWrite); !v.Approved {
		t.Fatalf("a write before any page fetch: %s (%s), want approved without review", v.Outcome, v.Reason)
	}
	execute("agent-3", "fetch_page")
	v = propose("agent-3", "s1", "update_doc", gated.ClassWrite)
	if v.Approved || v.Policy == nil || v.Policy.Route != "flow_write_after_untrusted" {
		t.Fatalf("a write after a page fetch: %s (%s) %+v, want routed to review by the flow rule", v.Outcome, v.Reason, v.Policy)
	}

	// Labels an agent adds to its proposal join its state as the data's do.
	labels = []string{"secret"}
	execute("agent-7", "read_notes")
	if v := propose("agent-7", "s1", "send_email", gated.ClassWrite); !refusedBy(v, "flow_egress_after_private") || !strings.Contains(v.Reason, "read_notes") {
		t.Fatalf("a mail after a read the agent labelled secret: %s (%s), want refused naming it", v.Outcome, v.Reason)
	}

	// An action executed through one gated is seen by the other.
	v = propose("agent-4", "s1", "read_secret", gated.ClassRead)
	if r := a.Grants().Use(ctx, "acme", v.Grant, "test"); !r.OK {
		t.Fatalf("using the grant through the first gated: %s", r.Error)
	}
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	if v := propose("agent-4", "s1", "send_email", gated.ClassWrite); !refusedBy(v, "flow_egress_after_private") {
		t.Fatalf("a mail decided by the second gated: %s (%s), want refused", v.Outcome, v.Reason)
	}

	// After the window the read no longer counts.
	time.Sleep(2 * time.Second)
	if v := propose("agent-1", "s3", "send_email", gated.ClassWrite); !v.Approved {
		t.Fatalf("a mail after the window: %s (%s), want approved", v.Outcome, v.Reason)
	}

	// A corrupt record, then a missing bucket, refuse.
	kv, err := js.KeyValue(ctx, flow.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, flow.Key("acme", "agent-5"), []byte("{")); err != nil {
		t.Fatal(err)
	}
	if v := propose("agent-5", "s1", "send_email", gated.ClassWrite); !refusedBy(v, "flow_state_unreadable") {
		t.Fatalf("a mail on a corrupt state: %s (%s), want refused", v.Outcome, v.Reason)
	}
	if err := js.DeleteKeyValue(ctx, flow.Bucket); err != nil {
		t.Fatal(err)
	}
	if v := propose("agent-6", "s1", "host_list_services", gated.ClassRead); !refusedBy(v, "flow_state_unreadable") {
		t.Fatalf("a proposal with the bucket gone: %s (%s), want refused", v.Outcome, v.Reason)
	}
}
