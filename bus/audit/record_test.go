package audit_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine/wire"
)

// testKey is an audit key for tests: 32 bytes.
var testKey = []byte("0123456789abcdef0123456789abcdef")

func hexSHA256(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// auditMsg builds a record's message or fails the test.
func auditMsg(t testing.TB, ev gated.AuditEvent, c audit.Chain, key []byte) *nats.Msg {
	t.Helper()
	m, err := audit.NewMsg(ev, c, key)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func verdictEvent(tenant, id string) gated.AuditEvent {
	return gated.AuditEvent{
		V: gated.SchemaVersion, Event: gated.EventVerdict, Tenant: tenant, ProposalID: id,
		At: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Instance: "test",
		Data: []byte(`{"action":"host_restart_service","operator":"alice","outcome":"rejected"}`),
	}
}

func TestDecodeAuditRecord(t *testing.T) {
	good := auditMsg(t, verdictEvent("acme", "p1"), audit.Chain{N: 1}, testKey)
	rec, err := audit.DecodeRecord(good.Subject, good.Header, good.Data)
	if err != nil {
		t.Fatalf("a record NewMsg built: %v", err)
	}
	if rec.ProposalID != "p1" || rec.Last().ProposalID != "p1" || rec.Chain.N != 1 || rec.Hash != hexSHA256(good.Data) || rec.KeyID != audit.KeyID(testKey) || rec.MAC == "" {
		t.Errorf("decoded %+v", rec)
	}
	if !strings.HasSuffix(string(good.Data), `,"chain":{"n":1,"prev":""}}`) {
		t.Errorf("body %s does not end with its chain member", good.Data)
	}
	second := auditMsg(t, verdictEvent("acme", "p2"), audit.Chain{N: 2, Prev: hexSHA256(good.Data)}, nil)
	if rec, err := audit.DecodeRecord(second.Subject, second.Header, second.Data); err != nil || rec.MAC != "" || rec.Chain.Prev != hexSHA256(good.Data) {
		t.Errorf("an unkeyed record n=2: %+v, %v", rec, err)
	}

	hdr := func(kv ...string) nats.Header {
		h := nats.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	hash := wire.AuditHashHeader
	zeros := strings.Repeat("0", 64)
	body := `{"v":1,"event":"verdict.decided","tenant":"acme","at":"2025-01-02T03:04:05Z","chain":{"n":1,"prev":""}}`
	subject := "gated.audit.acme.verdict.decided"
	tests := []struct {
		note    string
		subject string
		hdr     nats.Header
		body    string
		want    string
	}{
		{note: "minimal", subject: subject, hdr: hdr(hash, zeros), body: body},
		{note: "not JSON", subject: subject, hdr: hdr(hash, zeros), body: "hello", want: "body"},
		{note: "array", subject: subject, hdr: hdr(hash, zeros), body: "[1]", want: "body"},
		{note: "trailing data", subject: subject, hdr: hdr(hash, zeros), body: body + "{}", want: "after the JSON object"},
		{note: "trailing close brace", subject: subject, hdr: hdr(hash, zeros), body: body + "}", want: "after the JSON object"},
		{note: "trailing close bracket", subject: subject, hdr: hdr(hash, zeros), body: body + "]", want: "after the JSON object"},
		{note: "unknown member", subject: subject, hdr: hdr(hash, zeros), body: strings.Replace(body, `"v":1`, `"v":1,"x":2`, 1), want: "unknown field"},
		{note: "schema version", subject: subject, hdr: hdr(hash, zeros), body: strings.Replace(body, `"v":1`, `"v":4`, 1), want: "schema version"},
		{note: "a version-1 body labelled version 2", subject: subject, body: strings.Replace(body, `"v":1`, `"v":2`, 1), want: "unknown field"},
		{note: "bad tenant", subject: "gated.audit.ACME.verdict.decided", hdr: hdr(hash, zeros), body: strings.Replace(body, `"acme"`, `"ACME"`, 1), want: "tenant"},
		{note: "bad event", subject: "gated.audit.acme.verdict..decided", hdr: hdr(hash, zeros), body: strings.Replace(body, `verdict.decided`, `verdict..decided`, 1), want: "event"},
		{note: "subject names another tenant", subject: "gated.audit.beta.verdict.decided", hdr: hdr(hash, zeros), body: body, want: "subject"},
		{note: "subject names another event", subject: "gated.audit.acme.proposal.received", hdr: hdr(hash, zeros), body: body, want: "subject"},
		{note: "data not an object", subject: subject, hdr: hdr(hash, zeros), body: strings.Replace(body, `"at"`, `"data":[1],"at"`, 1), want: "data"},
		{note: "no chain", subject: subject, hdr: hdr(hash, zeros), body: strings.Replace(body, `,"chain":{"n":1,"prev":""}`, "", 1), want: "no chain"},
		{note: "chain n 0", subject: subject, hdr: hdr(hash, zeros), body: strings.Replace(body, `"n":1`, `"n":0`, 1), want: "n is 0"},
		{note: "n 2 without prev", subject: subject, hdr: hdr(hash, zeros), body: strings.Replace(body, `"n":1`, `"n":2`, 1), want: "links to no record"},
		{note: "prev not hex", subject: subject, hdr: hdr(hash, zeros), body: strings.Replace(body, `"prev":""`, `"prev":"xyz"`, 1), want: "prev"},
		{note: "no hash header", subject: subject, hdr: hdr(), body: body, want: "no " + hash},
		{note: "hash not hex", subject: subject, hdr: hdr(hash, "abc"), body: body, want: "hex"},
		{note: "MAC without key id", subject: subject, hdr: hdr(hash, zeros, wire.AuditMACHeader, zeros), body: body, want: "go together"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			_, err := audit.DecodeRecord(tc.subject, tc.hdr, []byte(tc.body))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("err = %v, want a record", err)
			case tc.want != "" && (!errors.Is(err, audit.ErrInvalidRecord) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want ErrInvalidRecord naming %q", err, tc.want)
			}
		})
	}
}

func TestParseAuditKey(t *testing.T) {
	raw := []byte(strings.Repeat("k", 32))
	hexKey := hex.EncodeToString(raw)
	tests := []struct {
		note string
		in   string
		want []byte
		err  bool
	}{
		{note: "raw", in: string(raw), want: raw},
		{note: "hex with newline", in: hexKey + "\n", want: raw},
		{note: "too short", in: "short", err: true},
		{note: "short hex is raw and too short", in: hex.EncodeToString(raw[:8]), err: true},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			got, err := audit.ParseKey([]byte(tc.in))
			if (err != nil) != tc.err || (!tc.err && string(got) != string(tc.want)) {
				t.Fatalf("ParseKey = %q, %v", got, err)
			}
		})
	}
}

