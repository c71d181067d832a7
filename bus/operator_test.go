package bus_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nkeys"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// operatorKey is an operator's nkey: the seed it signs with and the
// public key gated lists.
type operatorKey struct {
	seed []byte
	pub  string
}

func newOperatorKey(t testing.TB) operatorKey {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return operatorKey{seed: seed, pub: pub}
}

var heldDigest = strings.Repeat("ab", 32)

// decision is a well-formed decision by alice on acme's proposal p-1.
func decision() bus.OperatorMessage {
	return bus.OperatorMessage{
		Tenant: "acme", ProposalID: "p-1", ProposalSHA256: heldDigest, Operator: "alice",
		Criteria: []engine.OperatorFinding{{ID: "ux-check", Pass: true, Reason: "looked at the screenshots"}},
		Reason:   "release review",
	}
}

func sign(t testing.TB, k operatorKey, m bus.OperatorMessage) ([]byte, nats.Header) {
	t.Helper()
	body, hdr, err := bus.SignOperatorDecision(k.seed, m)
	if err != nil {
		t.Fatal(err)
	}
	return body, hdr
}

// signRaw signs arbitrary bytes as SignOperatorDecision would sign a body.
func signRaw(t testing.TB, k operatorKey, body []byte) nats.Header {
	t.Helper()
	kp, err := nkeys.FromSeed(k.seed)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := kp.Sign(body)
	if err != nil {
		t.Fatal(err)
	}
	hdr := nats.Header{}
	hdr.Set(wire.OperatorKeyHeader, k.pub)
	hdr.Set(wire.OperatorSigHeader, base64.RawURLEncoding.EncodeToString(sig))
	return hdr
}

// operators lists alice (tenant acme) and root (every tenant).
func operators(t testing.TB, alice, root operatorKey) *bus.OperatorList {
	t.Helper()
	l, err := bus.ParseOperators("operators.yaml", fmt.Appendf(nil,
		"operators:\n  - id: alice\n    key: %s\n    tenants: [acme]\n  - id: root\n    key: %s\n", alice.pub, root.pub))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestParseOperators(t *testing.T) {
	a, b := newOperatorKey(t), newOperatorKey(t)
	acct, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	acctPub, _ := acct.PublicKey()
	t.Run("good", func(t *testing.T) {
		l, err := bus.ParseOperators("ops.yaml", fmt.Appendf(nil, `
operators:
  - id: alice@example.com
    key: %s
    tenants: [acme, globex]
  - {id: root, key: %s, tenants: []}
`, a.pub, b.pub))
		if err != nil {
			t.Fatal(err)
		}
		ops := l.Operators()
		if len(ops) != 2 || ops[0].ID != "alice@example.com" || ops[0].Key != a.pub || ops[1].ID != "root" {
			t.Fatalf("operators = %+v", ops)
		}
		if !ops[0].Allows("globex") || ops[0].Allows("initech") || !ops[1].Allows("initech") {
			t.Fatalf("tenants: alice %v, root %v", ops[0].Tenants, ops[1].Tenants)
		}
	})
	tests := []struct {
		note string
		file string
		want string // in the error
	}{
		{note: "empty file", file: "", want: "empty"},
		{note: "nobody listed", file: "operators: []\n", want: "lists nobody"},
		{note: "not YAML", file: "operators: [\n", want: "ops.yaml"},
		{note: "yaml parser error on line 3", file: "operators:\n  - id: alice\n    tenants: [acme, b\n    key: x\n", want: "ops.yaml:3: did not find expected ',' or ']'"},
		{note: "not a mapping", file: "- id: alice\n", want: "ops.yaml:1: want a mapping"},
		{note: "unknown top key", file: "operator:\n  - id: alice\n", want: "ops.yaml:1: operator: unknown key"},
		{note: "operators not a list", file: "operators: {id: alice}\n", want: "want a list"},
		{note: "entry not a mapping", file: "operators:\n  - alice\n", want: "ops.yaml:2: operators[0]: want a mapping"},
		{note: "unknown entry key", file: "operators:\n  - id: alice\n    key: " + a.pub + "\n    role: admin\n", want: "ops.yaml:4: operators[0]: role: unknown key"},
		{note: "missing id", file: "operators:\n  - key: " + a.pub + "\n", want: "operators[0]: id is required"},
		{note: "bad id", file: "operators:\n  - id: alice smith\n    key: " + a.pub + "\n", want: "operators[0]: id: want a name"},
		{note: "missing key", file: "operators:\n  - id: alice\n", want: "operators[0] (alice): key is required"},
		{note: "account key", file: "operators:\n  - id: alice\n    key: " + acctPub + "\n", want: "not an nkey public user key"},
		{note: "garbage key", file: "operators:\n  - id: alice\n    key: UNOTAKEY\n", want: "not an nkey public user key"},
		{note: "seed as key", file: "operators:\n  - id: alice\n    key: " + string(a.seed) + "\n", want: "this is an nkey seed"},
		{note: "bad tenant", file: "operators:\n  - id: alice\n    key: " + a.pub + "\n    tenants: [Acme]\n", want: "operators[0]: tenants: line 4: want a tenant token"},
		{note: "reserved tenant", file: "operators:\n  - id: alice\n    key: " + a.pub + "\n    tenants: [_]\n", want: "want a tenant token"},
		{note: "tenant twice", file: "operators:\n  - id: alice\n    key: " + a.pub + "\n    tenants: [acme, acme]\n", want: "acme is listed twice"},
		{note: "tenants not a list", file: "operators:\n  - id: alice\n    key: " + a.pub + "\n    tenants: acme\n", want: "want a list of tenant tokens"},
		{note: "duplicate id", file: "operators:\n  - {id: alice, key: " + a.pub + "}\n  - {id: alice, key: " + b.pub + "}\n", want: "operators[1]: id alice is used by operators[0] too"},
		{note: "duplicate key", file: "operators:\n  - {id: alice, key: " + a.pub + "}\n  - {id: bob, key: " + a.pub + "}\n", want: "operators[1] (bob): key is operators[0]'s (alice) too"},
		{note: "key given twice", file: "operators:\n  - {id: alice, key: " + a.pub + ", key: " + b.pub + "}\n", want: "key: given twice"},
		{note: "two documents", file: "operators: []\n---\noperators: []\n", want: "one YAML document"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			l, err := bus.ParseOperators("ops.yaml", []byte(tc.file))
			if err == nil {
				t.Fatalf("parsed %+v, want an error saying %q", l.Operators(), tc.want)
			}
			if !errors.Is(err, bus.ErrInvalidOperators) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalidOperators saying %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "ops.yaml") {
				t.Errorf("err = %v does not name the file", err)
			}
			if strings.Contains(err.Error(), string(a.seed)) {
				t.Errorf("err = %v quotes the seed", err)
			}
		})
	}
}

