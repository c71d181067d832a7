package engine_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gated/gated"

	"github.com/gated/gated/engine"
)

// BenchmarkStatusJSON measures what the status publisher does for each
// audit event of a proposal decided by the policy alone: derive the
// status event's JSON.
func BenchmarkStatusJSON(b *testing.B) {
	verdict := `{"operator":"alice","delivery":1,"policy_eval_us":41,"v":1,"proposal_id":"bench-000001","tenant":"acme","action":"host_restart_service","kind":"action","outcome":"rejected","approved":false,"stage":"policy","reason":"policy denied: no_skip_review: flags.skip_review is denied for every operator","policy":{"denies":[{"rule":"no_skip_review","message":"flags.skip_review is denied for every operator"}],"rules":["no_skip_review"],"route":"route_class","revision":"sha256:775aac6a48d10eacc17d4c4c","eval_us":41},"decided_at":"2026-11-25T21:07:10.084711808Z","latency_ms":0.774,"audit_seq":0,"proposal_sha256":"32cd8047a9027c5b524e532ec11876754b6fbe6d3dc88958ba12b220c6e70a37","target_key":"81b8ede6389db4626b4637111f77df2d","agent":"ops-agent"}`
	events := []gated.AuditEvent{
		{V: 1, Event: gated.EventReceived, Tenant: "acme", ProposalID: "bench-000001", At: time.Now(), Data: json.RawMessage(`{"bytes":420}`)},
		{V: 1, Event: gated.EventPolicyDecided, Tenant: "acme", ProposalID: "bench-000001", At: time.Now(), Data: json.RawMessage(`{"denies":[]}`)},
		{V: 1, Event: gated.EventVerdict, Tenant: "acme", ProposalID: "bench-000001", At: time.Now(), Data: json.RawMessage(verdict)},
	}
	for _, ev := range events {
		b.Run(ev.Event, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok, err := engine.StatusJSON(ev, 7); err != nil || !ok {
					b.Fatal(err)
				}
			}
		})
	}
}
