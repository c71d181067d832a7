package audit_test

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
)

func shadowEntry(t *testing.T, seq uint64, event, tenant, id string, data any) audit.Entry {
	t.Helper()
	raw, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	return audit.Entry{Seq: seq, Record: audit.NewRecord(seq, gated.AuditEvent{V: 1, Event: event, Tenant: tenant, ProposalID: id, Data: raw})}
}

func differs(action, live, shadow string, kinds []string, rules ...string) map[string]any {
	denies := []gated.Deny{}
	for _, r := range rules {
		denies = append(denies, gated.Deny{Rule: r, Message: r})
	}
	return map[string]any{"action": action, "delivery": 1,
		"live":   map[string]any{"outcome": live, "denies": []gated.Deny{}},
		"shadow": map[string]any{"outcome": shadow, "denies": denies},
		"kinds":  kinds, "rules": rules}
}

// TestShadowSummary sums a range of records: decisions come from
// policy.decided records naming a shadow, differences from
// policy.shadow_differs, and records that are not valid are counted, never
// skipped in silence.
func TestShadowSummary(t *testing.T) {
	decided := map[string]any{"action": "db_backup", "shadow_revision": "sha256:cand"}
	entries := []audit.Entry{
		shadowEntry(t, 1, gated.EventPolicyDecided, "acme", "p1", decided),
		shadowEntry(t, 2, gated.EventPolicyDecided, "acme", "p2", decided),
		shadowEntry(t, 3, gated.EventPolicyShadowDiffers, "acme", "p2", differs("db_backup", "approved", "rejected", []string{"outcome"}, "backup_frozen")),
		shadowEntry(t, 4, gated.EventPolicyDecided, "beta", "p3", map[string]any{"action": "db_backup"}), // no shadow then
		shadowEntry(t, 5, gated.EventPolicyDecided, "beta", "p4", decided),
		shadowEntry(t, 6, gated.EventPolicyShadowDiffers, "beta", "p4", differs("db_drop", "review", "error", []string{"error", "outcome"})),
		shadowEntry(t, 7, gated.EventPolicyShadowDiffers, "beta", "p5", map[string]any{"kinds": []string{"outcome"}}), // no outcomes
		{Seq: 8, Subject: "gated.audit.acme.verdict.decided", Err: audit.ErrInvalidRecord},
	}
	s := audit.NewShadowSummary(1)
	for _, e := range entries {
		s.Add(e)
	}
	if s.Decisions != 3 || s.Differences != 2 || s.ShadowRevisions["sha256:cand"] != 3 {
		t.Errorf("decisions %d differences %d revisions %v; want 3, 2, 3 under sha256:cand", s.Decisions, s.Differences, s.ShadowRevisions)
	}
	if want := 1.0 / 3; math.Abs(s.Agreement-want) > 1e-9 {
		t.Errorf("agreement %v, want %v", s.Agreement, want)
	}
	if s.ByKind["outcome"] != 2 || s.ByKind["error"] != 1 || s.ByRule["backup_frozen"] != 1 || s.ByTenant["acme"] != 1 || s.ByTenant["beta"] != 1 ||
		s.ByAction["db_drop"] != 1 || s.ByOutcome["approved -> rejected"] != 1 || s.ByOutcome["review -> error"] != 1 {
		t.Errorf("counts %+v", s)
	}
	if len(s.First) != 1 || s.First[0].ProposalID != "p2" || s.First[0].Seq != 3 || s.First[0].Tenant != "acme" {
		t.Errorf("first %+v, want only p2 at seq 3", s.First)
	}
	if s.Invalid != 2 || s.FirstInvalid == "" {
		t.Errorf("invalid %d (%q), want 2", s.Invalid, s.FirstInvalid)
	}
}

func TestDecodeShadowDiffers(t *testing.T) {
	cases := []struct {
		note string
		data string
		ok   bool
	}{
		{note: "a difference", data: `{"action":"a","live":{"outcome":"approved","denies":[]},"shadow":{"outcome":"rejected","denies":[{"rule":"r","message":"m"}]},"kinds":["outcome"],"rules":["r"]}`, ok: true},
		{note: "unknown member", data: `{"live":{"outcome":"approved"},"shadow":{"outcome":"rejected"},"kinds":["outcome"],"extra":1}`},
		{note: "unknown kind", data: `{"live":{"outcome":"approved"},"shadow":{"outcome":"rejected"},"kinds":["mood"]}`},
		{note: "no kinds", data: `{"live":{"outcome":"approved"},"shadow":{"outcome":"approved"},"kinds":[]}`},
		{note: "no outcome", data: `{"live":{},"shadow":{"outcome":"approved"},"kinds":["outcome"]}`},
		{note: "two values", data: `{"live":{"outcome":"a"},"shadow":{"outcome":"b"},"kinds":["outcome"]} {}`},
		{note: "not JSON", data: `live`},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			_, err := audit.DecodeShadowDiffers([]byte(tc.data))
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, audit.ErrInvalidRecord) {
				t.Errorf("err %v does not wrap ErrInvalidRecord", err)
			}
		})
	}
}

// FuzzDecodeShadowDiffers: any data is decoded or refused with
// ErrInvalidRecord, and what is decoded has both outcomes and known kinds.
func FuzzDecodeShadowDiffers(f *testing.F) {
	f.Add([]byte(`{"action":"a","live":{"outcome":"approved","denies":[]},"shadow":{"outcome":"rejected","denies":[]},"kinds":["outcome"]}`))
	f.Add([]byte(`{"live":{"outcome":"error","error":"x"},"shadow":{"outcome":"error","error":"y"},"kinds":["error"]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := audit.DecodeShadowDiffers(data)
		if err != nil {
			if !errors.Is(err, audit.ErrInvalidRecord) {
				t.Fatalf("error %v does not wrap ErrInvalidRecord", err)
			}
			return
		}
		if d.Live.Outcome == "" || d.Shadow.Outcome == "" || !d.Differs() {
			t.Fatalf("decoded %+v without outcomes or kinds", d)
		}
		for _, k := range d.Kinds {
			switch k {
			case gated.ShadowDiffError, gated.ShadowDiffOutcome, gated.ShadowDiffDenies, gated.ShadowDiffRoute:
			default:
				t.Fatalf("decoded unknown kind %q", k)
			}
		}
	})
}
