package audit_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine"
)

// verifyKeyed verifies the stream with testKey twice: with the verdict
// check, which decodes every record in full, and without it, which reads
// a record whose MAC verifies only for its tenant, chain and last event.
// The two must find the same problems in the stream, records and heads.
func verifyKeyed(t *testing.T, js jetstream.JetStream) *audit.Report {
	t.Helper()
	full := verify(t, js, audit.VerifyOptions{Keys: [][]byte{testKey}})
	quick := verify(t, js, audit.VerifyOptions{Keys: [][]byte{testKey}, SkipVerdicts: true})
	if fmt.Sprint(quick.Problems) != fmt.Sprint(full.Problems) || quick.Messages != full.Messages ||
		quick.Records != full.Records || fmt.Sprint(quick.Heads) != fmt.Sprint(full.Heads) {
		t.Fatalf("without the verdict check: %d records, problems %+v, heads %+v;\nwith it: %d records, problems %+v, heads %+v",
			quick.Records, quick.Problems, quick.Heads, full.Records, full.Problems, full.Heads)
	}
	return full
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
			if m.Subject != "gated.audit.acme."+engine.EventVerdict {
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
