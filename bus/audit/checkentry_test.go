package audit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine/wire"
)

func TestCheckEntry(t *testing.T) {
	key := []byte("check-entry-key-0123456789abcdef-0123")
	other := []byte("another-key-0123456789abcdef-0123456")
	ev := gated.AuditEvent{V: gated.SchemaVersion, Event: gated.EventReceived, Tenant: "acme", ProposalID: "p1",
		At: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	entry := func(t *testing.T, m *nats.Msg) audit.Entry {
		t.Helper()
		e := audit.Entry{Seq: 9, Subject: m.Subject, Header: m.Header, Data: m.Data}
		e.Record, e.Err = audit.DecodeRecord(m.Subject, m.Header, m.Data)
		return e
	}
	msg := func(t *testing.T, k []byte) *nats.Msg {
		t.Helper()
		m, err := audit.NewMsg(ev, audit.Chain{N: 1}, k)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	cases := []struct {
		note   string
		build  func(t *testing.T) audit.Entry
		key    []byte
		kind   audit.ProblemKind // "" for none
		detail string
	}{
		{note: "valid, MACed", key: key, build: func(t *testing.T) audit.Entry { return entry(t, msg(t, key)) }},
		{note: "valid, no key to check", build: func(t *testing.T) audit.Entry { return entry(t, msg(t, nil)) }},
		{note: "not a record", key: key, kind: audit.ProblemForged, detail: "not a valid gated audit record",
			build: func(t *testing.T) audit.Entry {
				m := nats.NewMsg(wire.AuditSubject("acme", "verdict.decided"))
				m.Data = []byte(`{"outcome":"approved"}`)
				return entry(t, m)
			}},
		{note: "body changed", key: key, kind: audit.ProblemModified, detail: "does not match its",
			build: func(t *testing.T) audit.Entry {
				m := msg(t, key)
				m.Data = []byte(strings.Replace(string(m.Data), `"p1"`, `"p2"`, 1))
				return entry(t, m)
			}},
		{note: "a member twice in an event's data", kind: audit.ProblemForged, detail: `names the member "operator" twice`,
			build: func(t *testing.T) audit.Entry {
				dup := ev
				dup.Event, dup.Data = gated.EventOperatorDecided, []byte(`{"operator":"u-1042","decision":"approve"}`)
				m, err := audit.NewMsg(dup, audit.Chain{N: 1}, nil)
				if err != nil {
					t.Fatal(err)
				}
				m.Data = []byte(strings.Replace(string(m.Data), `"decision"`, `"operator":"alice","decision"`, 1))
				return entry(t, m)
			}},
		{note: "a member twice in an event of a version-3 record", kind: audit.ProblemForged, detail: `names the member "operator" twice`,
			build: func(t *testing.T) audit.Entry {
				dup := ev
				dup.Event, dup.Data = gated.EventOperatorDecided, []byte(`{"operator":"u-1042","decision":"approve"}`)
				m, err := audit.NewRecordMsg([]gated.AuditEvent{dup}, audit.Chain{N: 1}, nil)
				if err != nil {
					t.Fatal(err)
				}
				m.Data = []byte(strings.Replace(string(m.Data), `"decision"`, `"operator":"alice","decision"`, 1))
				return entry(t, m)
			}},
		{note: "a member twice in a nested object", kind: audit.ProblemForged, detail: `names the member "id" twice`,
			build: func(t *testing.T) audit.Entry {
				m := msg(t, nil)
				m.Data = []byte(strings.Replace(string(m.Data), `"at"`, `"data":{"x":[{"id":1,"\u0069d":2}]},"at"`, 1))
				return entry(t, m)
			}},
		{note: "no MAC", key: key, kind: audit.ProblemForged, detail: "no MAC",
			build: func(t *testing.T) audit.Entry { return entry(t, msg(t, nil)) }},
		{note: "another key", key: key, kind: audit.ProblemForged, detail: "not gated's key",
			build: func(t *testing.T) audit.Entry { return entry(t, msg(t, other)) }},
		{note: "MAC altered", key: key, kind: audit.ProblemForged, detail: "the MAC does not match",
			build: func(t *testing.T) audit.Entry {
				m := msg(t, key)
				mac := []byte(m.Header.Get(wire.AuditMACHeader))
				mac[0] ^= 1
				m.Header.Set(wire.AuditMACHeader, string(mac))
				return entry(t, m)
			}},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			p := audit.CheckEntry(tc.build(t), tc.key)
			if tc.kind == "" {
				if p != nil {
					t.Fatalf("problem %+v, want none", p)
				}
				return
			}
			if p == nil || p.Kind != tc.kind || !strings.Contains(p.Detail, tc.detail) || p.Seq != 9 || p.Tenant != "acme" {
				t.Fatalf("problem %+v, want %s saying %q at seq 9 of acme", p, tc.kind, tc.detail)
			}
		})
	}
}