func TestLoadOperatorsNamesTheFile(t *testing.T) {
	_, err := bus.LoadOperators(t.TempDir() + "/missing.yaml")
	if !errors.Is(err, bus.ErrInvalidOperators) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("err = %v, want ErrInvalidOperators naming missing.yaml", err)
	}
}

func TestVerifyOperatorMessage(t *testing.T) {
	alice, root, stranger := newOperatorKey(t), newOperatorKey(t), newOperatorKey(t)
	list := operators(t, alice, root)
	now := time.Now()
	good := func() bus.OperatorMessage { m := decision(); m.SignedAt = now; return m }
	subject := bus.OperatorSubject("acme", "p-1")

	tests := []struct {
		note    string
		subject string
		msg     func() ([]byte, nats.Header)
		code    int
		field   string
		want    string // in the reason
	}{
		{note: "good", msg: func() ([]byte, nats.Header) { return sign(t, alice, good()) }},
		{note: "good, an operator of every tenant", subject: bus.OperatorSubject("globex", "p-1"), msg: func() ([]byte, nats.Header) {
			m := good()
			m.Tenant, m.Operator = "globex", "root"
			return sign(t, root, m)
		}},
		{note: "signed 4 minutes ago", msg: func() ([]byte, nats.Header) {
			m := good()
			m.SignedAt = now.Add(-4 * time.Minute)
			return sign(t, alice, m)
		}},
		{note: "unsigned", msg: func() ([]byte, nats.Header) {
			body, _ := sign(t, alice, good())
			return body, nats.Header{}
		}, code: 401, want: "no Gated-Operator-Key header"},
		{note: "no signature", msg: func() ([]byte, nats.Header) {
			body, hdr := sign(t, alice, good())
			hdr.Del(wire.OperatorSigHeader)
			return body, hdr
		}, code: 401, want: "no Gated-Operator-Sig header"},
		{note: "bad signature", msg: func() ([]byte, nats.Header) {
			body, hdr := sign(t, alice, good())
			sig, _ := base64.RawURLEncoding.DecodeString(hdr.Get(wire.OperatorSigHeader))
			sig[0] ^= 1
			hdr.Set(wire.OperatorSigHeader, base64.RawURLEncoding.EncodeToString(sig))
			return body, hdr
		}, code: 401, want: "does not verify"},
		{note: "signature not base64", msg: func() ([]byte, nats.Header) {
			body, hdr := sign(t, alice, good())
			hdr.Set(wire.OperatorSigHeader, "not base64!")
			return body, hdr
		}, code: 401, want: "not base64"},
		{note: "body changed after signing", msg: func() ([]byte, nats.Header) {
			body, hdr := sign(t, alice, good())
			return bytes.Replace(body, []byte(`"pass":true`), []byte(`"pass":false`), 1), hdr
		}, code: 401, want: "does not verify"},
		{note: "another operator's key in the header", msg: func() ([]byte, nats.Header) {
			body, hdr := sign(t, alice, good())
			hdr.Set(wire.OperatorKeyHeader, root.pub)
			return body, hdr
		}, code: 401, want: "does not verify"},
		{note: "unknown key", msg: func() ([]byte, nats.Header) { return sign(t, stranger, good()) }, code: 401, want: "not in gated's operator list"},
		{note: "header holds no public key", msg: func() ([]byte, nats.Header) {
			body, hdr := sign(t, alice, good())
			hdr.Set(wire.OperatorKeyHeader, string(alice.seed))
			return body, hdr
		}, code: 401, want: "not an nkey public user key"},
		{note: "key header twice", msg: func() ([]byte, nats.Header) {
			body, hdr := sign(t, alice, good())
			hdr.Add(wire.OperatorKeyHeader, root.pub)
			return body, hdr
		}, code: 401, want: "given 2 times"},
		{note: "id of another operator", msg: func() ([]byte, nats.Header) {
			m := good()
			m.Operator = "root"
			return sign(t, alice, m)
		}, code: 401, want: "operator alice's, but the message names operator root"},
		{note: "tenant not allowed", subject: bus.OperatorSubject("globex", "p-1"), msg: func() ([]byte, nats.Header) {
			m := good()
			m.Tenant = "globex"
			return sign(t, alice, m)
		}, code: 403, want: "may not decide for tenant globex"},
		{note: "signed 6 minutes ago", msg: func() ([]byte, nats.Header) {
			m := good()
			m.SignedAt = now.Add(-6 * time.Minute)
			return sign(t, alice, m)
		}, code: 401, want: "at most 5m0s either way"},
		{note: "signed 6 minutes ahead", msg: func() ([]byte, nats.Header) {
			m := good()
			m.SignedAt = now.Add(6 * time.Minute)
			return sign(t, alice, m)
		}, code: 401, want: "signed_at"},
		{note: "subject of another tenant", subject: bus.OperatorSubject("globex", "p-1"), msg: func() ([]byte, nats.Header) {
			return sign(t, root, func() bus.OperatorMessage { m := good(); m.Operator = "root"; return m }())
		}, code: 400, field: "tenant", want: "names tenant acme, the subject globex"},
		{note: "subject of another proposal", subject: bus.OperatorSubject("acme", "p-2"), msg: func() ([]byte, nats.Header) { return sign(t, alice, good()) },
			code: 400, field: "proposal_id", want: "names proposal p-1, the subject p-2"},
		{note: "malformed subject", subject: "gated.operator.acme", msg: func() ([]byte, nats.Header) { return sign(t, alice, good()) },
			code: 400, field: "subject"},
		{note: "reserved tenant in the subject", subject: "gated.operator._.p-1", msg: func() ([]byte, nats.Header) { return sign(t, alice, good()) },
			code: 400, field: "subject"},
		{note: "signed garbage", msg: func() ([]byte, nats.Header) {
			body := []byte("\x00garbage{")
			return body, signRaw(t, alice, body)
		}, code: 400, want: "not JSON"},
		{note: "signed unknown field", msg: func() ([]byte, nats.Header) {
			body, _ := sign(t, alice, good())
			body = append(body[:len(body)-1], []byte(`,"approve_all":true}`)...)
			return body, signRaw(t, alice, body)
		}, code: 400, field: "approve_all", want: "unknown field"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			body, hdr := tc.msg()
			subj := tc.subject
			if subj == "" {
				subj = subject
			}
			m, op, err := list.Verify(subj, hdr, body, now)
			if tc.code == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if m.Operator != op.ID || hdr.Get(wire.OperatorKeyHeader) != op.Key {
					t.Fatalf("verified %s with key of %s", m.Operator, op.ID)
				}
				d := m.Decision(op.Key)
				if d.Key != op.Key || d.ProposalSHA256 != heldDigest || len(d.Criteria) != 1 || d.Criteria[0].ID != "ux-check" {
					t.Fatalf("decision = %+v", d)
				}
				return
			}
			var r *bus.OperatorRefusal
			if !errors.As(err, &r) {
				t.Fatalf("err = %v, want a refusal %d", err, tc.code)
			}
			if r.Code != tc.code || r.Field != tc.field || !strings.Contains(r.Reason, tc.want) {
				t.Fatalf("refusal %d field %q: %s; want %d field %q saying %q", r.Code, r.Field, r.Reason, tc.code, tc.field, tc.want)
			}
			if !errors.Is(err, bus.ErrOperatorRefused) {
				t.Errorf("%v does not match ErrOperatorRefused", err)
			}
			if sig := hdr.Get(wire.OperatorSigHeader); strings.Contains(err.Error(), string(alice.seed)) || (sig != "" && strings.Contains(err.Error(), sig)) {
				t.Errorf("refusal %q quotes a secret", err)
			}
		})
	}
}

