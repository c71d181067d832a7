package operator_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/engine/wire"
)

func TestDecodeMessage(t *testing.T) {
	const (
		head = `{"v":1,"tenant":"acme","proposal_id":"p-1","proposal_sha256":"` + "abababababababababababababababababababababababababababababababab" + `","operator":"alice",`
		crit = `"criteria":[{"id":"ux","pass":true,"reason":"ok"}],`
		tail = `"reason":"r","signed_at":"2025-06-01T10:00:00Z"}`
	)
	if _, err := operator.DecodeMessage([]byte(head + crit + tail)); err != nil {
		t.Fatalf("good message refused: %v", err)
	}
	m, err := operator.DecodeMessage([]byte(head + `"criteria":[{"id":"ux","pass":false}],"signed_at":"2025-06-01T12:00:00+02:00"}`))
	if err != nil {
		t.Fatalf("message without reasons refused: %v", err)
	}
	if m.Criteria[0].Pass || m.Reason != "" || !m.SignedAt.Equal(time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("decoded %+v", m)
	}
	if m, err := operator.DecodeMessage([]byte(head + `"decision":"reject",` + tail)); err != nil || m.Decision != "reject" || len(m.Criteria) != 0 {
		t.Fatalf("action decision: %+v, %v", m, err)
	}
	tests := []struct {
		note  string
		body  string
		field string
		want  string
	}{
		{note: "not an object", body: `[1]`, want: "must be a JSON object"},
		{note: "trailing data", body: head + crit + tail + `{}`, want: "data after"},
		{note: "truncated", body: head + crit, want: "not JSON"},
		{note: "unknown field", body: head + crit + `"extra":1,` + tail, field: "extra", want: "unknown field"},
		{note: "repeated field", body: head + crit + `"operator":"root",` + tail, field: "operator", want: "appears twice"},
		{note: "missing signed_at", body: head + crit + `"reason":"r"}`, field: "signed_at", want: "is required"},
		{note: "missing criteria", body: head + tail, field: "criteria", want: "is required"},
		{note: "missing v", body: strings.Replace(head, `"v":1,`, "", 1) + crit + tail, field: "v", want: "is required"},
		{note: "version 2", body: strings.Replace(head, `"v":1`, `"v":2`, 1) + crit + tail, field: "v", want: "must be 1"},
		{note: "version as string", body: strings.Replace(head, `"v":1`, `"v":"1"`, 1) + crit + tail, field: "v"},
		{note: "tenant null", body: strings.Replace(head, `"tenant":"acme"`, `"tenant":null`, 1) + crit + tail, field: "tenant", want: "must be a string"},
		{note: "tenant upper case", body: strings.Replace(head, `"acme"`, `"Acme"`, 1) + crit + tail, field: "tenant", want: "must match"},
		{note: "reserved tenant", body: strings.Replace(head, `"acme"`, `"_"`, 1) + crit + tail, field: "tenant"},
		{note: "dotted proposal id", body: strings.Replace(head, `"p-1"`, `"p.1"`, 1) + crit + tail, field: "proposal_id"},
		{note: "short digest", body: strings.Replace(head, `"abab`, `"`, 1) + crit + tail, field: "proposal_sha256", want: "64 lower-case hex"},
		{note: "operator with a space", body: strings.Replace(head, `"alice"`, `"al ice"`, 1) + crit + tail, field: "operator"},
		{note: "decision unknown", body: head + `"decision":"approve with caveats",` + tail, field: "decision", want: "must be approve or reject"},
		{note: "decision not a string", body: head + `"decision":true,` + tail, field: "decision", want: "must be a string"},
		{note: "decision and criteria", body: head + crit + `"decision":"approve",` + tail, field: "decision", want: "not both"},
		{note: "criteria empty", body: head + `"criteria":[],` + tail, field: "criteria", want: "is empty"},
		{note: "criteria not a list", body: head + `"criteria":{"id":"ux"},` + tail, field: "criteria"},
		{note: "criterion unknown field", body: head + `"criteria":[{"id":"ux","pass":true,"weight":2}],` + tail, field: "criteria[0].weight", want: "unknown field"},
		{note: "criterion without pass", body: head + `"criteria":[{"id":"ux"}],` + tail, field: "criteria[0].pass", want: "is required"},
		{note: "criterion pass as string", body: head + `"criteria":[{"id":"ux","pass":"yes"}],` + tail, field: "criteria[0].pass", want: "true or false"},
		{note: "criterion bad id", body: head + `"criteria":[{"id":"u x","pass":true}],` + tail, field: "criteria[0].id"},
		{note: "criterion twice", body: head + `"criteria":[{"id":"ux","pass":true},{"id":"ux","pass":false}],` + tail, field: "criteria[1].id", want: "judged already by criteria[0]"},
		{note: "criterion field twice", body: head + `"criteria":[{"id":"ux","pass":true,"pass":false}],` + tail, field: "criteria[0].pass", want: "appears twice"},
		{note: "signed_at not a time", body: head + crit + `"signed_at":"yesterday"}`, field: "signed_at", want: "RFC 3339"},
		{note: "reason too long", body: head + crit + `"reason":"` + strings.Repeat("x", operator.MaxReasonBytes+1) + `","signed_at":"2025-06-01T10:00:00Z"}`, field: "reason", want: "more than"},
		{note: "too large", body: head + crit + `"reason":"` + strings.Repeat("x", operator.MaxMessageBytes) + `","signed_at":"2025-06-01T10:00:00Z"}`, want: "bytes, more than"},
		{note: "invalid UTF-8", body: head + crit + "\"reason\":\"\xff\"," + `"signed_at":"2025-06-01T10:00:00Z"}`, want: "UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			m, err := operator.DecodeMessage([]byte(tc.body))
			var r *operator.Refusal
			if !errors.As(err, &r) {
				t.Fatalf("decoded %+v, err %v; want a refusal", m, err)
			}
			if r.Code != 400 || r.Field != tc.field || !strings.Contains(r.Reason, tc.want) {
				t.Fatalf("refusal %d field %q: %s; want 400 field %q saying %q", r.Code, r.Field, r.Reason, tc.field, tc.want)
			}
			if !errors.Is(err, operator.ErrMessageInvalid) {
				t.Errorf("%v does not match ErrMessageInvalid", err)
			}
		})
	}
}

