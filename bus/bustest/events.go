package bustest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
)

// AuditEventSamples holds, for every event gated records, data a reader must
// read as its writer does. An event the engine declares without a sample
// here fails the tests that read every event back through every reader
// of the stream (bus/audit, bus/replay): a new event is read back before
// it ships.
var AuditEventSamples = map[string]string{
	gated.EventReceived:                `{"bytes":9,"sha256":"` + strings.Repeat("ab", 32) + `","subject":"gated.proposals.acme.host_restart_service"}`,
	gated.EventInvalid:                 `{"error":"not JSON"}`,
	gated.EventPolicyDecided:           `{"denied_tools":[],"denies":[],"eval_us":7,"review":{"required":false,"quorum":0,"why":"read"},"reviewer_tools":null,"run":null,"shadow_revision":"r2","sop":"","input":{"proposal":{"v":1},"persona":"reviewer","now":"2025-01-02T03:04:05Z"}}`,
	gated.EventPolicyRechecked:         `{"denied_tools":[],"denies":[],"eval_us":7,"review":{"required":true,"quorum":1,"why":"write"},"reviewer_tools":["ls"],"run":null,"sop":"","changed":["deny"]}`,
	gated.EventPolicyShadowDiffers:     `{"live":{"outcome":"approved","denies":[]},"shadow":{"outcome":"rejected","denies":[{"rule":"x","message":"no"}]},"kinds":["outcome","denies"],"rules":["x"]}`,
	gated.EventReviewSkipped:           `{"why":"settled"}`,
	gated.EventReviewStarted:           `{"review_id":"r1","persona":"sre","plugin":"sop","tools":["ls"],"deadline":"2025-01-02T03:05:05Z","model":"m1"}`,
	gated.EventReviewDone:              `{"review_id":"r1","plugin":"sop","plugin_version":"1.0","pid":42,"decision":"approve","gates":{"a":true},"missing_gates":[],"latency_ms":12.5,"why":"fine","model":"m1"}`,
	gated.EventReviewUnrouted:          `{"persona":"sre","plugin":"sop","failure":"no_plugin","error":"absent"}`,
	gated.EventReviewAwaited:           `{"holder":"m1","until":"2025-01-02T03:05:05Z","waited_ms":3,"outcome":"approved"}`,
	gated.EventVerdict:                 `{"v":1,"proposal_id":"p1","tenant":"acme","action":"host_restart_service","kind":"action","outcome":"approved","approved":true,"stage":"review","reason":"ok","reviews":[{"plugin":"sop","plugin_version":"1.0","persona":"sre","model":"m1","decision":"approve","latency_ms":12.5}],"decided_at":"2025-01-02T03:04:05Z","latency_ms":13,"audit_seq":0}`,
	gated.EventReplayed:                `{"audit_seq":4,"outcome":"approved"}`,
	gated.EventDeduplicated:            `{"duplicate_of":"p0","audit_seq":3,"stage":"policy","rejected_at":"2025-01-02T03:04:05Z"}`,
	gated.EventToolCalled:              `{"tool":"ls","persona":"sre"}`,
	gated.EventToolDenied:              `{"tool":"rm","persona":"sre"}`,
	gated.EventPolicyReloaded:          `{"revision":"r2"}`,
	gated.EventPolicyReloadFailed:      `{"error":"bad bundle"}`,
	gated.EventOperatorAwaited:         `{"deadline":"2025-01-02T04:04:05Z","reason":"prod","rule":"hold_prod"}`,
	gated.EventOperatorDecided:         `{"operator":"alice","key":"U1","criteria":null,"reason":"ok","held_audit_seq":5,"outcome":"approved"}`,
	gated.EventOperatorRefused:         `{"code":403,"reason":"not yours","subject":"s","operator":"bob"}`,
	gated.EventConsoleRefused:          `{"reason":"forbidden","path":"/api/x"}`,
	gated.EventRecordCorrupt:           `{"key":"acme.p1","error":"not JSON"}`,
	gated.EventNotifyDelivered:         `{"sink":"hook","notification":"audit-7"}`,
	gated.EventNotifyFailed:            `{"sink":"hook","notification":"audit-7","error":"503"}`,
	gated.EventAuditVerificationFailed: `{"seq":4,"subject":"gated.audit.acme.verdict.decided","kind":"modified","problem":"altered"}`,
	gated.EventPluginStarted:           `{"plugin":"sop","version":"1.0","pid":42,"sha256":"ab"}`,
	gated.EventPluginRefused:           `{"plugin":"sop","path":"/x","pinned_sha256":"ab","actual_sha256":"cd","why":"checksum mismatch"}`,
	gated.EventPluginExited:            `{"plugin":"sop","pid":42,"uptime_s":3.5}`,
	gated.EventPluginUnhealthy:         `{"plugin":"sop","pid":42,"misses":3,"interval_s":1}`,
	gated.EventBudgetRefused:           `{"limit":"proposals","scope":"tenant","used":10,"max":10}`,
	gated.EventGrantIssued:             `{"exp":1795661606,"gid":"g1","kid":"k1","proposal_id":"p1","tenant":"acme"}`,
	gated.EventGrantUsed:               `{"gid":"g1","tenant":"acme","proposal_id":"p1","action":"host_restart_service","by":"exec-1"}`,
	gated.EventGrantRefused:            `{"reason":"used","gid":"g1","by":"exec-1"}`,
	gated.EventGrantExpired:            `{"gid":"g1","exp":1795661606}`,
	gated.EventGrantOutcome:            `{"gid":"g1","tenant":"acme","proposal_id":"p1","action":"host_restart_service","target_key":"t","status":"succeeded","error":"","at":"2025-01-02T03:04:06Z","reviewers":[{"plugin":"sop","plugin_version":"1.0","persona":"sre","model":"m1"}],"in_history":true}`,
	gated.EventGrantOutcomeRefused:     `{"reason":"unknown grant","gid":"g9"}`,
	gated.EventFlowCleared:             `{"operator":"alice","key":"U1","agent":"mailer","reason":"reviewed","revision":3,"recent":[{"proposal_id":"p1","action":"read_secret","labels":["secret"],"at":"2025-01-02T03:04:05Z"}]}`,
	gated.EventLocalDecided:            `{"action":"host_get_status","agent":"ops-agent","arguments_sha256":"` + strings.Repeat("ab", 32) + `","as":"ops-agent","at":"2025-01-02T03:04:06Z","class":"read","id":"mcp-1","method":"tools/call","name":"get_status","outcome":"approved","policy_revision":"sha256:1","stage":"policy"}`,
	gated.EventLocalRefused:            `{"as":"ops-agent","reason":"the batch names tenant globex, not the subject's acme","sha256":"` + strings.Repeat("cd", 32) + `","subject":"gated.outcomes.acme.~local.ops-agent"}`,
}

// AuditHeadSample are the head's members of a sample event, as the
// engine writes them before the event's own data.
var AuditHeadSample = [][2]string{{"action", `"host_restart_service"`}, {"operator", `"u-1042"`}, {"delivery", "1"}, {"policy_eval_us", "7"}}

// AuditEventSample is the event name of tenant acme's proposal p1 with
// its sample data, under the head's members the data does not name
// itself: each member is named once, as the engine writes it.
func AuditEventSample(t testing.TB, name string) gated.AuditEvent {
	t.Helper()
	sample, ok := AuditEventSamples[name]
	if !ok {
		t.Fatalf("event %s has no sample: read it back through every reader", name)
	}
	var own map[string]json.RawMessage
	if err := json.Unmarshal([]byte(sample), &own); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	data := `{`
	for _, m := range AuditHeadSample {
		if _, named := own[m[0]]; !named {
			data += `"` + m[0] + `":` + m[1] + `,`
		}
	}
	data += sample[1:]
	return gated.AuditEvent{V: gated.SchemaVersion, Event: name, Tenant: "acme", ProposalID: "p1",
		At: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Instance: "gate-1", PolicyRevision: "r1", Data: []byte(data)}
}
