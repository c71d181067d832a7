package audit_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/internal/natstest"
)

// TestFindVerdict: the verdict the trail answers with is the one the key
// held: not one that lost the race to the store, the later of a held
// action's verdicts, never one of several proposals under the id.
func TestFindVerdict(t *testing.T) {
	_, js := setupAudit(t)
	a := natstest.AuditWriter(t, js, audit.Config{Key: testKey})
	at := time.Now().UTC()
	seal := func(event, id string, data any) uint64 {
		t.Helper()
		doc, err := json.Marshal(data)
		if err != nil {
			t.Fatal(err)
		}
		seq, err := a.Trail().Seal(t.Context(), gated.AuditEvent{V: gated.SchemaVersion, Event: event, Tenant: "acme", ProposalID: id, At: at, Data: doc})
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	verdict := func(id, digest string, o gated.Outcome) *gated.Verdict {
		return &gated.Verdict{V: gated.SchemaVersion, ProposalID: id, Tenant: "acme", Action: "host_list_services", Kind: gated.KindAction,
			Outcome: o, Approved: o == gated.OutcomeApproved, Stage: gated.StagePolicy, DecidedAt: at, ProposalSHA256: digest}
	}
	const d1, d2 = "1111111111111111111111111111111111111111111111111111111111111111", "2222222222222222222222222222222222222222222222222222222222222222"

	// A race of two copies: the one sealed second was stored; the first,
	// superseded, is named by the replay that answered its delivery.
	lost := seal(gated.EventVerdict, "p-race", verdict("p-race", d1, gated.OutcomeRejected))
	won := seal(gated.EventVerdict, "p-race", verdict("p-race", d1, gated.OutcomeApproved))
	seal(gated.EventReplayed, "p-race", map[string]any{"audit_seq": won, "outcome": "approved", "superseded_seq": lost})
	// A race the first sealed won: the later one is superseded.
	first := seal(gated.EventVerdict, "p-race2", verdict("p-race2", d1, gated.OutcomeApproved))
	second := seal(gated.EventVerdict, "p-race2", verdict("p-race2", d1, gated.OutcomeRejected))
	seal(gated.EventReplayed, "p-race2", map[string]any{"audit_seq": first, "outcome": "approved", "superseded_seq": second})
	// A held action and its operator's decision replacing it.
	seal(gated.EventVerdict, "p-held", verdict("p-held", d1, gated.OutcomeRejected))
	decided := seal(gated.EventVerdict, "p-held", verdict("p-held", d1, gated.OutcomeApproved))
	// Another proposal under a taken id, answered invalid and not stored.
	seal(gated.EventVerdict, "p-taken", verdict("p-taken", d1, gated.OutcomeApproved))
	seal(gated.EventVerdict, "p-taken", verdict("p-taken", d2, gated.OutcomeInvalid))

	keys := [][]byte{testKey}
	for id, want := range map[string]uint64{"p-race": won, "p-race2": first, "p-held": decided} {
		f, err := audit.FindVerdict(t.Context(), js, "acme", id, time.Time{}, keys)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if f.Seq != want || f.Verdict.AuditSeq != want || f.Verdict.ProposalID != id {
			t.Errorf("%s: the record at %d (verdict of %s, audit_seq %d), want the one at %d", id, f.Seq, f.Verdict.ProposalID, f.Verdict.AuditSeq, want)
		}
	}
	if _, err := audit.FindVerdict(t.Context(), js, "acme", "p-taken", time.Time{}, keys); !errors.Is(err, audit.ErrTrailAmbiguous) {
		t.Errorf("two proposals under one id: %v, want ErrTrailAmbiguous", err)
	}
	if _, err := audit.FindVerdict(t.Context(), js, "acme", "p-none", time.Time{}, keys); !errors.Is(err, gated.ErrNotFound) {
		t.Errorf("no record: %v, want ErrNotFound", err)
	}
	if _, err := audit.FindVerdict(t.Context(), js, "beta", "p-held", time.Time{}, keys); !errors.Is(err, gated.ErrNotFound) {
		t.Errorf("another tenant: %v, want ErrNotFound", err)
	}
	if _, err := audit.FindVerdict(t.Context(), js, "acme", "p-held", time.Time{}, nil); err == nil {
		t.Error("without keys the trail was read")
	}
	var trail *audit.TrailError
	if _, err := audit.FindVerdict(t.Context(), js, "acme", "p-held", time.Time{}, [][]byte{[]byte("another key, 32 bytes long......")}); !errors.As(err, &trail) {
		t.Errorf("under a key that did not MAC the records: %v, want a TrailError", err)
	}
}
