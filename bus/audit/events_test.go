package audit_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/notify"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/strictjson"
)

// eventSamples holds, for every event gated records, data a reader must
// read as its writer does. An event the engine declares without a sample
// here fails TestEveryEventReadsBackThroughEveryReader: a new event is
// read back through every reader before it ships.
var eventSamples = map[string]string{
	engine.EventReceived:                `{"bytes":9,"sha256":"` + strings.Repeat("ab", 32) + `","subject":"gated.proposals.acme.host_restart_service"}`,
	engine.EventInvalid:                 `{"error":"not JSON"}`,
	engine.EventPolicyDecided:           `{"denied_tools":[],"denies":[],"eval_us":7,"review":{"required":false,"quorum":0,"why":"read"},"reviewer_tools":null,"run":null,"shadow_revision":"r2","sop":"","input":{"proposal":{"v":1},"persona":"reviewer","now":"2025-01-02T03:04:05Z"}}`,
	engine.EventPolicyRechecked:         `{"denied_tools":[],"denies":[],"eval_us":7,"review":{"required":true,"quorum":1,"why":"write"},"reviewer_tools":["ls"],"run":null,"sop":"","changed":["deny"]}`,
	engine.EventPolicyShadowDiffers:     `{"live":{"outcome":"approved","denies":[]},"shadow":{"outcome":"rejected","denies":[{"rule":"x","message":"no"}]},"kinds":["outcome","denies"],"rules":["x"]}`,
	engine.EventReviewSkipped:           `{"why":"settled"}`,
	engine.EventReviewStarted:           `{"review_id":"r1","persona":"sre","plugin":"sop","tools":["ls"],"deadline":"2025-01-02T03:05:05Z","model":"m1"}`,
	engine.EventReviewDone:              `{"review_id":"r1","plugin":"sop","plugin_version":"1.0","pid":42,"decision":"approve","gates":{"a":true},"missing_gates":[],"latency_ms":12.5,"why":"fine","model":"m1"}`,
	engine.EventReviewUnrouted:          `{"persona":"sre","plugin":"sop","failure":"no_plugin","error":"absent"}`,
	engine.EventReviewAwaited:           `{"holder":"m1","until":"2025-01-02T03:05:05Z","waited_ms":3,"outcome":"approved"}`,
	engine.EventVerdict:                 `{"v":1,"proposal_id":"p1","tenant":"acme","kind":"action","outcome":"approved","approved":true,"stage":"review","reason":"ok","reviews":[{"plugin":"sop","plugin_version":"1.0","persona":"sre","model":"m1","decision":"approve","latency_ms":12.5}],"decided_at":"2025-01-02T03:04:05Z","latency_ms":13,"audit_seq":0}`,
	engine.EventReplayed:                `{"audit_seq":4,"outcome":"approved"}`,
	engine.EventDeduplicated:            `{"duplicate_of":"p0","audit_seq":3,"stage":"policy","rejected_at":"2025-01-02T03:04:05Z"}`,
	engine.EventToolCalled:              `{"tool":"ls","persona":"sre"}`,
	engine.EventToolDenied:              `{"tool":"rm","persona":"sre"}`,
	engine.EventPolicyReloaded:          `{"revision":"r2"}`,
	engine.EventPolicyReloadFailed:      `{"error":"bad bundle"}`,
	engine.EventOperatorAwaited:         `{"deadline":"2025-01-02T04:04:05Z","reason":"prod","rule":"hold_prod"}`,
	engine.EventOperatorDecided:         `{"operator":"alice","key":"U1","criteria":null,"reason":"ok","held_audit_seq":5,"outcome":"approved"}`,
	engine.EventOperatorRefused:         `{"code":403,"reason":"not yours","subject":"s","operator":"bob"}`,
	engine.EventConsoleRefused:          `{"reason":"forbidden","path":"/api/x"}`,
	engine.EventRecordCorrupt:           `{"key":"acme.p1","error":"not JSON"}`,
	engine.EventNotifyDelivered:         `{"sink":"hook","notification":"audit-7"}`,
	engine.EventNotifyFailed:            `{"sink":"hook","notification":"audit-7","error":"503"}`,
	engine.EventAuditVerificationFailed: `{"seq":4,"subject":"gated.audit.acme.verdict.decided","kind":"modified","problem":"altered"}`,
	engine.EventPluginStarted:           `{"plugin":"sop","version":"1.0","pid":42,"sha256":"ab"}`,
	engine.EventPluginRefused:           `{"plugin":"sop","path":"/x","pinned_sha256":"ab","actual_sha256":"cd","why":"checksum mismatch"}`,
	engine.EventPluginExited:            `{"plugin":"sop","pid":42,"uptime_s":3.5}`,
	engine.EventPluginUnhealthy:         `{"plugin":"sop","pid":42,"misses":3,"interval_s":1}`,
	engine.EventBudgetRefused:           `{"limit":"proposals","scope":"tenant","used":10,"max":10}`,
	engine.EventGrantIssued:             `{"exp":1795661606,"gid":"g1","kid":"k1","proposal_id":"p1","tenant":"acme"}`,
	engine.EventGrantUsed:               `{"gid":"g1","tenant":"acme","proposal_id":"p1","action":"host_restart_service","by":"exec-1"}`,
	engine.EventGrantRefused:            `{"reason":"used","gid":"g1","by":"exec-1"}`,
	engine.EventGrantExpired:            `{"gid":"g1","exp":1795661606}`,
	engine.EventGrantOutcome:            `{"gid":"g1","tenant":"acme","proposal_id":"p1","action":"host_restart_service","target_key":"t","status":"succeeded","error":"","at":"2025-01-02T03:04:06Z","reviewers":[{"plugin":"sop","plugin_version":"1.0","persona":"sre","model":"m1"}],"in_history":true}`,
	engine.EventGrantOutcomeRefused:     `{"reason":"unknown grant","gid":"g9"}`,
}