// FuzzDecodeRecord feeds the decoder arbitrary messages: it must
// never panic, and what it accepts must be a record that encodes again.
func FuzzDecodeRecord(f *testing.F) {
	first, _ := audit.NewMsg(verdictEvent("acme", "p1"), audit.Chain{N: 1}, testKey)
	second, _ := audit.NewMsg(gated.AuditEvent{V: 1, Event: gated.EventPolicyReloaded, Tenant: gated.UnknownTenant},
		audit.Chain{N: 2, Prev: hexSHA256(first.Data)}, nil)
	for _, m := range []*nats.Msg{first, second} {
		f.Add(m.Subject, m.Header.Get(wire.AuditHashHeader), m.Header.Get(wire.AuditMACHeader), m.Header.Get(wire.AuditKeyHeader), m.Data)
	}
	f.Add("gated.audit.acme.x", "", "", "", []byte(`{"v":1}`))
	f.Add("gated.audit.acme.x", "zz", "", "", []byte(`not json`))
	z, _ := audit.NewCompressedRecordMsg([]gated.AuditEvent{verdictEvent("acme", "p2")}, audit.Chain{N: 3, Prev: hexSHA256(second.Data)}, testKey)
	f.Add(z.Subject, "", z.Header.Get(wire.AuditMACHeader), z.Header.Get(wire.AuditKeyHeader), z.Data)
	f.Add(z.Subject, "", "", "", zstdFrame([]byte(`{"v":1,"event":"x","tenant":"acme","at":"2025-01-02T03:04:05Z","chain":{"n":1,"prev":""}}`)))
	f.Fuzz(func(t *testing.T, subject, hash, mac, keyID string, body []byte) {
		hdr := nats.Header{}
		for k, v := range map[string]string{wire.AuditHashHeader: hash, wire.AuditMACHeader: mac, wire.AuditKeyHeader: keyID} {
			if v != "" {
				hdr.Set(k, v)
			}
		}
		rec, err := audit.DecodeRecord(subject, hdr, body)
		if err != nil {
			if !errors.Is(err, audit.ErrInvalidRecord) {
				t.Fatalf("error %v does not wrap ErrInvalidRecord", err)
			}
			return
		}
		evs := rec.Events()
		if len(evs) == 0 || rec.Subject != wire.AuditSubject(rec.Tenant, rec.Last().Event) || rec.Chain.N == 0 || (rec.V == 1) == (rec.Hash == "") {
			t.Fatalf("accepted an inconsistent record: %+v", rec)
		}
		for _, ev := range evs {
			if ev.Tenant != rec.Tenant || ev.ProposalID != rec.ProposalID || (len(ev.Data) > 0 && !json.Valid(ev.Data)) {
				t.Fatalf("accepted a record whose event %s is not the envelope's, or its data not JSON: %+v", ev.Event, ev)
			}
		}
		var again *nats.Msg
		if rec.V == 1 {
			again, err = audit.NewMsg(evs[0], rec.Chain, nil)
		} else {
			again, err = audit.NewRecordMsg(evs, rec.Chain, nil)
		}
		if err != nil {
			t.Fatalf("an accepted record does not encode again: %v", err)
		}
		back, err := audit.DecodeRecord(again.Subject, again.Header, again.Data)
		if err != nil {
			t.Fatalf("a re-encoded record does not decode: %v\n%s", err, again.Data)
		}
		if rec.V == audit.RecordVersion {
			assertSameEvents(t, withoutTokens(evs), back.Events())
		}
	})
}

