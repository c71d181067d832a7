package grants_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine/wire"
)

func localDecision(id, agent string) map[string]any {
	return map[string]any{"id": id, "agent": agent, "action": "host_get_status", "class": "read",
		"method": "tools/call", "name": "get_status", "outcome": "approved", "stage": "policy",
		"policy_revision": "rev-1", "arguments_sha256": strings.Repeat("ab", 32),
		"at": time.Now().UTC().Format(time.RFC3339Nano)}
}

func localBatch(tenant string, decisions ...map[string]any) map[string]any {
	return map[string]any{"v": 1, "tenant": tenant, "decisions": decisions}
}

// localRefusals returns the data of every local.refused of acme.
func localRefusals(t *testing.T, g *bustest.Gated) []string {
	t.Helper()
	var out []string
	for _, ev := range bustest.AuditRecords(t, g.Resources.Audit, "acme", "") {
		if ev.Event == gated.EventLocalRefused {
			out = append(out, string(ev.Data))
		}
	}
	return out
}

// waitLocalRefusal publishes body on subject and waits for a new
// local.refused that contains reason.
func waitLocalRefusal(t *testing.T, g *bustest.Gated, subject string, body any, reason string) {
	t.Helper()
	before := len(localRefusals(t, g))
	report(t, g, subject, body)
	var got []string
	for range 200 {
		if got = localRefusals(t, g); len(got) > before {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(got) <= before || !strings.Contains(got[len(got)-1], reason) {
		t.Fatalf("local refusals %q: want a new one naming %q", got, reason)
	}
}

// TestLocalDecisionsAudited: a batch of local decisions on the tenant's
// subject, and on an agent's, leaves one local.decided per call, under
// the call's id, with what the gateway reported, and the audit stream
// still verifies.
func TestLocalDecisionsAudited(t *testing.T) {
	g, _ := outcomeGated(t)
	report(t, g, wire.LocalDecisionSubject("acme", ""), localBatch("acme", localDecision("loc-1", "agent-a"), localDecision("loc-2", "agent-b")))
	report(t, g, wire.LocalDecisionSubject("acme", "agent-c"), localBatch("acme", localDecision("loc-3", "agent-c")))
	for id, as := range map[string]string{"loc-1": "", "loc-2": "", "loc-3": "agent-c"} {
		data := waitRecord(t, g, id, gated.EventLocalDecided)
		if data["id"] != id || data["outcome"] != "approved" || data["stage"] != "policy" || data["policy_revision"] != "rev-1" || data["name"] != "get_status" {
			t.Fatalf("%s: %v", id, data)
		}
		if got, _ := data["as"].(string); got != as {
			t.Fatalf("%s: as %q, want %q", id, got, as)
		}
		evs := bustest.AuditRecords(t, g.Resources.Audit, "acme", id)
		if len(evs) != 1 || evs[0].PolicyRevision != "rev-1" {
			t.Fatalf("%s: %+v", id, evs)
		}
	}
	waitDrained(t, g.Resources.OutcomesConsumer)
	rep, err := audit.Verify(t.Context(), g.JS, audit.VerifyOptions{Tenant: "acme", SkipVerdicts: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 0 {
		t.Fatalf("verify: %+v", rep.Problems)
	}
}

// TestLocalDecisionsRefused: a batch naming another tenant than its
// subject's, one on an agent's subject naming another agent, and a
// malformed one are refused whole, audited as local.refused with why,
// and none of their calls is recorded as decided.
func TestLocalDecisionsRefused(t *testing.T) {
	g, _ := outcomeGated(t)
	waitLocalRefusal(t, g, wire.LocalDecisionSubject("acme", ""), localBatch("globex", localDecision("other-1", "agent-a")),
		"names tenant globex, not the subject's acme")
	waitLocalRefusal(t, g, wire.LocalDecisionSubject("acme", "agent-a"), localBatch("acme", localDecision("other-2", "agent-a"), localDecision("other-3", "agent-b")),
		`names agent \"agent-b\", not the subject's \"agent-a\"`)
	write := localDecision("other-4", "agent-a")
	write["class"] = "write"
	waitLocalRefusal(t, g, wire.LocalDecisionSubject("acme", ""), localBatch("acme", write), "a gateway decides reads alone")
	denied := localDecision("other-5", "agent-a")
	denied["outcome"] = "rejected"
	waitLocalRefusal(t, g, wire.LocalDecisionSubject("acme", ""), localBatch("acme", denied), "only approvals at the policy stage")
	waitLocalRefusal(t, g, wire.LocalDecisionSubject("acme", ""), []byte(`{"v":1,"tenant":"acme","decisions":[],"x":1}`), `member \"x\" is unknown`)
	waitDrained(t, g.Resources.OutcomesConsumer)
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("other-%d", i)
		if evs := bustest.AuditEvents(t, g.Resources.Audit, "acme", id); len(evs) != 0 {
			t.Fatalf("%s recorded: %v", id, evs)
		}
	}
	// Nothing of globex's was written either.
	if recs := bustest.TenantAuditRecords(t, g.Resources.Audit, "globex"); len(recs) != 0 {
		t.Fatalf("globex has %d records", len(recs))
	}
	var d gated.LocalRefusedData
	got := localRefusals(t, g)
	if err := json.Unmarshal([]byte(got[0]), &d); err != nil || d.Subject != wire.LocalDecisionSubject("acme", "") || len(d.SHA256) != 64 {
		t.Fatalf("%+v, %v", d, err)
	}
}
