package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/strictjson"
)

// scanV2Events are the events of a proposal decided by the policy with
// a grant, and of a reviewed one, as the engine records them.
func scanV2Events() [][]gated.AuditEvent {
	at := time.Date(2025, 1, 2, 3, 4, 5, 120_000_000, time.UTC)
	ev := func(id, name, data string) gated.AuditEvent {
		at = at.Add(time.Millisecond)
		return gated.AuditEvent{V: 1, Event: name, Tenant: "acme", ProposalID: id, At: at, Instance: "gate-1", PolicyRevision: "sha256:abc", Data: []byte(data)}
	}
	head := `"action":"host_restart_service","operator":"alice","delivery":1`
	sum := strings.Repeat("ab", 32)
	return [][]gated.AuditEvent{
		{
			ev("p1", gated.EventReceived, `{`+head+`,"bytes":9,"sha256":"`+sum+`","subject":"gated.proposals.acme.host_restart_service"}`),
			ev("p1", gated.EventPolicyDecided, `{`+head+`,"policy_eval_us":7,"denied_tools":[],"denies":[],"eval_us":7,"review":{"required":false,"rule":"read"},"input":{"proposal":{"v":1,"id":"p1","chain":{"n":1},"events":[]},"persona":"reviewer","now":"2025-01-02T03:04:05Z"}}`),
			ev("p1", gated.EventGrantIssued, `{`+head+`,"policy_eval_us":7,"exp":1795661606,"gid":"g1","kid":"k1","proposal_id":"p1","tenant":"acme"}`),
			ev("p1", gated.EventVerdict, `{"operator":"alice","delivery":1,"policy_eval_us":7,"v":1,"proposal_id":"p1","tenant":"acme","action":"host_restart_service","kind":"action","outcome":"approved","approved":true,"stage":"policy","reason":"read","policy":{"denies":[],"revision":"sha256:abc","eval_us":7},"grant":"a.b.c","decided_at":"2025-01-02T03:04:05Z","latency_ms":1,"audit_seq":0,"proposal_sha256":"`+sum+`"}`),
		},
		{
			ev("p2", gated.EventReviewDone, `{`+head+`,"policy_eval_us":9,"review_id":"r1","plugin":"sop","decision":"approve"}`),
			ev("p2", gated.EventVerdict, `{"operator":"bob","v":1,"proposal_id":null,"outcome":"rejected","stage":"review","reason":"no"}`),
		},
		{{V: 1, Event: gated.EventPolicyReloaded, Tenant: gated.UnknownTenant, At: at, Data: []byte(`{"revision":"r2"}`)}},
	}
}

