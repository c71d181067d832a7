package audit

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/strictjson"
)

// canonicalBodies are record bodies as the writer writes them, and
// bodies near that form that the canonical reading must refuse or read
// as the strict decoder does.
func canonicalBodies(tb testing.TB) [][]byte {
	tb.Helper()
	at := time.Date(2026, 11, 1, 9, 0, 0, 123456789, time.UTC)
	var out [][]byte
	for _, ev := range []gated.AuditEvent{
		{V: 1, Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p1", At: at, Instance: "i-1", PolicyRevision: "rev", Data: []byte(`{"outcome":"approved","reasons":["a \"b\"",1.5e3,null]}`)},
		{V: 1, Event: gated.EventPolicyReloaded, Tenant: gated.UnknownTenant, At: at},
		{V: 1, Event: gated.EventReceived, Tenant: "globex", ProposalID: "p-2", At: at.In(time.FixedZone("x", 3600)), Data: []byte(`{"s":",\"chain\":{\"n\":1}"}`)},
	} {
		e, err := encodeEvent(ev)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, e.body(Chain{N: 1}), e.body(Chain{N: 18446744073709551615 / 10, Prev: "ab01"}))
	}
	e, err := encodeEvent(gated.AuditEvent{V: 1, Event: gated.EventReceived, Tenant: "acme", ProposalID: "p<2>&", At: at})
	if err != nil {
		tb.Fatal(err)
	}
	return append(out, e.body(Chain{N: 1}),
		[]byte(`{"v":1,"event":"a.b","tenant":"t","at":"2026-11-01T09:00:00Z","data":{},"chain":{"n":1,"prev":""},"chain":{"n":2,"prev":""}}`),
		[]byte(`{"v":1,"event":"a.b","tenant":"t","at":"2026-11-01T09:00:00Z","data":{} ,"chain":{"n":1,"prev":""}}`),
		[]byte(`{"v":01,"event":"a.b","tenant":"t","at":"2026-11-01T09:00:00Z","chain":{"n":1,"prev":""}}`),
		[]byte(`{"v":1,"event":"a.b","tenant":"t","at":"2026-11-01T09:00:00Z","data":{"a":1}}{"b":2},"chain":{"n":1,"prev":""}}`),
		[]byte(`{"v":1,"event":"a.b","tenant":"t","at":"not a time","chain":{"n":1,"prev":""}}`),
		[]byte(`{"v":1,"event":"a\u0062","tenant":"t","at":"2026-11-01T09:00:00Z","chain":{"n":1,"prev":""}}`),
		[]byte(`{"V":1,"event":"a.b","tenant":"t","at":"2026-11-01T09:00:00Z","chain":{"n":1,"prev":""}}`),
		[]byte(`{"v":1,"event":"a.b","tenant":"t","at":"2026-11-01T09:00:00Z","data":null,"chain":{"n":1,"prev":""}}`),
	)
}

// TestDecodeCanonicalReadsTheWritersForm: the writer's bodies take the
// canonical reading, and it gives what the strict decoder gives.
func TestDecodeCanonicalReadsTheWritersForm(t *testing.T) {
	for i, body := range canonicalBodies(t)[:6] {
		got, ok := decodeCanonical(body)
		if !ok {
			t.Fatalf("body %d, as the writer wrote it, did not take the canonical reading:\n%s", i, body)
		}
		checkSameAsStrict(t, body, got)
	}
}

// FuzzDecodeCanonical holds the canonical reading of a record body to the
// strict decoder's: what it accepts, the strict decoder reads the same.
func FuzzDecodeCanonical(f *testing.F) {
	for _, body := range canonicalBodies(f) {
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := decodeCanonical(body)
		if ok {
			checkSameAsStrict(t, body, got)
		}
	})
}

func checkSameAsStrict(t *testing.T, body []byte, got auditBody) {
	t.Helper()
	var want auditBody
	err := strictjson.Decode(body, &want)
	if errors.Is(err, strictjson.ErrTrailingData) || err != nil {
		t.Fatalf("the canonical reading accepted a body the strict decoder refuses (%v):\n%s", err, body)
	}
	if !reflect.DeepEqual(got, want) || !got.At.Equal(want.At) {
		t.Fatalf("canonical reading %+v (chain %+v), strict %+v (chain %+v) of\n%s", got, got.Chain, want, want.Chain, body)
	}
	if len(got.Data) > 0 && cap(got.Data) != len(got.Data) {
		t.Fatalf("data is not capped: len %d cap %d", len(got.Data), cap(got.Data))
	}
}
