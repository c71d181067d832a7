package gated

import (
	"encoding/json"
	"testing"
	"time"
)

func TestVerdictJSONKeepsOnlyItsOwnEncoding(t *testing.T) {
	v := &Verdict{V: 1, ProposalID: "p1", Tenant: "acme", Outcome: OutcomeRejected, Reason: "no", DecidedAt: time.Unix(0, 0).UTC(), AuditSeq: 5}
	fresh, _ := json.Marshal(v)
	v.keepEncoding([]byte(`{"kept":true}`))
	if got, _ := v.JSON(); string(got) != `{"kept":true}` {
		t.Fatalf("JSON = %s, want the kept encoding", got)
	}
	cp := *v
	if got, _ := cp.JSON(); string(got) != string(fresh) {
		t.Errorf("a copy's JSON = %s, want it encoded anew: %s", got, fresh)
	}
	v.AuditSeq = 6
	if got, _ := v.JSON(); string(got) == `{"kept":true}` {
		t.Error("JSON returned the kept encoding after AuditSeq changed")
	}
}