func TestDecodeOperatorMessage(t *testing.T) {
	const (
		head = `{"v":1,"tenant":"acme","proposal_id":"p-1","proposal_sha256":"` + "abababababababababababababababababababababababababababababababab" + `","operator":"alice",`
		crit = `"criteria":[{"id":"ux","pass":true,"reason":"ok"}],`
		tail = `"reason":"r","signed_at":"2025-06-01T10:00:00Z"}`
	)
	if _, err := bus.DecodeOperatorMessage([]byte(head + crit + tail)); err != nil {
		t.Fatalf("good message refused: %v", err)
	}
	m, err := bus.DecodeOperatorMessage([]byte(head + `"criteria":[{"id":"ux","pass":false}],"signed_at":"2025-06-01T12:00:00+02:00"}`))
	if err != nil {
		t.Fatalf("message without reasons refused: %v", err)
	}
	if m.Criteria[0].Pass || m.Reason != "" || !m.SignedAt.Equal(time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("decoded %+v", m)
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
		{note: "criteria empty", body: head + `"criteria":[],` + tail, field: "criteria", want: "is empty"},
		{note: "criteria not a list", body: head + `"criteria":{"id":"ux"},` + tail, field: "criteria"},
		{note: "criterion unknown field", body: head + `"criteria":[{"id":"ux","pass":true,"weight":2}],` + tail, field: "criteria[0].weight", want: "unknown field"},
		{note: "criterion without pass", body: head + `"criteria":[{"id":"ux"}],` + tail, field: "criteria[0].pass", want: "is required"},
		{note: "criterion pass as string", body: head + `"criteria":[{"id":"ux","pass":"yes"}],` + tail, field: "criteria[0].pass", want: "true or false"},
		{note: "criterion bad id", body: head + `"criteria":[{"id":"u x","pass":true}],` + tail, field: "criteria[0].id"},
		{note: "criterion twice", body: head + `"criteria":[{"id":"ux","pass":true},{"id":"ux","pass":false}],` + tail, field: "criteria[1].id", want: "judged already by criteria[0]"},
		{note: "criterion field twice", body: head + `"criteria":[{"id":"ux","pass":true,"pass":false}],` + tail, field: "criteria[0].pass", want: "appears twice"},
		{note: "signed_at not a time", body: head + crit + `"signed_at":"yesterday"}`, field: "signed_at", want: "RFC 3339"},
		{note: "reason too long", body: head + crit + `"reason":"` + strings.Repeat("x", bus.MaxOperatorReasonBytes+1) + `","signed_at":"2025-06-01T10:00:00Z"}`, field: "reason", want: "more than"},
		{note: "too large", body: head + crit + `"reason":"` + strings.Repeat("x", bus.MaxOperatorMessageBytes) + `","signed_at":"2025-06-01T10:00:00Z"}`, want: "bytes, more than"},
		{note: "invalid UTF-8", body: head + crit + "\"reason\":\"\xff\"," + `"signed_at":"2025-06-01T10:00:00Z"}`, want: "UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			m, err := bus.DecodeOperatorMessage([]byte(tc.body))
			var r *bus.OperatorRefusal
			if !errors.As(err, &r) {
				t.Fatalf("decoded %+v, err %v; want a refusal", m, err)
			}
			if r.Code != 400 || r.Field != tc.field || !strings.Contains(r.Reason, tc.want) {
				t.Fatalf("refusal %d field %q: %s; want 400 field %q saying %q", r.Code, r.Field, r.Reason, tc.field, tc.want)
			}
			if !errors.Is(err, bus.ErrOperatorMessageInvalid) {
				t.Errorf("%v does not match ErrOperatorMessageInvalid", err)
			}
		})
	}
}

