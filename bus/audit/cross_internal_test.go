package audit

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gated/gated"
)

// FuzzDecodeBucketVerdict feeds the cross-check's two decoders. Neither
// panics; a stored verdict that decodes has the print of the record the
// engine would write for it (its JSON with audit_seq 0, after the members
// every event of a proposal carries); and a changed outcome changes it.
func FuzzDecodeBucketVerdict(f *testing.F) {
	v := gated.Verdict{V: 1, ProposalID: "p1", Tenant: "acme", Action: "db_backup", Kind: gated.KindAction,
		Outcome: gated.OutcomeRejected, Stage: gated.StagePolicy, Reason: "denied",
		DecidedAt: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC), LatencyMS: 1.25, AuditSeq: 42,
		Reviews: []gated.Review{{Plugin: "sop", Decision: "reject", Notes: "no SOP <covers> it"}}}
	doc, err := json.Marshal(&v)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("acme.p1", doc)
	f.Add("acme.p1", []byte(`{"tenant":"acme","proposal_id":"p1","audit_seq":0}`))
	f.Add("acme.p2", doc)
	f.Add("acme.p1", []byte(`{"tenant":"acme","proposal_id":"p1","audit_seq":3,"outcome":"approved","extra":[1,2]}`))
	f.Add("x", []byte(`null`))
	f.Add("acme.p1", []byte(`{"outcome":"approved"`))
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		// Whatever a record's data holds, reading it must not panic.
		_, _ = decodeVerdictRecord(NewRecord(0, gated.AuditEvent{Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p1", Data: value}))

		stored, err := decodeBucketVerdict(key, value)
		if err != nil {
			return
		}
		if stored.AuditSeq == 0 || stored.Tenant+"."+stored.ProposalID != key {
			t.Fatalf("decoded %q under %q without an error", value, key)
		}
		audited := *stored
		audited.AuditSeq = 0
		vdoc, err := json.Marshal(&audited)
		if err != nil {
			t.Fatal(err)
		}
		data := append([]byte(`{"operator":"alice","delivery":2,"policy_eval_us":7,`), vdoc[1:]...)
		rec := NewRecord(0, gated.AuditEvent{Event: gated.EventVerdict, Tenant: stored.Tenant, ProposalID: stored.ProposalID, Data: data})
		rec.V = 1
		rv, err := decodeVerdictRecord(rec)
		if err != nil {
			t.Fatalf("the record of %q: %v", value, err)
		}
		if printVerdict(rv) != printVerdict(stored) {
			t.Fatalf("the record's verdict and the stored one differ in %v", diffMembers(rv, stored))
		}
		flipped := *stored
		flipped.Outcome += "x"
		if printVerdict(&flipped) == printVerdict(stored) {
			t.Fatal("a changed outcome kept the print")
		}
	})
}