func TestSign(t *testing.T) {
	alice := newOperatorKey(t)
	body, hdr := sign(t, alice, decision())
	if hdr.Get(wire.OperatorKeyHeader) != alice.pub {
		t.Fatalf("key header %q, want %s", hdr.Get(wire.OperatorKeyHeader), alice.pub)
	}
	m, err := operator.DecodeMessage(body)
	if err != nil {
		t.Fatal(err)
	}
	if m.V != 1 || time.Since(m.SignedAt) > time.Minute || m.SignedAt.Location() != time.UTC {
		t.Fatalf("signed message: v %d, signed_at %s", m.V, m.SignedAt)
	}
	// A creds-file decoration around the seed is fine.
	decorated := "-----BEGIN USER NKEY SEED-----\n" + string(alice.seed) + "\n------END USER NKEY SEED------\n"
	if _, _, err := operator.Sign([]byte(decorated), decision()); err != nil {
		t.Fatalf("decorated seed: %v", err)
	}

	acct, _ := nkeys.CreateAccount()
	acctSeed, _ := acct.Seed()
	bad := decision()
	bad.Tenant = "ACME"
	tests := []struct {
		note string
		seed []byte
		msg  operator.Message
		want string
	}{
		{note: "account seed", seed: acctSeed, msg: decision(), want: "want an nkey user seed"},
		{note: "public key instead of seed", seed: []byte(alice.pub), msg: decision(), want: "want an nkey user seed"},
		{note: "garbage", seed: []byte("SUnotaseed"), msg: decision(), want: "want an nkey user seed"},
		{note: "malformed decision", seed: alice.seed, msg: bad, want: "field tenant"},
		{note: "no criteria", seed: alice.seed, msg: func() operator.Message { m := decision(); m.Criteria = nil; return m }(), want: "field criteria: is required"},
		{note: "both criteria and decision", seed: alice.seed, msg: func() operator.Message { m := decision(); m.Decision = "approve"; return m }(), want: "field decision: a message has criteria"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			_, _, err := operator.Sign(tc.seed, tc.msg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), string(tc.seed)) {
				t.Errorf("err = %v quotes the seed", err)
			}
		})
	}
}