func TestSignOperatorDecision(t *testing.T) {
	alice := newOperatorKey(t)
	body, hdr := sign(t, alice, decision())
	if hdr.Get(wire.OperatorKeyHeader) != alice.pub {
		t.Fatalf("key header %q, want %s", hdr.Get(wire.OperatorKeyHeader), alice.pub)
	}
	m, err := bus.DecodeOperatorMessage(body)
	if err != nil {
		t.Fatal(err)
	}
	if m.V != 1 || time.Since(m.SignedAt) > time.Minute || m.SignedAt.Location() != time.UTC {
		t.Fatalf("signed message: v %d, signed_at %s", m.V, m.SignedAt)
	}
	// A creds-file decoration around the seed is fine.
	decorated := "-----BEGIN USER NKEY SEED-----\n" + string(alice.seed) + "\n------END USER NKEY SEED------\n"
	if _, _, err := bus.SignOperatorDecision([]byte(decorated), decision()); err != nil {
		t.Fatalf("decorated seed: %v", err)
	}

	acct, _ := nkeys.CreateAccount()
	acctSeed, _ := acct.Seed()
	bad := decision()
	bad.Tenant = "ACME"
	tests := []struct {
		note string
		seed []byte
		msg  bus.OperatorMessage
		want string
	}{
		{note: "account seed", seed: acctSeed, msg: decision(), want: "want an nkey user seed"},
		{note: "public key instead of seed", seed: []byte(alice.pub), msg: decision(), want: "want an nkey user seed"},
		{note: "garbage", seed: []byte("SUnotaseed"), msg: decision(), want: "want an nkey user seed"},
		{note: "malformed decision", seed: alice.seed, msg: bad, want: "field tenant"},
		{note: "no criteria", seed: alice.seed, msg: func() bus.OperatorMessage { m := decision(); m.Criteria = nil; return m }(), want: "field criteria: is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			_, _, err := bus.SignOperatorDecision(tc.seed, tc.msg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), string(tc.seed)) {
				t.Errorf("err = %v quotes the seed", err)
			}
		})
	}
}

func TestOperatorRefusalMatchesItsSentinel(t *testing.T) {
	tests := []struct {
		code int
		is   error
	}{
		{400, bus.ErrOperatorMessageInvalid}, {401, bus.ErrOperatorUnauthenticated}, {403, bus.ErrOperatorForbidden},
		{404, engine.ErrNotFound}, {409, bus.ErrOperatorConflict}, {503, fleet.ErrServiceUnavailable},
	}
	for _, tc := range tests {
		err := error(&bus.OperatorRefusal{Code: tc.code, Reason: "x"})
		if !errors.Is(err, tc.is) {
			t.Errorf("%d does not match %v", tc.code, tc.is)
		}
		if refused := errors.Is(err, bus.ErrOperatorRefused); refused != (tc.code < 500) {
			t.Errorf("%d matches ErrOperatorRefused: %v", tc.code, refused)
		}
	}
}

// auditRec collects the events of every trail it starts; fail makes
// Seal fail.
type auditRec struct {
	mu     sync.Mutex
	events []engine.AuditEvent
	fail   error
}

func (a *auditRec) Trail() engine.AuditTrail { return &recTrail{rec: a} }

func (a *auditRec) take() []engine.AuditEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.events
	a.events = nil
	return out
}

type recTrail struct {
	rec    *auditRec
	sealed bool
}

func (t *recTrail) Record(_ context.Context, ev engine.AuditEvent) error {
	t.rec.mu.Lock()
	defer t.rec.mu.Unlock()
	if t.sealed {
		return bus.ErrTrailSealed
	}
	t.rec.events = append(t.rec.events, ev)
	return nil
}

func (t *recTrail) Seal(ctx context.Context, ev engine.AuditEvent) (uint64, error) {
	t.rec.mu.Lock()
	fail := t.rec.fail
	t.rec.mu.Unlock()
	if fail != nil {
		return 0, fail
	}
	if err := t.Record(ctx, ev); err != nil {
		return 0, err
	}
	t.sealed = true
	return 99, nil
}

// fakeResolver answers Resolve with answer, recording the decisions.
type fakeResolver struct {
	mu        sync.Mutex
	decisions []engine.OperatorDecision
	answer    func(engine.OperatorDecision) (*engine.Verdict, error)
}

func (f *fakeResolver) Resolve(_ context.Context, d engine.OperatorDecision, _ engine.AuditTrail) (*engine.Verdict, error) {
	f.mu.Lock()
	f.decisions = append(f.decisions, d)
	answer := f.answer
	f.mu.Unlock()
	return answer(d)
}

// answerWith makes Resolve answer with fn until the test ends.
func (f *fakeResolver) answerWith(t *testing.T, fn func(engine.OperatorDecision) (*engine.Verdict, error)) {
	f.mu.Lock()
	prev := f.answer
	f.answer = fn
	f.mu.Unlock()
	t.Cleanup(func() {
		f.mu.Lock()
		f.answer = prev
		f.mu.Unlock()
	})
}

func (f *fakeResolver) take() []engine.OperatorDecision {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.decisions
	f.decisions = nil
	return out
}

// hookRec records what the verdict hooks were called with, in order.
type hookRec struct {
	mu    sync.Mutex
	calls []string
	fail  error
}

func (h *hookRec) hook(name string) bus.VerdictHook {
	return func(_ context.Context, v *engine.Verdict) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.calls = append(h.calls, name+":"+v.ProposalID)
		if name == "follow-up" {
			return h.fail
		}
		return nil
	}
}

func (h *hookRec) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.calls
	h.calls = nil
	return out
}

func operatorVerdict(d engine.OperatorDecision) *engine.Verdict {
	return &engine.Verdict{
		V: 1, ProposalID: d.ProposalID, Tenant: d.Tenant, Kind: engine.KindRun, Outcome: engine.OutcomeApproved,
		Approved: true, Stage: engine.StageOperator, Reason: "operator " + d.Operator + " passed every manual criterion",
		ProposalSHA256: d.ProposalSHA256, AuditSeq: 12, DecidedAt: time.Now().UTC(),
	}
}

