package grants_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/grants"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine/wire"
)

func outcomeGated(t *testing.T) (*bustest.Gated, *fleet.Client) {
	t.Helper()
	return bustest.StartGrantingFleet(t)
}

// approveRestart proposes restarting nginx as id by agent, on a host of
// the agent's own, and returns the approval.
func approveRestart(t *testing.T, c *fleet.Client, id, agent string) *gated.Verdict {
	t.Helper()
	v := proposeRestart(t, c, id, agent, agent)
	if v.Outcome != gated.OutcomeApproved || v.Grant == "" {
		t.Fatalf("verdict %s with grant %q: %s", v.Outcome, v.Grant, v.Reason)
	}
	return v
}

// proposeRestart proposes restarting nginx on host as id, by agent.
func proposeRestart(t *testing.T, c *fleet.Client, id, agent, host string) *gated.Verdict {
	t.Helper()
	data := fmt.Appendf(nil, `{"v":1,"id":%q,"tenant":"acme","action":"host_restart_service","class":"write","blast_radius":"single_device",`+
		`"target":{"host":%q,"service":"nginx"},"requested_by":{"agent":%q}}`, id, host, agent)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	v, err := c.ProposeRaw(ctx, data)
	if err != nil && v == nil {
		t.Fatal(err)
	}
	return v
}