// TestEveryEventReadsBackThroughEveryReader writes one record of each
// event gated records, as the Writer stores it, and reads it back
// through every reader of the stream: the decoder gives the event
// exactly as written, verify finds nothing wrong, its data decodes into
// the event's declared type with no member unknown, and the reviewer
// metrics, the shadow summary and the notifier take it without error.
func TestEveryEventReadsBackThroughEveryReader(t *testing.T) {
	head := `"action":"host_restart_service","operator":"alice","delivery":1,"policy_eval_us":7`
	names := engine.AuditEventNames()
	if len(names) != len(eventSamples) {
		t.Errorf("%d events declared, %d samples", len(names), len(eventSamples))
	}
	var track audit.TrackRecord
	shadow := audit.NewShadowSummary(10)
	for i, name := range names {
		sample, ok := eventSamples[name]
		if !ok {
			t.Errorf("event %s has no sample: read it back through every reader", name)
			continue
		}
		data := `{` + head + `,` + sample[1:]
		ev := engine.AuditEvent{V: gated.SchemaVersion, Event: name, Tenant: "acme", ProposalID: "p1",
			At: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Instance: "gate-1", PolicyRevision: "r1", Data: []byte(data)}
		m, err := audit.NewCompressedRecordMsg([]engine.AuditEvent{ev}, audit.Chain{N: 1}, testKey)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r, err := audit.DecodeRecord(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r.Seq = uint64(i + 1)
		got := r.Last()
		if got.Event != name || !bytes.Equal(got.Data, ev.Data) || !got.At.Equal(ev.At) || got.Instance != ev.Instance {
			t.Errorf("%s: read back as %+v", name, got)
		}
		e := audit.Entry{Seq: r.Seq, Subject: m.Subject, Header: m.Header, Data: m.Data, Record: r}
		if p := audit.CheckEntry(e, testKey); p != nil {
			t.Errorf("%s: verify finds %+v", name, p)
		}
		// The data is the head's members and the declared type's, each
		// known to one of them.
		into, _ := engine.NewAuditEventData(name)
		if _, note := into.(*engine.AuditNote); !note {
			var members map[string]json.RawMessage
			if err := json.Unmarshal(got.Data, &members); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"action", "operator", "delivery", "policy_eval_us"} {
				delete(members, k)
			}
			own, _ := json.Marshal(members)
			if err := strictjson.Decode(own, into); err != nil {
				t.Errorf("%s: data %s does not decode into %s: %v", name, own, reflect.TypeOf(into), err)
			}
		}
		track.Add(r)
		shadow.Add(e)
		notify.Classify(r)
	}
	if shadow.Invalid != 0 || shadow.Decisions != 1 || shadow.Differences != 1 {
		t.Errorf("the shadow summary read %d decisions, %d differences, %d invalid (%s)", shadow.Decisions, shadow.Differences, shadow.Invalid, shadow.FirstInvalid)
	}
	if len(track.Reviewers()) != 1 {
		t.Errorf("the reviewer metrics read %d reviewers, want 1: %+v", len(track.Reviewers()), track.Reviewers())
	}
}
