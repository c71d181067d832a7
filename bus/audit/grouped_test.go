package audit_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine/wire"
)

// grantedEvents are the events of a read approved by the policy, with a
// grant, as the engine records them: the grant's token is in the verdict.
func grantedEvents(tenant, id string) []gated.AuditEvent {
	evs := decisionEvents(tenant, id)
	verdict := evs[2]
	var v map[string]json.RawMessage
	if err := json.Unmarshal(verdict.Data, &v); err != nil {
		panic(err)
	}
	v["outcome"], v["approved"] = json.RawMessage(`"approved"`), json.RawMessage(`true`)
	v["grant"] = json.RawMessage(`"eyJhbGciOiJFZERTQSJ9.eyJnaWQiOiJnMSJ9.c2ln"`)
	verdict.Data, _ = json.Marshal(v)
	grant := verdict
	grant.Event, grant.At = gated.EventGrantIssued, verdict.At.Add(-time.Microsecond)
	grant.Data = []byte(`{"action":"host_restart_service","operator":"alice","delivery":1,"policy_eval_us":7,"exp":1795661606,"gid":"g1","kid":"k1","proposal_id":"` + id + `","tenant":"` + tenant + `"}`)
	verdict.At = grant.At
	// The verdict's common members leave out the action it names itself.
	return []gated.AuditEvent{evs[0], evs[1], grant, verdict}
}

// TestRecordKeepsEveryEvent writes the events of decisions as one record
// of version 3 and reads them back: every event as recorded (the grant's
// token aside, which the stored verdict keeps), each stored whole.
func TestRecordKeepsEveryEvent(t *testing.T) {
	tests := []struct {
		note string
		evs  []gated.AuditEvent
	}{
		{note: "a refusal", evs: decisionEvents("acme", "p1")},
		{note: "an approval with a grant", evs: grantedEvents("acme", "p2")},
		{note: "an event of gated itself", evs: []gated.AuditEvent{{V: 1, Event: gated.EventPolicyReloaded, Tenant: gated.UnknownTenant,
			At: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Data: []byte(`{"revision":"r2"}`)}}},
		{note: "a verdict that names no proposal", evs: []gated.AuditEvent{{V: 1, Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p3",
			At: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Data: []byte(`{"outcome":"rejected","policy":{"denies":[]}}`)}}},
		{note: "events whose common members differ", evs: func() []gated.AuditEvent {
			evs := decisionEvents("acme", "p4")
			evs[1].Data = bytes.Replace(evs[1].Data, []byte(`"delivery":1`), []byte(`"delivery":2`), 1)
			return evs
		}()},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			m, err := audit.NewRecordMsg(tc.evs, audit.Chain{N: 1}, testKey)
			if err != nil {
				t.Fatal(err)
			}
			if h := m.Header.Get(wire.AuditHashHeader); h != "" {
				t.Errorf("a version-3 record has hash header %s", h)
			}
			if mac := m.Header.Get(wire.AuditMACHeader); len(mac) != 43 {
				t.Errorf("MAC %q: want 43 base64url characters", mac)
			}
			if m.Subject != wire.AuditSubject(tc.evs[0].Tenant, tc.evs[len(tc.evs)-1].Event) {
				t.Errorf("subject %s: want the last event's", m.Subject)
			}
			if bytes.Contains(m.Data, []byte("eyJhbGci")) {
				t.Errorf("the grant's token is in the record: %s", m.Data)
			}
			if !bytes.HasPrefix(m.Data, []byte(`{"v":3,"tenant":"`+tc.evs[0].Tenant+`","chain":{"n":1,"prev":""},`)) {
				t.Errorf("body %s does not start with v, tenant and chain", m.Data)
			}
			rec, err := audit.DecodeRecord(m.Subject, m.Header, m.Data)
			if err != nil {
				t.Fatalf("%v\n%s", err, m.Data)
			}
			if rec.V != audit.RecordVersion || rec.Tenant != tc.evs[0].Tenant || rec.ProposalID != tc.evs[0].ProposalID {
				t.Errorf("envelope %+v", rec)
			}
			assertSameEvents(t, withoutTokens(tc.evs), rec.Events())
		})
	}
	// A decision's record, compressed, is smaller than its events'
	// records of version 1.
	evs := grantedEvents("acme", "p5")
	m, err := audit.NewCompressedRecordMsg(evs, audit.Chain{N: 1}, testKey)
	if err != nil {
		t.Fatal(err)
	}
	v1 := 0
	for _, ev := range evs {
		one, err := audit.NewMsg(ev, audit.Chain{N: 1}, testKey)
		if err != nil {
			t.Fatal(err)
		}
		v1 += len(one.Data)
	}
	t.Logf("a granted decision: %d bytes in one compressed record, %d in %d records of version 1", len(m.Data), v1, len(evs))
	if len(m.Data)*3 > v1*2 {
		t.Errorf("the record holds %d bytes, more than two thirds of version 1's %d", len(m.Data), v1)
	}
}