// FuzzScanV3 holds the one-pass reading of version-3 bodies to the strict
// decoder's: a body scanV3 accepts decodes strictly to the same recordV3,
// and DecodeRecord gives the events the strict decoder reads, or refuses
// what it refuses. Seeds are gated's records and the forms an attacker
// would try where two readings could part: a key twice, a key with an
// escape or in another case, "chain" and "events" inside data, an event of
// another tenant or proposal, white space.
func FuzzScanV3(f *testing.F) {
	for _, evs := range scanV2Events() {
		e, err := encodeRecord(evs, false)
		if err != nil {
			f.Fatal(err)
		}
		body := e.body(Chain{N: 3, Prev: strings.Repeat("0f", 32)})
		f.Add(e.subject, body)
		for _, edit := range [][2]string{
			{`"tenant":"acme"`, `"tenant":"acme","tenant":"evil"`},
			{`"tenant":"acme"`, `"ten\u0061nt":"acme"`},
			{`"tenant":"acme"`, `"Tenant":"acme"`},
			{`,"tenant":"acme","proposal_id"`, `,"tenant":"beta","proposal_id"`},
			{`"proposal_id":"p1"`, `"proposal_id":"p1","proposal_id":"p9"`},
			{`"proposal_id":"p1"`, `"proposal_id":"p9"`},
			{`"events":[`, `"events":[{"event":"verdict.decided","at":"2025-01-02T03:04:05Z"}],"events":[`},
			{`"data":{`, `"data":{"chain":{"n":9,"prev":""},"events":[],`},
			{`"v":1,`, `"v":1 ,`},
			{`"v":1,`, `"v":2,`},
			{`]}`, `] }`},
			{`]}`, `],"chain":{"n":1,"prev":""}}`},
			{`"n":3`, `"n":03`},
			{`"n":3`, `"n":18446744073709551616`},
			{`"at":"2025-01-02T03:04:05.121Z"`, `"at":"2025-01-02T03:04:05.121+00:00"`},
			{`"at":"2025-01-02T03:04:05.121Z"`, `"at":"2025-13-02T03:04:05.121Z"`},
			{`"event":"proposal.received"`, `"event":"proposal.rec\u0065ived"`},
		} {
			if bytes.Contains(body, []byte(edit[0])) {
				f.Add(e.subject, bytes.Replace(body, []byte(edit[0]), []byte(edit[1]), 1))
			}
		}
		f.Add(e.subject, append(bytes.Clone(body), ' '))
		f.Add(e.subject, append(bytes.Clone(body), '}'))
	}
	f.Fuzz(func(t *testing.T, subject string, body []byte) {
		var strict recordV3
		strictErr := strictjson.Decode(body, &strict)
		fast, ok := scanV3(body)
		if ok {
			if strictErr != nil {
				t.Fatalf("scanV3 reads a body the strict decoder refuses (%v):\n%s", strictErr, body)
			}
			if !reflect.DeepEqual(fast, strict) {
				t.Fatalf("scanV3 reads\n%+v\nthe strict decoder\n%+v\nfrom\n%s", fast, strict, body)
			}
		}
		if bodyVersion(body) != RecordVersion {
			return
		}
		r, err := DecodeRecord(subject, nil, body)
		if err != nil {
			if !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("DecodeRecord's error %v does not wrap ErrInvalidRecord", err)
			}
			return
		}
		if strictErr != nil {
			t.Fatalf("DecodeRecord reads a body the strict decoder refuses (%v):\n%s", strictErr, body)
		}
		if len(r.Events()) != len(strict.Events) {
			t.Fatalf("DecodeRecord reads %d events, the strict decoder %d", len(r.Events()), len(strict.Events))
		}
		for i, raw := range strict.Events {
			var want gated.AuditEvent
			if err := strictjson.Decode(raw, &want); err != nil {
				t.Fatalf("DecodeRecord reads event %d, which the strict decoder refuses (%v): %s", i, err, raw)
			}
			got := r.Events()[i]
			if !got.At.Equal(want.At) {
				t.Fatalf("event %d: at %v, the strict decoder %v", i, got.At, want.At)
			}
			got.At, want.At = time.Time{}, time.Time{}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("event %d: DecodeRecord reads\n%+v\nthe strict decoder\n%+v", i, got, want)
			}
			if got.Tenant != r.Tenant || got.ProposalID != r.ProposalID {
				t.Fatalf("event %d of %s.%s in a record of %s.%s", i, got.Tenant, got.ProposalID, r.Tenant, r.ProposalID)
			}
		}
	})
}

// FuzzDecodeLegacyV2: a legacy body of version 2 is read or refused with
// an error that wraps ErrInvalidRecord, never a panic; what it reads, it
// reads again the same.
func FuzzDecodeLegacyV2(f *testing.F) {
	for _, evs := range scanV2Events() {
		e, err := encodeV2(evs, false)
		if err != nil {
			f.Fatal(err)
		}
		body := e.body(Chain{N: 3, Prev: strings.Repeat("0f", 32)})
		f.Add(e.subject, body)
		f.Add(e.subject, bytes.Replace(body, []byte(`"omit":["policy_eval_us"]`), []byte(`"omit":["policy_eval_us","bytes"]`), 1))
		f.Add(e.subject, bytes.Replace(body, []byte(`"grant":{"gid":"g1"`), []byte(`"grant":{"gid":"g1","gid":"g2"`), 1))
		f.Add(e.subject, bytes.Replace(body, []byte(`"head":{`), []byte(`"head":{"bytes":1,`), 1))
	}
	f.Fuzz(func(t *testing.T, subject string, body []byte) {
		r, err := DecodeRecord(subject, nil, body)
		if err != nil {
			if !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("DecodeRecord's error %v does not wrap ErrInvalidRecord", err)
			}
			return
		}
		again, err := DecodeRecord(subject, nil, body)
		if err != nil || !reflect.DeepEqual(r.Events(), again.Events()) {
			t.Fatalf("a second reading differs: %v", err)
		}
	})
}

// TestScanV3ReadsGatedRecords: every record gated writes is read in one
// pass, not handed to the strict decoder, and each event it holds is
// stored exactly as its reading writes it again: what the hash covers is
// what a reader shows.
func TestScanV3ReadsGatedRecords(t *testing.T) {
	for i, evs := range scanV2Events() {
		e, err := encodeRecord(evs, false)
		if err != nil {
			t.Fatal(err)
		}
		body := e.body(Chain{N: 1})
		b, ok := scanV3(body)
		if !ok {
			t.Fatalf("record %d is not read in one pass:\n%s", i, body)
		}
		r, err := DecodeRecord(e.subject, nil, body)
		if err != nil {
			t.Fatal(err)
		}
		for j, ev := range r.Events() {
			if _, ok := canonicalEvent(b.Events[j]); !ok {
				t.Errorf("record %d event %d is not read in one pass: %s", i, j, b.Events[j])
			}
			again, err := appendEvent(nil, ev)
			if err != nil || !bytes.Equal(again, b.Events[j]) {
				t.Errorf("record %d event %d reads as\n%s\nstored\n%s", i, j, again, b.Events[j])
			}
		}
	}
}

