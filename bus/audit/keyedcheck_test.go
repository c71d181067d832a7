package audit_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
)

// verifyKeyed verifies the stream with testKey: as Verify runs, which
// reads a record whose MAC verifies only for its tenant, chain, last
// event and verdict, and decoding every record in full; with the verdict
// check and without it. All must find the same problems, records and
// heads; it returns the report of Verify as it runs.
func verifyKeyed(t *testing.T, js jetstream.JetStream) *audit.Report {
	t.Helper()
	opts := audit.VerifyOptions{Keys: [][]byte{testKey}}
	quick := verify(t, js, opts)
	reports := map[string]*audit.Report{"quick, no verdict check": verify(t, js, audit.VerifyOptions{Keys: opts.Keys, SkipVerdicts: true})}
	t.Run("in full", func(t *testing.T) {
		audit.DecodeInFull(t)
		reports["in full"] = verify(t, js, opts)
		reports["in full, no verdict check"] = verify(t, js, audit.VerifyOptions{Keys: opts.Keys, SkipVerdicts: true})
	})
	for how, rep := range reports {
		if rep == nil {
			t.Fatalf("%s: no report", how)
		}
		if fmt.Sprint(rep.Problems) != fmt.Sprint(quick.Problems) || rep.Messages != quick.Messages ||
			rep.Records != quick.Records || fmt.Sprint(rep.Heads) != fmt.Sprint(quick.Heads) ||
			rep.Verdicts != nil && (quick.Verdicts == nil || *rep.Verdicts != *quick.Verdicts) {
			t.Fatalf("%s: %d records, problems %+v, heads %+v;\nas Verify runs: %d records, problems %+v, heads %+v",
				how, rep.Records, rep.Problems, rep.Heads, quick.Records, quick.Problems, quick.Heads)
		}
	}
	return quick
}

// TestVerifyKeyedRecordOnAnotherSubject: a record whose MAC verifies is
// not decoded in full, yet its subject must still name its tenant and its
// last event, found past events whose data hold strings with escaped
// quotes and objects that look like events: the MAC does not cover the
// subject.
func TestVerifyKeyedRecordOnAnotherSubject(t *testing.T) {
	for _, subject := range []string{
		"gated.audit.acme.received", // the data's look-alikes name it
		"gated.audit.acme.policy.decided",
		"gated.audit.beta.verdict.decided",
	} {
		t.Run(subject, func(t *testing.T) {
			s := newTamperStream(t, formV3Compressed)
			evs := decisionEvents("acme", "forged4")
			last := &evs[len(evs)-1]
			last.Data = append([]byte(`{"note":"\\\"},{\"v\":1,\"event\":\"received\"","seen":{"v":1,"event":"received"},"list":[{"v":1,"event":"received"}],`), last.Data[1:]...)
			m, err := audit.NewCompressedRecordMsg(evs, audit.Chain{N: 4, Prev: hexSHA256(s.head.Data)}, testKey)
			if err != nil {
				t.Fatal(err)
			}
			if m.Subject != "gated.audit.acme."+gated.EventVerdict {
				t.Fatalf("built on %s", m.Subject)
			}
			// As it was written, the record is clean.
			s.publish(t, m)
			if rep := verifyKeyed(t, s.js); !rep.Clean() {
				t.Fatalf("problems: %+v", rep.Problems)
			}
			m.Subject = subject
			seq := s.publish(t, m)
			rep := verifyKeyed(t, s.js)
			want := []wantProblem{{seq, audit.ProblemForged}}
			if got := problemsOf(rep); len(got) == 0 || fmt.Sprint(got[:1]) != fmt.Sprint(want) {
				t.Fatalf("problems %v, want first %v\n%+v", got, want, rep.Problems)
			}
		})
	}
}