// TestDecodeRecordV3 refuses version-3 bodies that are not records.
func TestDecodeRecordV3(t *testing.T) {
	good, err := audit.NewRecordMsg(decisionEvents("acme", "p1"), audit.Chain{N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := string(good.Data)
	subject := good.Subject
	tests := []decodeCase{
		{note: "as written", subject: subject, body: body},
		{note: "no events", subject: subject, body: body[:strings.Index(body, `,"events":`)] + `,"events":[]}`, want: "no event"},
		{note: "subject names an earlier event", subject: "gated.audit.acme.proposal.received", body: body, want: "subject"},
		{note: "an unknown member", subject: subject, body: strings.Replace(body, `"v":3,`, `"v":3,"x":1,`, 1), want: "unknown field"},
		{note: "an event's unknown member", subject: subject, body: strings.Replace(body, `"v":1,`, `"v":1,"x":1,`, 1), want: "unknown field"},
		{note: "no chain", subject: subject, body: strings.Replace(body, `"chain":{"n":1,"prev":""},`, ``, 1), want: "no chain"},
		{note: "an event of another tenant", subject: subject, body: strings.Replace(body, `"event":"proposal.received","tenant":"acme"`, `"event":"proposal.received","tenant":"beta"`, 1), want: "tenant"},
		{note: "an event of another proposal", subject: subject, body: strings.Replace(body, `"proposal_id":"p1"`, `"proposal_id":"p2"`, 1), want: "another proposal"},
		{note: "an event of another version", subject: subject, body: strings.Replace(body, `{"v":1,`, `{"v":2,`, 1), want: "schema version"},
		{note: "an event whose data is no object", subject: "gated.audit.acme.verdict.decided",
			body: `{"v":3,"tenant":"acme","chain":{"n":1,"prev":""},"events":[{"v":1,"event":"verdict.decided","tenant":"acme","proposal_id":"p1","at":"2025-01-02T03:04:05Z","data":[1]}]}`, want: "event 1: data"},
		{note: "a hash header", subject: subject, body: body, hdr: nats.Header{wire.AuditHashHeader: []string{hexSHA256(good.Data)}}, want: wire.AuditHashHeader},
	}
	checkDecode(t, tests)
}

// TestDecodeRecordV2 refuses legacy version-2 bodies that are not records.
func TestDecodeRecordV2(t *testing.T) {
	good, err := audit.NewLegacyRecordMsg(decisionEvents("acme", "p1"), audit.Chain{N: 1}, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	body := string(good.Data)
	subject := good.Subject
	tests := []decodeCase{
		{note: "as written", subject: subject, body: body},
		{note: "no events", subject: subject, body: body[:strings.Index(body, `,"events":`)] + `,"events":[]}`, want: "no event"},
		{note: "subject names an earlier event", subject: "gated.audit.acme.proposal.received", body: body, want: "subject"},
		{note: "an unknown member", subject: subject, body: strings.Replace(body, `"v":2,`, `"v":2,"x":1,`, 1), want: "unknown field"},
		{note: "no chain", subject: subject, body: strings.Replace(body, `"chain":{"n":1,"prev":""},`, ``, 1), want: "no chain"},
		{note: "omit names what the head lacks", subject: subject, body: strings.Replace(body, `"omit":["policy_eval_us"]`, `"omit":["nothing"]`, 1), want: "omit"},
		{note: "a head member that is not one", subject: subject, body: strings.Replace(body, `"head":{"action"`, `"head":{"outcome"`, 1), want: "head member"},
		{note: "a grant on another event", subject: subject, body: strings.Replace(body, `"omit":["policy_eval_us"]`, `"omit":["policy_eval_us"],"grant":{"gid":"g","kid":"k","exp":1}`, 1), want: "grant"},
		{note: "a hash header", subject: subject, body: body, hdr: nats.Header{wire.AuditHashHeader: []string{hexSHA256(good.Data)}}, want: wire.AuditHashHeader},
	}
	checkDecode(t, tests)
}

// decodeCase is a record body DecodeRecord reads: want is empty when it
// is a record, and otherwise what the refusal names.
type decodeCase struct {
	note, subject, body, want string
	hdr                       nats.Header
}

// checkDecode reads each case's body with DecodeRecord.
func checkDecode(t *testing.T, tests []decodeCase) {
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			_, err := audit.DecodeRecord(tc.subject, tc.hdr, []byte(tc.body))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("err = %v, want a record", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want ErrInvalidRecord naming %q\n%s", err, tc.want, tc.body)
			}
		})
	}
}