// BenchmarkDecodeRecord decodes gated's records: a policy decision with a
// grant and a review's end with its verdict, the way DecodeRecord reads
// them (one pass) and the strict decoder's way.
func BenchmarkDecodeRecord(b *testing.B) {
	for _, evs := range scanV2Events()[:2] {
		e, err := encodeRecord(evs, false)
		if err != nil {
			b.Fatal(err)
		}
		body := e.body(Chain{N: 7, Prev: strings.Repeat("0f", 32)})
		b.Run(evs[0].ProposalID+"/one-pass", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := DecodeRecord(e.subject, nil, body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(evs[0].ProposalID+"/strict", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var r recordV3
				if err := strictjson.Decode(body, &r); err != nil {
					b.Fatal(err)
				}
				for _, raw := range r.Events {
					var ev gated.AuditEvent
					if err := strictjson.Decode(raw, &ev); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// TestCheckPrintsVersion2Verdicts: the check of a version-2 record that
// holds a verdict keeps a print of it, as for a version-1 record, so that
// the verdict check matches the stored verdict without reading the record
// from the stream again (a request per verdict): the quick print of its
// data when the record kept the grant's token or had none, and the print
// of the verdict when it folded the grant.
func TestCheckPrintsVersion2Verdicts(t *testing.T) {
	folds := 0
	for i, evs := range scanV2Events()[:2] {
		m, err := NewRecordMsg(evs, Chain{N: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		e := Entry{Seq: uint64(i + 1), Subject: m.Subject, Header: m.Header, Data: m.Data}
		rc := newRecordChecker(nil, true).check(e)
		if rc.invalid != "" || !rc.verdict {
			t.Fatalf("record %d: invalid %q, verdict %v", i, rc.invalid, rc.verdict)
		}
		if !rc.printable && !rc.fullOK {
			t.Fatalf("record %d: the check keeps no print of its verdict", i)
		}
		r, err := DecodeRecord(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if _, folded := r.Find(gated.EventGrantIssued); folded != rc.byGID || folded && rc.fullOK {
			t.Errorf("record %d: folded grant %v, gid print %v, verdict decoded %v: want a gid print alone for a folded grant", i, folded, rc.byGID, rc.fullOK)
		}
		if rc.byGID {
			folds++
		}
	}
	if folds == 0 {
		t.Fatal("no record folded a grant")
	}
}

// TestCheckerScratchChangesNothing: a checker writes each record's
// expanded events, and a compressed body's JSON, into the blocks the one
// before used; checking records one after another, large and small,
// compressed and not, so gives what a new checker gives for each, and the
// blocks are kept for the next.
func TestCheckerScratchChangesNothing(t *testing.T) {
	var entries []Entry
	for _, evs := range scanV2Events() {
		for _, build := range []func([]gated.AuditEvent, Chain, []byte) (*nats.Msg, error){NewRecordMsg, NewCompressedRecordMsg} {
			m, err := build(evs, Chain{N: 1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			entries = append(entries, Entry{Seq: uint64(len(entries) + 1), Subject: m.Subject, Header: m.Header, Data: m.Data})
		}
	}
	c := newRecordChecker(nil, true)
	for round := range 2 {
		for i := range entries {
			e := entries[(i*7+round)%len(entries)]
			got, want := c.check(e), newRecordChecker(nil, true).check(e)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("record %d after others: %+v, alone: %+v", e.Seq, got, want)
			}
		}
	}
	if cap(c.scratch.json) == 0 {
		t.Fatalf("the checker keeps no block for the next compressed body's JSON")
	}
}

// FuzzDuplicateMember holds the one-pass check for a member named twice
// to strictjson.ReadValue's on any valid JSON.
func FuzzDuplicateMember(f *testing.F) {
	for _, s := range []string{
		`{"operator":"u-1042","decision":"approve","operator":"alice"}`,
		`{"a":{"b":1},"c":{"b":2}}`,
		`{"x":[{"id":1,"id":2}]}`,
		`{"x":[{"id":1},{"id":2}],"y":{"id":{"id":3}}}`,
		`{"\u0069d":1,"id":2}`,
		`{"a\"b":1,"a\"b":2}`,
		`[{"a":1},{"a":1,"b":{"a":1,"a":2}}]`,
		`{"":1,"":2}`,
		`"a"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		_, want := strictjson.ReadValue(data, strictjson.ValueOptions{})
		key, dup := duplicateMember(data)
		if dup != errors.Is(want, strictjson.ErrDuplicateKey) {
			t.Fatalf("duplicateMember(%s) = %q, %v; strictjson: %v", data, key, dup, want)
		}
	})
}
