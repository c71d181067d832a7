package engine_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// TestStatusJSON derives the status of each audit event a proposal's
// trail records, as the status publisher does, and reads it back as a
// client does.
func TestStatusJSON(t *testing.T) {
	at := time.Date(2026, 11, 25, 21, 0, 0, 0, time.UTC)
	deadline := at.Add(time.Minute)
	verdict := `{"operator":"alice","delivery":1,"policy_eval_us":12,"v":1,"proposal_id":"p1","tenant":"acme","action":"x","kind":"action","outcome":"rejected","approved":false,"stage":"policy","reason":"no","decided_at":"2026-11-25T21:00:00Z","latency_ms":1,"audit_seq":0}`
	ev := func(name, data string) gated.AuditEvent {
		return gated.AuditEvent{V: 1, Event: name, Tenant: "acme", ProposalID: "p1", At: at, Data: json.RawMessage(data)}
	}
	tests := []struct {
		note  string
		ev    gated.AuditEvent
		seq   uint64
		want  *gated.Status // nil: no status
		isErr bool
	}{
		{note: "received", ev: ev(gated.EventReceived, `{"bytes":2}`), want: &gated.Status{Stage: gated.StatusReceived}},
		{note: "policy decided", ev: ev(gated.EventPolicyDecided, `{"denies":[]}`), want: &gated.Status{Stage: gated.StatusPolicyDecided}},
		{note: "review started", ev: ev(gated.EventReviewStarted, `{"persona":"reviewer","plugin":"sop","deadline":"2026-11-25T21:01:00Z"}`),
			want: &gated.Status{Stage: gated.StatusReviewStarted, Reviewer: "reviewer", Deadline: &deadline}},
		{note: "operator awaited", ev: ev(gated.EventOperatorAwaited, `{"deadline":"2026-11-25T22:01:00+01:00","reason":"tenant_wide","rule":"operator_required"}`),
			want: &gated.Status{Stage: gated.StatusAwaitingOperator, Reason: "tenant_wide", Deadline: &deadline}},
		{note: "verdict", ev: ev(gated.EventVerdict, verdict), seq: 77, want: &gated.Status{Stage: gated.StatusDecided}},
		{note: "review finished marks no stage", ev: ev(gated.EventReviewDone, `{}`)},
		{note: "tool call marks no stage", ev: ev(gated.EventToolCalled, `{}`)},
		{note: "gated's own event", ev: gated.AuditEvent{Event: gated.EventVerdict, Tenant: gated.UnknownTenant, ProposalID: "p1", Data: json.RawMessage(verdict)}},
		{note: "no proposal id", ev: gated.AuditEvent{Event: gated.EventReceived, Tenant: "acme"}},
		{note: "an id that is not a subject token", ev: gated.AuditEvent{Event: gated.EventReceived, Tenant: "acme", ProposalID: "p1.>"}},
		{note: "a tenant that is not a subject token", ev: gated.AuditEvent{Event: gated.EventReceived, Tenant: "acme.*", ProposalID: "p1"}},
		{note: "verdict whose strings hold quotes and keys", seq: 78, want: &gated.Status{Stage: gated.StatusDecided},
			ev: ev(gated.EventVerdict, `{"operator":"x\",\"v\":2,\"","delivery":3,"v":1,"proposal_id":"p1","tenant":"acme","outcome":"rejected","approved":false,"reason":"\"v\":1","audit_seq":0}`)},
		{note: "review started with bad data", ev: ev(gated.EventReviewStarted, `{"deadline":7}`), isErr: true},
		{note: "review started naming no persona", ev: ev(gated.EventReviewStarted, `{"plugin":"sop"}`), isErr: true},
		{note: "operator awaited naming no deadline", ev: ev(gated.EventOperatorAwaited, `{"reason":"x"}`), isErr: true},
		{note: "verdict with bad data", ev: ev(gated.EventVerdict, `[1]`), isErr: true},
		{note: "verdict without audit_seq", ev: ev(gated.EventVerdict, `{"operator":"alice","v":1,"proposal_id":"p1","tenant":"acme"}`), isErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			data, ok, err := engine.StatusJSON(tc.ev, tc.seq)
			if tc.isErr {
				if err == nil || ok {
					t.Fatalf("got %s, %v, %v; want an error", data, ok, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if ok || data != nil {
					t.Fatalf("got %s; want no status", data)
				}
				return
			}
			// What gated publishes, its clients read strictly.
			st, err := gated.DecodeStatus(data)
			if err != nil {
				t.Fatalf("decoding %s: %v", data, err)
			}
			if !ok || st.V != 1 || st.Tenant != "acme" || st.ID != "p1" || !st.At.Equal(at) || st.Stage != tc.want.Stage ||
				st.Reviewer != tc.want.Reviewer || st.Reason != tc.want.Reason {
				t.Fatalf("got %+v, want %+v", st, tc.want)
			}
			if (st.Deadline == nil) != (tc.want.Deadline == nil) || (st.Deadline != nil && !st.Deadline.Equal(*tc.want.Deadline)) {
				t.Fatalf("deadline %v, want %v", st.Deadline, tc.want.Deadline)
			}
			if tc.want.Stage == gated.StatusDecided {
				if st.Verdict == nil || st.Verdict.Outcome != gated.OutcomeRejected || st.Verdict.AuditSeq != tc.seq || st.Verdict.ProposalID != "p1" {
					t.Fatalf("verdict %+v", st.Verdict)
				}
			}
		})
	}
}

// FuzzDecodeStatus feeds the strict status decoder arbitrary bytes,
// seeded with the shared vectors: it never panics, refuses with a
// *StatusError, and what it accepts encodes to an event it accepts again.
func FuzzDecodeStatus(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("..", "test", "vectors", "statuses.json"))
	if err != nil {
		f.Fatal(err)
	}
	var vs struct {
		Cases []struct {
			Message string `json:"message"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &vs); err != nil {
		f.Fatal(err)
	}
	for _, c := range vs.Cases {
		f.Add([]byte(c.Message))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := gated.DecodeStatus(data)
		if err != nil {
			var se *gated.StatusError
			if !errors.As(err, &se) || !errors.Is(err, gated.ErrBadStatus) || st != nil {
				t.Fatalf("error %v (%T) with status %v", err, err, st)
			}
			return
		}
		again, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		back, err := gated.DecodeStatus(again)
		if err != nil {
			t.Fatalf("accepted %q, refused its encoding %s: %v", data, again, err)
		}
		if back.Stage != st.Stage || back.Tenant != st.Tenant || back.ID != st.ID || back.Reviewer != st.Reviewer || back.Reason != st.Reason {
			t.Fatalf("%+v became %+v", st, back)
		}
	})
}