// FuzzRecord writes events of one envelope as a record and reads them
// back: the same events, the grant's token aside; and the same as a
// legacy record of version 2.
func FuzzRecord(f *testing.F) {
	for _, evs := range [][]gated.AuditEvent{decisionEvents("acme", "p1"), grantedEvents("acme", "p2")} {
		var names, datas []string
		for _, ev := range evs {
			names, datas = append(names, ev.Event), append(datas, string(ev.Data))
		}
		f.Add("acme", evs[0].ProposalID, strings.Join(names, "\n"), strings.Join(datas, "\n"))
	}
	f.Add("_", "", "plugin.started", `{"pid":1}`)
	f.Add("acme", "p", "verdict.decided", `{"proposal_id":null}`)
	f.Fuzz(func(t *testing.T, tenant, id, names, datas string) {
		ns, ds := strings.Split(names, "\n"), strings.Split(datas, "\n")
		// JSON spells invalid UTF-8 as U+FFFD, in either version.
		if len(ns) != len(ds) || !utf8.ValidString(tenant+id+names+datas) {
			return
		}
		at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
		evs := make([]gated.AuditEvent, len(ns))
		for i := range ns {
			evs[i] = gated.AuditEvent{V: 1, Event: ns[i], Tenant: tenant, ProposalID: id, At: at.Add(time.Duration(i)), Instance: "i", Data: []byte(ds[i])}
		}
		m, err := audit.NewCompressedRecordMsg(evs, audit.Chain{N: 1}, testKey)
		if err != nil {
			return
		}
		want := make([]gated.AuditEvent, len(evs))
		for i, ev := range evs {
			ev.Data = normalized(t, ev.Data)
			want[i] = ev
		}
		rec, err := audit.DecodeRecord(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatalf("a record NewCompressedRecordMsg wrote does not decode: %v\n%x", err, m.Data)
		}
		assertSameEvents(t, withoutTokens(want), rec.Events())
		if m, err = audit.NewLegacyRecordMsg(evs, audit.Chain{N: 1}, testKey, false); err != nil {
			t.Fatalf("version 3 writes what version 2 does not: %v", err)
		}
		if rec, err = audit.DecodeRecord(m.Subject, m.Header, m.Data); err != nil {
			t.Fatalf("a legacy record does not decode: %v\n%s", err, m.Data)
		}
		// A grant.issued event folded into its verdict comes back with
		// the verdict's time, and the verdict without the grant's token.
		var body struct {
			Events []struct {
				Grant json.RawMessage `json:"grant"`
			} `json:"events"`
		}
		if err := json.Unmarshal(m.Data, &body); err != nil {
			t.Fatal(err)
		}
		for _, e := range body.Events {
			if e.Grant != nil {
				want = legacyFolded(want)
				break
			}
		}
		assertSameEvents(t, want, rec.Events())
	})
}

// normalized is data as a record holds it: absent when null, an object
// (anything else under "detail").
func normalized(t *testing.T, data []byte) []byte {
	t.Helper()
	d := bytes.TrimSpace(data)
	switch {
	case len(d) == 0 || string(d) == "null":
		return nil
	case d[0] != '{':
		out, err := json.Marshal(map[string]json.RawMessage{"detail": d})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	return d
}
