package audit_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/notify"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/strictjson"
)

// TestEveryEventReadsBackThroughEveryReader writes one record of each
// event gated records, as the Writer stores it, and reads it back
// through every reader of the stream: the decoder gives the event
// exactly as written, verify finds nothing wrong, its data decodes into
// the event's declared type with no member unknown, and the reviewer
// metrics, the shadow summary and the notifier take it without error,
// and the status publisher gives each event that marks a stage a status
// the fleet reads back. The console's reading is held to the same list
// by console's TestEveryEventReadsBackOnAProposalsPage.
func TestEveryEventReadsBackThroughEveryReader(t *testing.T) {
	head := bustest.AuditHeadSample
	names := gated.AuditEventNames()
	if len(names) != len(bustest.AuditEventSamples) {
		t.Errorf("%d events declared, %d samples", len(names), len(bustest.AuditEventSamples))
	}
	var track audit.TrackRecord
	shadow := audit.NewShadowSummary(10)
	for i, name := range names {
		sample, ok := bustest.AuditEventSamples[name]
		if !ok {
			t.Errorf("event %s has no sample: read it back through every reader", name)
			continue
		}
		var own map[string]json.RawMessage
		if err := json.Unmarshal([]byte(sample), &own); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ev := bustest.AuditEventSample(t, name)
		m, err := audit.NewCompressedRecordMsg([]gated.AuditEvent{ev}, audit.Chain{N: 1}, testKey)
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
		into, _ := gated.NewAuditEventData(name)
		if _, note := into.(*gated.AuditNote); !note {
			var members map[string]json.RawMessage
			if err := json.Unmarshal(got.Data, &members); err != nil {
				t.Fatal(err)
			}
			for _, m := range head {
				if _, named := own[m[0]]; !named {
					delete(members, m[0])
				}
			}
			mine, _ := json.Marshal(members)
			if err := strictjson.Decode(mine, into); err != nil {
				t.Errorf("%s: data %s does not decode into %s: %v", name, mine, reflect.TypeOf(into), err)
			}
		}
		track.Add(r)
		shadow.Add(e)
		notify.Classify(r)
		// The status publisher: an event that marks a stage gives a
		// status event the fleet's decoder reads back.
		status, ok, err := engine.StatusJSON(got, r.Seq)
		if _, stage := engine.StatusStageOf(name); err != nil || ok != stage {
			t.Errorf("%s: StatusJSON = ok %v, %v; the event marks a stage: %v", name, ok, err, stage)
		} else if ok {
			if st, err := gated.DecodeStatus(status); err != nil || st.ID != got.ProposalID {
				t.Errorf("%s: status %s reads back as %+v, %v", name, status, st, err)
			}
		}
	}
	if shadow.Invalid != 0 || shadow.Decisions != 1 || shadow.Differences != 1 {
		t.Errorf("the shadow summary read %d decisions, %d differences, %d invalid (%s)", shadow.Decisions, shadow.Differences, shadow.Invalid, shadow.FirstInvalid)
	}
	if len(track.Reviewers()) != 1 {
		t.Errorf("the reviewer metrics read %d reviewers, want 1: %+v", len(track.Reviewers()), track.Reviewers())
	}
}