func TestRefusalMatchesItsSentinel(t *testing.T) {
	tests := []struct {
		code int
		is   error
	}{
		{400, operator.ErrMessageInvalid}, {401, operator.ErrUnauthenticated}, {403, operator.ErrForbidden},
		{404, gated.ErrNotFound}, {409, operator.ErrConflict}, {503, fleet.ErrServiceUnavailable},
	}
	for _, tc := range tests {
		err := error(&operator.Refusal{Code: tc.code, Reason: "x"})
		if !errors.Is(err, tc.is) {
			t.Errorf("%d does not match %v", tc.code, tc.is)
		}
		if refused := errors.Is(err, operator.ErrRefused); refused != (tc.code < 500) {
			t.Errorf("%d matches ErrRefused: %v", tc.code, refused)
		}
	}
}

func FuzzDecodeMessage(f *testing.F) {
	k := newOperatorKey(f)
	body, _ := sign(f, k, decision())
	f.Add(body)
	f.Add([]byte(`{"v":1,"tenant":"acme","proposal_id":"p","proposal_sha256":"","operator":"a","criteria":[{"id":"x","pass":true,"pass":1}],"signed_at":""}`))
	f.Add([]byte(`{"criteria":[{"id":"x","pass":true}],"criteria":[]}`))
	f.Add([]byte(`{"v":1,"tenant":"acme","proposal_id":"p","proposal_sha256":"` + strings.Repeat("a", 64) + `","operator":"a","decision":"approve","signed_at":"2026-01-02T15:04:05Z"}`))
	f.Add([]byte(`{"v":1,"tenant":"acme","proposal_id":"p","proposal_sha256":"` + strings.Repeat("a", 64) + `","operator":"a","decision":"reject","criteria":[{"id":"x","pass":true}],"signed_at":"2026-01-02T15:04:05Z"}`))
	f.Add([]byte(`{"v":1} {}`))
	f.Add([]byte(`[{"v":1}]`))
	f.Add([]byte(`{"\u0000":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := operator.DecodeMessage(data)
		if err != nil {
			var r *operator.Refusal
			if !errors.As(err, &r) || r.Code != 400 {
				t.Fatalf("err = %v, want a 400 refusal", err)
			}
			if strings.ContainsAny(r.Field, "\r\n") {
				t.Fatalf("field %q spans lines", r.Field)
			}
			return
		}
		// Whatever decodes is a complete, valid message, and encodes to a
		// message that decodes to the same.
		if m.V != 1 || !gated.ValidTenant(m.Tenant) || !gated.ValidID(m.ProposalID) || len(m.ProposalSHA256) != 64 ||
			!operator.ValidID(m.Operator) || (len(m.Criteria) == 0) == (m.Decision == "") {
			t.Fatalf("decoded an invalid message: %+v", m)
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := operator.DecodeMessage(again)
		if err != nil {
			t.Fatalf("re-encoded message refused: %v\n%s", err, again)
		}
		if !m2.SignedAt.Equal(m.SignedAt) {
			t.Fatalf("round trip changed signed_at: %s != %s", m2.SignedAt, m.SignedAt)
		}
		a, b := *m, *m2
		a.SignedAt, b.SignedAt = time.Time{}, time.Time{}
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("round trip changed the message: %+v != %+v", m2, m)
		}
	})
}
