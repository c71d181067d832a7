package store

import (
	"context"
	"errors"
	"testing"

	"github.com/gated/gated"
)

// FuzzStoredRecords feeds arbitrary bytes to the checks of every record
// kind read back from the bucket: none may panic, each either refuses the
// bytes with a *RecordError reported once, or accepts a record that names
// its key.
func FuzzStoredRecords(f *testing.F) {
	for _, seed := range []string{
		`{"stream":"GATED_PROPOSALS","seq":7}`, "junk", "null", "[]", "{}",
		`{"v":1,"proposal_id":"p1","tenant":"acme","outcome":"approved","approved":true}`,
		`{"tenant":"acme","run_id":"p1","rounds":[{"round":1,"proposal_id":"p1","outcome":"rejected"}],"closed":"escalated"}`,
		`[{"v":1,"proposal_id":"p0","tenant":"acme","outcome":"approved","approved":true,"target_key":"p1","decided_at":"2026-01-01T00:00:00Z"}]`,
		`{"tenant":"acme","proposal_id":"p1","holder":"seq:1","until":"2999-01-01T00:00:00Z"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		reported := 0
		s := New(nil, WithCorruptRecordHook(func(context.Context, *RecordError) { reported++ }))
		ctx := context.Background()
		check := func(kind string, err error, ok bool) {
			t.Helper()
			var re *RecordError
			switch {
			case err == nil && !ok:
				t.Fatalf("%s accepted not naming its key: %q", kind, data)
			case err != nil && (!errors.As(err, &re) || !errors.Is(err, gated.ErrCorruptRecord) || re.Kind != kind):
				t.Fatalf("%s refused with %v", kind, err)
			case err != nil && reported != 1:
				t.Fatalf("%s refusal reported %d times", kind, reported)
			}
			reported = 0
		}
		v, err := s.decodeVerdict(ctx, "acme", "p1", 1, data)
		check(RecordVerdict, err, err != nil || (v.Tenant == "acme" && v.ProposalID == "p1" && v.Approved == (v.Outcome == gated.OutcomeApproved)))
		rec, err := s.decodeRunRecord(ctx, "acme", "p1", 1, data)
		check(RecordRun, err, err != nil || (rec.Tenant == "acme" && rec.RunID == "p1"))
		list, err := s.decodeHistory(ctx, "acme", "p1", 1, data)
		ok := err != nil || list != nil
		for _, h := range list {
			ok = ok && h.Tenant == "acme" && h.TargetKey == "p1" && h.Approved
		}
		check(RecordHistory, err, ok)
		c, err := s.decodeClaim(ctx, "acme", "p1", 1, data)
		check(RecordClaim, err, err != nil || (c.Holder != "" && c.Revision == 1))
	})
}