// sendOperator sends a decision as the CLI does, on a connection of its
// own, and returns the reply.
func sendOperator(t *testing.T, url, subject string, body []byte, hdr nats.Header) *nats.Msg {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	m, err := nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: body, Header: hdr})
	if err != nil {
		t.Fatalf("request on %s: %v", subject, err)
	}
	return m
}

func TestOperatorEndpoint(t *testing.T) {
	s := bustest.Server(t)
	nc, _ := bustest.Connect(t, s)
	alice, root, stranger := newOperatorKey(t), newOperatorKey(t), newOperatorKey(t)
	audit, hooks := &auditRec{}, &hookRec{}
	resolver := &fakeResolver{answer: func(d engine.OperatorDecision) (*engine.Verdict, error) { return operatorVerdict(d), nil }}
	ep, err := bus.NewOperatorEndpoint(operators(t, alice, root), resolver, audit.Trail, hooks.hook("follow-up"), hooks.hook("publish"), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := bus.StartService(nc, bus.ServiceConfig{Version: "1.0.0", Operators: ep}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop(0) })
	url := s.ClientURL()
	subject := bus.OperatorSubject("acme", "p-1")

	t.Run("accepted", func(t *testing.T) {
		body, hdr := sign(t, alice, decision())
		reply := sendOperator(t, url, subject, body, hdr)
		v := replyVerdict(t, reply)
		if v.Stage != engine.StageOperator || v.ProposalID != "p-1" {
			t.Fatalf("reply = %+v", v)
		}
		ds := resolver.take()
		if len(ds) != 1 || ds[0].Operator != "alice" || ds[0].Key != alice.pub || ds[0].ProposalSHA256 != heldDigest ||
			ds[0].Reason != "release review" || len(ds[0].Criteria) != 1 || !ds[0].Criteria[0].Pass {
			t.Fatalf("the engine got %+v", ds)
		}
		if calls := hooks.take(); strings.Join(calls, " ") != "follow-up:p-1 publish:p-1" {
			t.Fatalf("hooks called %v, want the follow-up before the verdict", calls)
		}
		if evs := audit.take(); len(evs) != 0 {
			t.Fatalf("the endpoint audited %v itself; Resolve audits an acceptance", evs)
		}
	})

	refusals := []struct {
		note    string
		subject string
		msg     func() ([]byte, nats.Header)
		code    string
		want    string
		tenant  string // of the audit event
	}{
		{note: "bad signature", msg: func() ([]byte, nats.Header) {
			body, hdr := sign(t, alice, decision())
			return bytes.Replace(body, []byte("release"), []byte("RELEASE"), 1), hdr
		}, code: "401", want: "does not verify", tenant: "acme"},
		{note: "unknown key", msg: func() ([]byte, nats.Header) { return sign(t, stranger, decision()) }, code: "401", want: "not in gated's operator list", tenant: "acme"},
		{note: "wrong tenant", subject: bus.OperatorSubject("globex", "p-1"), msg: func() ([]byte, nats.Header) {
			m := decision()
			m.Tenant = "globex"
			return sign(t, alice, m)
		}, code: "403", want: "may not decide for tenant globex", tenant: "globex"},
		{note: "expired", msg: func() ([]byte, nats.Header) {
			m := decision()
			m.SignedAt = time.Now().Add(-time.Hour)
			return sign(t, alice, m)
		}, code: "401", want: "signed_at", tenant: "acme"},
		{note: "subject mismatch", subject: bus.OperatorSubject("acme", "p-9"), msg: func() ([]byte, nats.Header) { return sign(t, alice, decision()) },
			code: "400", want: "field proposal_id", tenant: "acme"},
		{note: "garbage", msg: func() ([]byte, nats.Header) {
			body := []byte("garbage")
			return body, signRaw(t, alice, body)
		}, code: "400", want: "not JSON", tenant: "acme"},
		{note: "unsigned garbage", msg: func() ([]byte, nats.Header) { return []byte("{{{"), nil }, code: "401", want: "must be signed", tenant: "acme"},
		{note: "malformed subject", subject: "gated.operator.ACME.p-1", msg: func() ([]byte, nats.Header) { return sign(t, alice, decision()) },
			code: "400", want: "field subject", tenant: engine.UnknownTenant},
	}
	for _, tc := range refusals {
		t.Run(tc.note, func(t *testing.T) {
			body, hdr := tc.msg()
			subj := tc.subject
			if subj == "" {
				subj = subject
			}
			reply := sendOperator(t, url, subj, body, hdr)
			code, desc := reply.Header.Get(micro.ErrorCodeHeader), reply.Header.Get(micro.ErrorHeader)
			if code != tc.code || !strings.Contains(desc, tc.want) {
				t.Fatalf("reply %q %q, want %s saying %q", code, desc, tc.code, tc.want)
			}
			if len(reply.Data) != 0 {
				t.Errorf("error reply has a body: %s", reply.Data)
			}
			if ds := resolver.take(); len(ds) != 0 {
				t.Fatalf("a refused message reached the engine: %+v", ds)
			}
			if calls := hooks.take(); len(calls) != 0 {
				t.Fatalf("a refused message was published: %v", calls)
			}
			evs := audit.take()
			if len(evs) != 1 || evs[0].Event != engine.EventOperatorRefused || evs[0].Tenant != tc.tenant {
				t.Fatalf("audited %+v, want one %s of tenant %s", evs, engine.EventOperatorRefused, tc.tenant)
			}
			var data bus.OperatorRefusedData
			if err := json.Unmarshal(evs[0].Data, &data); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(data.Code) != tc.code || data.Reason == "" || !strings.Contains(desc, data.Reason) || data.Subject != subj {
				t.Fatalf("audit data %+v", data)
			}
			if strings.Contains(string(evs[0].Data), string(alice.seed)) || (hdr != nil && hdr.Get(wire.OperatorSigHeader) != "" &&
				strings.Contains(string(evs[0].Data), hdr.Get(wire.OperatorSigHeader))) {
				t.Errorf("audit data holds a secret: %s", evs[0].Data)
			}
		})
	}

	resolveErrors := []struct {
		note string
		err  error
		code string
		want string
	}{
		{note: "no verdict", err: fmt.Errorf("reading: %w", engine.ErrNotFound), code: "404", want: "no verdict is stored for proposal acme.p-1"},
		{note: "not awaiting", err: fmt.Errorf("%w: outcome approved", engine.ErrNotAwaiting), code: "409", want: "not awaiting"},
		{note: "digest mismatch", err: fmt.Errorf("%w: another proposal digest", engine.ErrDecisionMismatch), code: "409", want: "another proposal digest"},
		{note: "decided meanwhile", err: engine.ErrExists, code: "409", want: "decided meanwhile"},
		{note: "store down", err: errors.New("verdict bucket: timeout"), code: "503", want: "nothing was decided"},
	}
	for _, tc := range resolveErrors {
		t.Run(tc.note, func(t *testing.T) {
			resolver.answerWith(t, func(engine.OperatorDecision) (*engine.Verdict, error) { return nil, tc.err })
			body, hdr := sign(t, alice, decision())
			reply := sendOperator(t, url, subject, body, hdr)
			code, desc := reply.Header.Get(micro.ErrorCodeHeader), reply.Header.Get(micro.ErrorHeader)
			if code != tc.code || !strings.Contains(desc, tc.want) {
				t.Fatalf("reply %q %q, want %s saying %q", code, desc, tc.code, tc.want)
			}
			resolver.take()
			if calls := hooks.take(); len(calls) != 0 {
				t.Fatalf("nothing was decided, yet the hooks ran: %v", calls)
			}
			evs := audit.take()
			if len(evs) != 1 || evs[0].Event != engine.EventOperatorRefused || evs[0].ProposalID != "p-1" {
				t.Fatalf("audited %+v, want one refusal of p-1", evs)
			}
		})
	}

	t.Run("the same decision again republishes the follow-up", func(t *testing.T) {
		resolver.answerWith(t, func(d engine.OperatorDecision) (*engine.Verdict, error) {
			return operatorVerdict(d), fmt.Errorf("%w: decided by operator alice", engine.ErrNotAwaiting)
		})
		body, hdr := sign(t, alice, decision())
		reply := sendOperator(t, url, subject, body, hdr)
		if code := reply.Header.Get(micro.ErrorCodeHeader); code != "409" {
			t.Fatalf("reply code %q, want 409", code)
		}
		resolver.take()
		audit.take()
		if calls := hooks.take(); strings.Join(calls, " ") != "follow-up:p-1" {
			t.Fatalf("hooks called %v, want the follow-up only", calls)
		}
	})

	t.Run("follow-up fails", func(t *testing.T) {
		hooks.mu.Lock()
		hooks.fail = errors.New("GATED_RUNS: no responders")
		hooks.mu.Unlock()
		defer func() { hooks.mu.Lock(); hooks.fail = nil; hooks.mu.Unlock() }()
		body, hdr := sign(t, alice, decision())
		reply := sendOperator(t, url, subject, body, hdr)
		code, desc := reply.Header.Get(micro.ErrorCodeHeader), reply.Header.Get(micro.ErrorHeader)
		if code != "503" || !strings.Contains(desc, "the decision is stored") || !strings.Contains(desc, "send the same decision again") {
			t.Fatalf("reply %q %q, want 503 saying the decision is stored", code, desc)
		}
		resolver.take()
		audit.take()
		if calls := hooks.take(); strings.Join(calls, " ") != "follow-up:p-1" {
			t.Fatalf("hooks called %v: the verdict must not be published before its follow-up", calls)
		}
	})

	t.Run("audit down", func(t *testing.T) {
		audit.mu.Lock()
		audit.fail = errors.New("audit stream unavailable")
		audit.mu.Unlock()
		defer func() { audit.mu.Lock(); audit.fail = nil; audit.mu.Unlock() }()
		body, hdr := sign(t, stranger, decision())
		reply := sendOperator(t, url, subject, body, hdr)
		code, desc := reply.Header.Get(micro.ErrorCodeHeader), reply.Header.Get(micro.ErrorHeader)
		if code != "503" || !strings.Contains(desc, "could not be audited") || !strings.Contains(desc, "401") {
			t.Fatalf("reply %q %q, want 503 naming the refusal it could not audit", code, desc)
		}
		if ds := resolver.take(); len(ds) != 0 {
			t.Fatalf("the engine got %+v", ds)
		}
	})

	t.Run("stats and info", func(t *testing.T) {
		var found bool
		for _, e := range svc.Info().Endpoints {
			if e.Name == bus.OperatorEndpointName {
				found = e.Subject == "gated.operator.*.*" && e.QueueGroup == bus.ReviewQueueGroup
			}
		}
		if !found {
			t.Fatalf("no operator endpoint on gated.operator.*.* in queue group %s: %+v", bus.ReviewQueueGroup, svc.Info().Endpoints)
		}
		for _, e := range svc.Stats().Endpoints {
			if e.Name != bus.OperatorEndpointName {
				continue
			}
			var st bus.ReviewStats
			if err := json.Unmarshal(e.Data, &st); err != nil {
				t.Fatal(err)
			}
			if st.Verdicts[engine.OutcomeApproved] != 1 || st.Refused["401"] < 3 || st.Refused["409"] < 3 {
				t.Fatalf("operator stats %+v", st)
			}
		}
	})
}