// grantGID is the gid of the grant the stored verdict of id carries.
func grantGID(t *testing.T, g *bustest.Gated, id string) string {
	t.Helper()
	v, err := store.New(g.Resources.Verdicts).Get(t.Context(), "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	return gidOf(t, v.Grant, publishedKeys(t, g))
}

// report publishes an outcome report on subject through JetStream, as an
// executor does.
func report(t *testing.T, g *bustest.Gated, subject string, body any) {
	t.Helper()
	data, ok := body.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	if _, err := g.JS.PublishMsg(t.Context(), msg); err != nil {
		t.Fatalf("publishing an outcome report on %s: %v", subject, err)
	}
}

func outcomeBody(tenant, id, gid, status, errText string) map[string]any {
	return map[string]any{"v": 1, "gid": gid, "tenant": tenant, "proposal_id": id, "status": status,
		"error": errText, "at": time.Now().UTC().Format(time.RFC3339Nano)}
}

// waitRecord waits for an audit record of event on proposal id and
// returns its data.
func waitRecord(t *testing.T, g *bustest.Gated, id, event string) map[string]any {
	t.Helper()
	for range 200 {
		for _, ev := range bustest.AuditRecords(t, g.Resources.Audit, "acme", id) {
			if ev.Event == event {
				var data map[string]any
				if err := json.Unmarshal(ev.Data, &data); err != nil {
					t.Fatal(err)
				}
				return data
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no %s audited for %s: %v", event, id, bustest.AuditEvents(t, g.Resources.Audit, "acme", id))
	return nil
}

// TestOutcomeClosesTheLoop: an executor's reports on a used grant are
// audited with the approval's action, target and reviewers, stored on the
// grant record and on the target's history, and the policy then denies
// the same action on the target (recent_failure).
func TestOutcomeClosesTheLoop(t *testing.T) {
	g, c := outcomeGated(t)
	v := approveRestart(t, c, "out-1", "agent-a")
	if r := useGrant(t, g, "acme", grants.UseRequest{Grant: v.Grant, By: "agent-a"}); !r.OK {
		t.Fatalf("use: %+v", r)
	}
	gid := grantGID(t, g, "out-1")
	report(t, g, wire.OutcomeSubject("acme", "out-1"), outcomeBody("acme", "out-1", gid, "started", ""))
	if data := waitRecord(t, g, "out-1", gated.EventGrantOutcome); data["status"] != "started" {
		t.Fatalf("first grant.outcome %v, want started", data)
	}
	report(t, g, wire.OutcomeSubject("acme", "out-1"), outcomeBody("acme", "out-1", gid, "failed", "nginx did not come back"))
	var failed map[string]any
	for range 200 {
		for _, ev := range bustest.AuditRecords(t, g.Resources.Audit, "acme", "out-1") {
			if ev.Event == gated.EventGrantOutcome && strings.Contains(string(ev.Data), `"failed"`) {
				_ = json.Unmarshal(ev.Data, &failed)
			}
		}
		if failed != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if failed == nil {
		t.Fatalf("no failed grant.outcome: %v", bustest.AuditEvents(t, g.Resources.Audit, "acme", "out-1"))
	}
	for k, want := range map[string]any{"gid": gid, "tenant": "acme", "proposal_id": "out-1", "action": "host_restart_service",
		"target_key": v.TargetKey, "error": "nginx did not come back"} {
		if failed[k] != want {
			t.Errorf("grant.outcome %s = %v, want %v", k, failed[k], want)
		}
	}
	if _, ok := failed["reviewers"].([]any); !ok {
		t.Errorf("grant.outcome reviewers = %v, want a list", failed["reviewers"])
	}
	var ex gated.Execution
	if err := json.Unmarshal(grantRecord(t, g, "acme.out-1").Outcome, &ex); err != nil || ex.Status != gated.ExecutionFailed {
		t.Fatalf("grant record outcome %+v (%v), want failed", ex, err)
	}
	h, err := store.New(g.Resources.Verdicts).Recent(t.Context(), "acme", v.TargetKey)
	if err != nil {
		t.Fatal(err)
	}
	hist := h.Verdicts
	i := slices.IndexFunc(hist, func(h gated.Verdict) bool { return h.ProposalID == "out-1" })
	if i < 0 || hist[i].Execution == nil || hist[i].Execution.Status != gated.ExecutionFailed || hist[i].Execution.Error != "nginx did not come back" {
		t.Fatalf("history %+v: want out-1 with a failed execution", hist)
	}
	// A started that arrives after the failure does not hide it.
	report(t, g, wire.OutcomeSubject("acme", "out-1"), outcomeBody("acme", "out-1", gid, "started", ""))
	next := proposeRestart(t, c, "out-2", "agent-b", "agent-a")
	if next.Outcome != gated.OutcomeRejected || next.Policy == nil ||
		!slices.ContainsFunc(next.Policy.Denies, func(d gated.Deny) bool { return d.Rule == "recent_failure" }) {
		t.Fatalf("the next restart: %s %+v, want rejected by recent_failure", next.Outcome, next.Policy)
	}
}

// TestOutcomeReportsRefused: a report gated cannot take in is refused,
// audited with the reason, and acknowledged; nothing is stored.
func TestOutcomeReportsRefused(t *testing.T) {
	g, c := outcomeGated(t)
	used := approveRestart(t, c, "ref-used", "agent-a")
	if r := useGrant(t, g, "acme", grants.UseRequest{Grant: used.Grant, By: "agent-a"}); !r.OK {
		t.Fatalf("use: %+v", r)
	}
	usedGID := grantGID(t, g, "ref-used")
	approveRestart(t, c, "ref-unused", "agent-b")
	unusedGID := grantGID(t, g, "ref-unused")
	for _, tc := range []struct {
		note, subject, id, reason string
		body                      any
	}{
		{note: "unknown grant", subject: wire.OutcomeSubject("acme", "ref-none"), id: "ref-none", reason: "unknown grant",
			body: outcomeBody("acme", "ref-none", usedGID, "succeeded", "")},
		{note: "unused grant", subject: wire.OutcomeSubject("acme", "ref-unused"), id: "ref-unused", reason: "not used",
			body: outcomeBody("acme", "ref-unused", unusedGID, "failed", "x")},
		{note: "other gid", subject: wire.OutcomeSubject("acme", "ref-used"), id: "ref-used", reason: "another gid",
			body: outcomeBody("acme", "ref-used", unusedGID, "failed", "x")},
		{note: "other tenant's subject", subject: wire.OutcomeSubject("acme", "ref-used"), id: "ref-used", reason: "globex.ref-used",
			body: outcomeBody("globex", "ref-used", usedGID, "failed", "x")},
		{note: "not json", subject: wire.OutcomeSubject("acme", "ref-used"), id: "ref-used", reason: "not a JSON object",
			body: []byte(`{"v":1,`)},
		{note: "bad status", subject: wire.OutcomeSubject("acme", "ref-used"), id: "ref-used", reason: "member status",
			body: outcomeBody("acme", "ref-used", usedGID, "approved", "")},
	} {
		t.Run(tc.note, func(t *testing.T) {
			before := len(refusals(t, g, tc.id))
			report(t, g, tc.subject, tc.body)
			var got []string
			for range 200 {
				if got = refusals(t, g, tc.id); len(got) > before {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if len(got) <= before || !strings.Contains(got[len(got)-1], tc.reason) {
				t.Fatalf("refusals %q: want a new one naming %q", got, tc.reason)
			}
		})
	}
	if rec := grantRecord(t, g, "acme.ref-used"); len(rec.Outcome) != 0 {
		t.Errorf("a refused report was stored: %s", rec.Outcome)
	}
	waitDrained(t, g.Resources.OutcomesConsumer)
}

// TestOutcomeExecutorRefusal: a report that the executor refused a grant
// is audited as grant.refused by the executor, with its reason.
func TestOutcomeExecutorRefusal(t *testing.T) {
	g, c := outcomeGated(t)
	approveRestart(t, c, "exec-ref", "agent-a")
	body := outcomeBody("acme", "exec-ref", "", "refused", "grant refused: target_sha256 does not match the target")
	report(t, g, wire.OutcomeSubject("acme", "exec-ref"), body)
	data := waitRecord(t, g, "exec-ref", gated.EventGrantRefused)
	if data["by"] != "executor" || !strings.Contains(fmt.Sprint(data["reason"]), "target_sha256") {
		t.Fatalf("grant.refused %v: want by executor naming target_sha256", data)
	}
	noGrantRecord(t, g, "acme.exec-ref") // a refusal records no use
}

func refusals(t *testing.T, g *bustest.Gated, id string) []string {
	t.Helper()
	var out []string
	for _, ev := range bustest.AuditRecords(t, g.Resources.Audit, "acme", id) {
		if ev.Event == gated.EventGrantOutcomeRefused {
			out = append(out, string(ev.Data))
		}
	}
	return out
}

// waitDrained waits until the consumer has nothing pending or unacknowledged.
func waitDrained(t *testing.T, cons jetstream.Consumer) {
	t.Helper()
	var info *jetstream.ConsumerInfo
	for range 200 {
		var err error
		if info, err = cons.Info(t.Context()); err != nil {
			t.Fatal(err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("outcome consumer: %d pending, %d unacknowledged", info.NumPending, info.NumAckPending)
}

// waitRefusal reports body on subject and waits for a new
// grant.outcome_refused of id that contains reason.
func waitRefusal(t *testing.T, g *bustest.Gated, subject, id string, body any, reason string) {
	t.Helper()
	before := len(refusals(t, g, id))
	report(t, g, subject, body)
	var got []string
	for range 200 {
		if got = refusals(t, g, id); len(got) > before {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(got) <= before || !strings.Contains(got[len(got)-1], reason) {
		t.Fatalf("refusals %q: want a new one naming %q", got, reason)
	}
}

// deniesRecentFailure says whether v was denied by recent_failure.
func deniesRecentFailure(v *gated.Verdict) bool {
	return v.Policy != nil && slices.ContainsFunc(v.Policy.Denies, func(d gated.Deny) bool { return d.Rule == "recent_failure" })
}

// TestOutcomeOnlyFromItsAgent: where agents use grants and report on
// their own subjects (gated.outcomes.<tenant>.<id>.<agent>), a failure
// another agent reports of an agent's grant, or one reported on the
// tenant's subject of a grant an agent used, is refused, audited, stored
// nowhere, and does not set off recent_failure on the agent's target; the
// report of the agent that used it, or that it was issued to, is taken in
// and does. (That the subject is the agent's own is NATS's to enforce:
// see test/agent_isolation_test.go.)
func TestOutcomeOnlyFromItsAgent(t *testing.T) {
	g, c := outcomeGated(t)
	v := approveRestart(t, c, "agent-out-1", "agent-a")
	if r := useGrantOn(t, g, "gated.grants.acme.use.agent-a", grants.UseRequest{Grant: v.Grant, By: "agent-a"}); !r.OK {
		t.Fatalf("agent-a using its grant: %+v", r)
	}
	gid := grantGID(t, g, "agent-out-1")
	failed := outcomeBody("acme", "agent-out-1", gid, "failed", "made up")
	waitRefusal(t, g, "gated.outcomes.acme.agent-out-1.agent-b", "agent-out-1", failed, `not issued to agent \"agent-b\"`)
	waitRefusal(t, g, "gated.outcomes.acme.agent-out-1", "agent-out-1", failed, "agent's subject")
	if rec := grantRecord(t, g, "acme.agent-out-1"); len(rec.Outcome) != 0 {
		t.Fatalf("a refused report was stored: %s", rec.Outcome)
	}
	if next := proposeRestart(t, c, "agent-out-2", "agent-b", "agent-a"); deniesRecentFailure(next) {
		t.Fatalf("agent-b's made-up failure spoilt agent-a's target: %+v", next.Policy)
	}
	report(t, g, "gated.outcomes.acme.agent-out-1.agent-a", outcomeBody("acme", "agent-out-1", gid, "failed", "nginx did not come back"))
	if data := waitRecord(t, g, "agent-out-1", gated.EventGrantOutcome); data["as"] != "agent-a" || data["status"] != "failed" {
		t.Fatalf("grant.outcome %v, want agent-a's failure", data)
	}
	if next := proposeRestart(t, c, "agent-out-3", "agent-c", "agent-a"); !deniesRecentFailure(next) {
		t.Fatalf("after agent-a's own failure: %s %+v, want recent_failure", next.Outcome, next.Policy)
	}

	// A grant used on the tenant's subject (an executor trusted with
	// any of the tenant's grants): the executor reports on that subject,
	// the agent it was issued to on its own, another agent not at all.
	w := proposeRestart(t, c, "agent-out-4", "agent-a", "web-4")
	if r := useGrant(t, g, "acme", grants.UseRequest{Grant: w.Grant, By: "executor"}); !r.OK {
		t.Fatalf("the executor using agent-a's grant: %+v", r)
	}
	gid4 := grantGID(t, g, "agent-out-4")
	waitRefusal(t, g, "gated.outcomes.acme.agent-out-4.agent-b", "agent-out-4",
		outcomeBody("acme", "agent-out-4", gid4, "failed", "made up"), `not issued to agent \"agent-b\"`)
	report(t, g, "gated.outcomes.acme.agent-out-4", outcomeBody("acme", "agent-out-4", gid4, "started", ""))
	report(t, g, "gated.outcomes.acme.agent-out-4.agent-a", outcomeBody("acme", "agent-out-4", gid4, "succeeded", ""))
	var statuses []string
	for range 200 {
		statuses = statuses[:0]
		for _, ev := range bustest.AuditRecords(t, g.Resources.Audit, "acme", "agent-out-4") {
			if ev.Event == gated.EventGrantOutcome {
				var d map[string]any
				_ = json.Unmarshal(ev.Data, &d)
				statuses = append(statuses, fmt.Sprint(d["status"], "/", d["as"]))
			}
		}
		if len(statuses) == 2 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !slices.Equal(statuses, []string{"started/<nil>", "succeeded/agent-a"}) {
		t.Fatalf("grant.outcome of agent-out-4: %v, want the executor's started and agent-a's succeeded", statuses)
	}
	waitDrained(t, g.Resources.OutcomesConsumer)
}

// TestOutcomeDecodedStrictly: a report with a member given twice, as
// written or escaped, is refused naming it, and stored nowhere.
func TestOutcomeDecodedStrictly(t *testing.T) {
	g, c := outcomeGated(t)
	v := approveRestart(t, c, "strict-out", "agent-a")
	if r := useGrant(t, g, "acme", grants.UseRequest{Grant: v.Grant, By: "agent-a"}); !r.OK {
		t.Fatalf("use: %+v", r)
	}
	gid := grantGID(t, g, "strict-out")
	at := time.Now().UTC().Format(time.RFC3339)
	for _, tc := range []struct{ note, body, member string }{
		{"status twice", fmt.Sprintf(`{"v":1,"gid":%q,"tenant":"acme","proposal_id":"strict-out","status":"succeeded","status":"failed","error":"x","at":%q}`, gid, at), `\"status\": member appears twice`},
		{"status twice, once escaped", fmt.Sprintf(`{"v":1,"gid":%q,"tenant":"acme","proposal_id":"strict-out","status":"succeeded","st\u0061tus":"failed","error":"x","at":%q}`, gid, at), `\"status\": member appears twice`},
		{"STATUS", fmt.Sprintf(`{"v":1,"gid":%q,"tenant":"acme","proposal_id":"strict-out","status":"succeeded","STATUS":"failed","at":%q}`, gid, at), `\"STATUS\" is unknown`},
	} {
		t.Run(tc.note, func(t *testing.T) {
			waitRefusal(t, g, wire.OutcomeSubject("acme", "strict-out"), "strict-out", []byte(tc.body), tc.member)
		})
	}
	if rec := grantRecord(t, g, "acme.strict-out"); len(rec.Outcome) != 0 {
		t.Fatalf("a refused report was stored: %s", rec.Outcome)
	}
}

// TestOutcomeSubjectsOfAnOlderSetup: a gated started on the outcome
// stream and consumer an older gated made (the tenant's subjects alone)
// widens both to the agents' subjects, so that reports on those are
// captured and delivered.
func TestOutcomeSubjectsOfAnOlderSetup(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: wire.OutcomesStream, Subjects: []string{"gated.outcomes.*.*"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(t.Context(), wire.OutcomesStream, jetstream.ConsumerConfig{Durable: bus.OutcomesConsumerName,
		AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: -1, FilterSubject: "gated.outcomes.*.*"}); err != nil {
		t.Fatal(err)
	}
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatalf("setting up over the older outcome stream: %v", err)
	}
	if _, err := js.Publish(t.Context(), "gated.outcomes.acme.p-1.agent-a", []byte("{}")); err != nil {
		t.Fatalf("a report on an agent's subject: %v", err)
	}
	batch, err := res.OutcomesConsumer.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if m.Subject() != "gated.outcomes.acme.p-1.agent-a" {
			t.Fatalf("delivered %s", m.Subject())
		}
		return
	}
	t.Fatal("the report on an agent's subject was not delivered")
}