// FuzzParseKey feeds ParseKey arbitrary key files: what it
// accepts is at least MinKeyLen bytes, and a key written in hex reads
// back as itself.
func FuzzParseKey(f *testing.F) {
	f.Add(testKey)
	f.Add([]byte(hex.EncodeToString(testKey) + "\n"))
	f.Add([]byte("  " + strings.ToUpper(hex.EncodeToString(testKey)) + "\r\n"))
	f.Add([]byte(hex.EncodeToString(testKey)[:62]))
	f.Add([]byte(strings.Repeat("z", 64)))
	f.Add([]byte("short"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		key, err := audit.ParseKey(data)
		if err != nil {
			return
		}
		if len(key) < audit.MinKeyLen {
			t.Fatalf("accepted a key of %d bytes from %q", len(key), data)
		}
		again, err := audit.ParseKey([]byte(hex.EncodeToString(key) + "\n"))
		if err != nil || string(again) != string(key) {
			t.Fatalf("key %x written in hex reads back as %x, %v", key, again, err)
		}
	})
}

// withoutTokens is evs as a record gives them back: a verdict
// that follows its grant.issued event keeps the grant's id, not its token.
func withoutTokens(evs []gated.AuditEvent) []gated.AuditEvent {
	out := make([]gated.AuditEvent, len(evs))
	copy(out, evs)
	for i := 1; i < len(out); i++ {
		if out[i].Event != gated.EventVerdict || out[i-1].Event != gated.EventGrantIssued {
			continue
		}
		var d map[string]json.RawMessage
		if json.Unmarshal(out[i].Data, &d) == nil {
			delete(d, "grant")
			out[i].Data, _ = json.Marshal(d)
		}
	}
	return out
}

// legacyFolded is withoutTokens with the time a legacy record of version
// 2 gives a grant.issued event it folded into its verdict: the verdict's.
func legacyFolded(evs []gated.AuditEvent) []gated.AuditEvent {
	out := withoutTokens(evs)
	for i := 1; i < len(out); i++ {
		if out[i].Event == gated.EventVerdict && out[i-1].Event == gated.EventGrantIssued {
			out[i-1].At = out[i].At
		}
	}
	return out
}

// assertSameEvents fails unless got holds want's events, each with the
// same envelope and the same data as a JSON document.
func assertSameEvents(t testing.TB, want, got []gated.AuditEvent) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d:\n%+v\n%+v", len(got), len(want), got, want)
	}
	for i := range want {
		w, g := want[i], got[i]
		if w.Event != g.Event || w.Tenant != g.Tenant || w.ProposalID != g.ProposalID || !w.At.Equal(g.At) ||
			w.Instance != g.Instance || w.PolicyRevision != g.PolicyRevision {
			t.Fatalf("event %d: %+v, want %+v", i, g, w)
		}
		var wd, gd any
		if len(w.Data) > 0 {
			if err := json.Unmarshal(w.Data, &wd); err != nil {
				t.Fatalf("event %d: want data %s: %v", i, w.Data, err)
			}
		}
		if len(g.Data) > 0 {
			if err := json.Unmarshal(g.Data, &gd); err != nil {
				t.Fatalf("event %d: data %s: %v", i, g.Data, err)
			}
		}
		if !reflect.DeepEqual(wd, gd) {
			t.Fatalf("event %d (%s): data\n%s\nwant\n%s", i, w.Event, g.Data, w.Data)
		}
	}
}