func TestNewOperatorEndpointNeedsEverything(t *testing.T) {
	alice, root := newOperatorKey(t), newOperatorKey(t)
	list := operators(t, alice, root)
	r := &fakeResolver{}
	trails := (&auditRec{}).Trail
	hook := func(context.Context, *engine.Verdict) error { return nil }
	for _, tc := range []struct {
		note string
		call func() error
	}{
		{"no list", func() error { _, err := bus.NewOperatorEndpoint(nil, r, trails, hook, hook, nil); return err }},
		{"no resolver", func() error { _, err := bus.NewOperatorEndpoint(list, nil, trails, hook, hook, nil); return err }},
		{"no trails", func() error { _, err := bus.NewOperatorEndpoint(list, r, nil, hook, hook, nil); return err }},
		{"no follow-up hook", func() error { _, err := bus.NewOperatorEndpoint(list, r, trails, nil, hook, nil); return err }},
		{"no publish hook", func() error { _, err := bus.NewOperatorEndpoint(list, r, trails, hook, nil, nil); return err }},
	} {
		if err := tc.call(); !errors.Is(err, bus.ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", tc.note, err)
		}
	}
}

// TestOperatorDecisionEndToEnd sends signed decisions through the real
// service, engine, verdict store and audit stream: a held run verdict is
// replaced, stored, published and audited, and a second decision on it
// is refused.
func TestOperatorDecisionEndToEnd(t *testing.T) {
	s := bustest.Server(t)
	nc, js := bustest.Connect(t, s)
	ctx := t.Context()
	res, err := bus.Setup(ctx, js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store := store.New(res.Verdicts)
	eng := defaultEngine(t, store, noPlugins{})
	alice, root := newOperatorKey(t), newOperatorKey(t)
	var (
		mu        sync.Mutex
		followUps []*engine.Verdict
	)
	followUp := func(_ context.Context, v *engine.Verdict) error {
		mu.Lock()
		defer mu.Unlock()
		followUps = append(followUps, v)
		return nil
	}
	publish := func(_ context.Context, v *engine.Verdict) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return nc.Publish(wire.VerdictSubject(v.Tenant, v.ProposalID), data)
	}
	ep, err := bus.NewOperatorEndpoint(operators(t, alice, root), eng, newAuditor(t, js, bus.AuditorConfig{}).Trail, followUp, publish, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := bus.StartService(nc, bus.ServiceConfig{Operators: ep}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop(0) })

	hold := func(id string) *engine.Verdict {
		t.Helper()
		v := &engine.Verdict{
			V: 1, ProposalID: id, Tenant: "acme", Action: "run_review", Kind: engine.KindRun, Outcome: engine.OutcomeBlocked,
			Stage: engine.StageReview, Reason: "awaiting an operator decision on ux-check", ProposalSHA256: heldDigest,
			AuditSeq: 7, DecidedAt: time.Now().UTC().Add(-time.Minute), Agent: "worker-1",
			Run: &engine.RunVerdict{
				RunID: "run-" + id, Worker: "worker-1", Round: 1, MaxRounds: 5, AwaitingOperator: []string{"ux-check"},
				Criteria: []engine.CriterionEval{{ID: "tests", Pass: true, Kind: engine.CriterionCommandResult, Required: true, JudgedBy: engine.JudgedByPolicy}},
			},
		}
		if _, err := store.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	send := func(m bus.OperatorMessage) *nats.Msg {
		t.Helper()
		body, hdr := sign(t, alice, m)
		return sendOperator(t, s.ClientURL(), bus.OperatorSubject(m.Tenant, m.ProposalID), body, hdr)
	}
	wantRefusal := func(m *nats.Msg, code string) {
		t.Helper()
		if got := m.Header.Get(micro.ErrorCodeHeader); got != code {
			t.Fatalf("reply %q %q, want %s", got, m.Header.Get(micro.ErrorHeader), code)
		}
	}

	hold("held-1")
	verdicts, err := nc.SubscribeSync(wire.VerdictSubject("acme", "held-1"))
	if err != nil {
		t.Fatal(err)
	}
	m := decision()
	m.ProposalID = "held-1"
	reply := send(m)
	if reply.Header.Get(micro.ErrorCodeHeader) == "503" && strings.Contains(reply.Header.Get(micro.ErrorHeader), "not yet") {
		t.Skip("engine.Resolve is still a stub")
	}
	v := replyVerdict(t, reply)
	if v.Outcome != engine.OutcomeApproved || !v.Approved || v.Stage != engine.StageOperator || v.ProposalSHA256 != heldDigest {
		t.Fatalf("verdict %s/%s approved=%v: %s", v.Outcome, v.Stage, v.Approved, v.Reason)
	}
	var judged bool
	for _, c := range v.Run.Criteria {
		judged = judged || (c.ID == "ux-check" && c.Pass && c.JudgedBy == engine.JudgedByOperator+"alice")
	}
	if !judged || len(v.Run.AwaitingOperator) != 0 {
		t.Fatalf("run criteria %+v awaiting %v: want ux-check passed by operator:alice and nothing awaited", v.Run.Criteria, v.Run.AwaitingOperator)
	}
	stored, err := store.Get(ctx, "acme", "held-1")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Stage != engine.StageOperator || stored.AuditSeq != v.AuditSeq || stored.AuditSeq == 7 {
		t.Fatalf("stored verdict %s/%s seq %d, replied seq %d", stored.Outcome, stored.Stage, stored.AuditSeq, v.AuditSeq)
	}
	pub, err := verdicts.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no verdict published: %v", err)
	}
	var published engine.Verdict
	if err := json.Unmarshal(pub.Data, &published); err != nil || published.AuditSeq != v.AuditSeq {
		t.Fatalf("published %s (%v)", pub.Data, err)
	}
	var events []string
	err = bus.ReadAudit(ctx, js, bus.AuditQuery{Tenant: "acme"}, func(e bus.AuditEntry) error {
		if e.Record != nil && e.Record.Event.ProposalID == "held-1" {
			events = append(events, e.Record.Event.Event)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(events, " "); !strings.Contains(got, engine.EventOperatorDecided) || !strings.HasSuffix(got, engine.EventVerdict) {
		t.Fatalf("audit events %q, want %s and then %s", got, engine.EventOperatorDecided, engine.EventVerdict)
	}

	// Decided once: the same decision again, or another, is refused, and
	// has the stored verdict's follow-up published again (the hook
	// publishes nothing twice).
	wantRefusal(send(m), "409")
	m.Criteria[0].Pass = false
	wantRefusal(send(m), "409")
	mu.Lock()
	n := len(followUps)
	mu.Unlock()
	if n != 3 {
		t.Fatalf("follow-up hook called %d times, want 3: the decision, then each refused one again", n)
	}

	// A failed manual criterion rejects the run at stage operator.
	hold("held-2")
	m = decision()
	m.ProposalID = "held-2"
	m.Criteria[0] = engine.OperatorFinding{ID: "ux-check", Pass: false, Reason: "the dialog overflows on mobile"}
	v = replyVerdict(t, send(m))
	if v.Outcome != engine.OutcomeRejected || v.Stage != engine.StageOperator {
		t.Fatalf("verdict %s/%s: %s", v.Outcome, v.Stage, v.Reason)
	}
	mu.Lock()
	n = len(followUps)
	last := followUps[n-1]
	mu.Unlock()
	if n != 4 || last.ProposalID != "held-2" || last.AuditSeq != v.AuditSeq || last.Run.Next != engine.NextContinuation {
		t.Fatalf("follow-up hook got %d verdicts, last %s", n, last.ProposalID)
	}

	// Not matching the held verdict: another digest, another criterion.
	hold("held-3")
	m = decision()
	m.ProposalID = "held-3"
	m.ProposalSHA256 = strings.Repeat("cd", 32)
	wantRefusal(send(m), "409")
	m = decision()
	m.ProposalID = "held-3"
	m.Criteria[0].ID = "docs-check"
	wantRefusal(send(m), "409")
	if still, err := store.Get(ctx, "acme", "held-3"); err != nil || still.Outcome != engine.OutcomeBlocked || still.AuditSeq != 7 {
		t.Fatalf("held verdict changed by refused decisions: %+v, %v", still, err)
	}

	// Nothing stored.
	m = decision()
	m.ProposalID = "never-decided"
	wantRefusal(send(m), "404")

	// The verdicts operators decided name their own records; held-3, held
	// by hand with a made-up audit_seq, does not.
	rep, err := bus.Verify(ctx, js, bus.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wrong []string
	for _, p := range rep.Problems {
		wrong = append(wrong, p.ProposalID)
	}
	if fmt.Sprint(wrong) != "[held-3]" || rep.Verdicts.Matched != 2 {
		t.Fatalf("verify: %+v\nproblems %+v", *rep.Verdicts, rep.Problems)
	}
}

func FuzzDecodeOperatorMessage(f *testing.F) {
	k := newOperatorKey(f)
	body, _ := sign(f, k, decision())
	f.Add(body)
	f.Add([]byte(`{"v":1,"tenant":"acme","proposal_id":"p","proposal_sha256":"","operator":"a","criteria":[{"id":"x","pass":true,"pass":1}],"signed_at":""}`))
	f.Add([]byte(`{"criteria":[{"id":"x","pass":true}],"criteria":[]}`))
	f.Add([]byte(`{"v":1} {}`))
	f.Add([]byte(`[{"v":1}]`))
	f.Add([]byte(`{"\u0000":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := bus.DecodeOperatorMessage(data)
		if err != nil {
			var r *bus.OperatorRefusal
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
		if m.V != 1 || !engine.ValidTenant(m.Tenant) || !engine.ValidID(m.ProposalID) || len(m.ProposalSHA256) != 64 ||
			!bus.ValidOperatorID(m.Operator) || len(m.Criteria) == 0 {
			t.Fatalf("decoded an invalid message: %+v", m)
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := bus.DecodeOperatorMessage(again)
		if err != nil {
			t.Fatalf("re-encoded message refused: %v\n%s", err, again)
		}
		if fmt.Sprint(m2.Decision("")) != fmt.Sprint(m.Decision("")) || !m2.SignedAt.Equal(m.SignedAt) {
			t.Fatalf("round trip changed the message: %+v != %+v", m2, m)
		}
	})
}

func FuzzParseOperators(f *testing.F) {
	a, b := newOperatorKey(f), newOperatorKey(f)
	f.Add([]byte("operators:\n  - id: alice\n    key: " + a.pub + "\n    tenants: [acme]\n  - {id: root, key: " + b.pub + "}\n"))
	f.Add([]byte("operators:\n  - &x {id: alice, key: " + a.pub + "}\n  - *x\n"))
	f.Add([]byte("operators: [{id: a, key: " + a.pub + ", tenants: [acme, acme]}]\n"))
	f.Add([]byte("operators:\n  - id: alice\n    key: " + string(a.seed) + "\n"))
	f.Add([]byte("operators: ~\n"))
	f.Add([]byte("{operators: [[]]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := bus.ParseOperators("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, bus.ErrInvalidOperators) || !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("err = %v, want ErrInvalidOperators naming the file", err)
			}
			return
		}
		ops := l.Operators()
		if len(ops) == 0 {
			t.Fatal("parsed a list of nobody")
		}
		ids, keys := map[string]bool{}, map[string]bool{}
		for _, op := range ops {
			if !bus.ValidOperatorID(op.ID) || !nkeys.IsValidPublicUserKey(op.Key) || ids[op.ID] || keys[op.Key] {
				t.Fatalf("parsed an invalid or repeated operator %+v", op)
			}
			ids[op.ID], keys[op.Key] = true, true
			for _, tenant := range op.Tenants {
				if !engine.ValidTenant(tenant) || tenant == engine.UnknownTenant {
					t.Fatalf("operator %s has tenant %q", op.ID, tenant)
				}
			}
		}
	})
}

// The operators file docs/OPERATORS.md shows is one gated accepts.
func TestOperatorsFileInTheDocs(t *testing.T) {
	doc, err := os.ReadFile("../docs/OPERATORS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "   ```yaml\n   operators:\n")
	block, _, closed := strings.Cut(rest, "   ```\n")
	if !ok || !closed {
		t.Fatal("docs/OPERATORS.md has no indented yaml block starting with operators:")
	}
	var file strings.Builder
	file.WriteString("operators:\n")
	for _, line := range strings.Split(block, "\n") {
		file.WriteString(strings.TrimPrefix(line, "   ") + "\n")
	}
	l, err := bus.ParseOperators("OPERATORS.md", []byte(file.String()))
	if err != nil {
		t.Fatalf("the documented operators file is refused: %v\n%s", err, file.String())
	}
	ops := l.Operators()
	if len(ops) != 2 || !ops[0].Allows("acme") || ops[0].Allows("globex") || !ops[1].Allows("globex") {
		t.Fatalf("documented operators = %+v", ops)
	}
}
