package console_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/gated/gated"

	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/console"
)

// TestEveryEventReadsBackOnAProposalsPage reads a sample of every event
// gated records onto a held proposal's page, as the console's proposal
// page reads each event of the proposal's records: every event is listed
// with its data unchanged, the policy decision gives the page the
// proposal the policy received, and the operator hold gives the held
// verdict its deadline, reason and rule.
func TestEveryEventReadsBackOnAProposalsPage(t *testing.T) {
	page := console.Proposal{Held: &console.Held{Kind: "action"}}
	names := gated.AuditEventNames()
	for i, name := range names {
		ev := bustest.AuditEventSample(t, name)
		page.AddEvent(uint64(i+1), time.Unix(1_800_000_000, 0), ev)
		got := page.Audit[len(page.Audit)-1]
		if got.Event != name || !bytes.Equal(got.Data, ev.Data) || got.Seq != uint64(i+1) {
			t.Errorf("%s: listed as %+v", name, got)
		}
	}
	if len(page.Audit) != len(names) {
		t.Errorf("%d events listed, want %d", len(page.Audit), len(names))
	}
	if len(page.Proposal) == 0 {
		t.Error("the policy.decided sample gave the page no proposal")
	}
	h := page.Held
	if h.Deadline == nil || h.Reason == "" || h.Rule == "" {
		t.Errorf("the operator.awaited sample gave the hold %+v, want its deadline, reason and rule", h)
	}
}
