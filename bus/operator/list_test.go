package operator_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/engine/wire"
)

func TestParseList(t *testing.T) {
	a, b := newOperatorKey(t), newOperatorKey(t)
	acct, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	acctPub, _ := acct.PublicKey()
	t.Run("good", func(t *testing.T) {
		l, err := operator.ParseList("ops.yaml", fmt.Appendf(nil, `
operators:
  - id: alice@example.com
    key: %s
    tenants: [acme, globex]
  - {id: root, key: %s, tenants: []}
`, a.pub, b.pub))
		if err != nil {
			t.Fatal(err)
		}
		ops := l.Signers()
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
			l, err := operator.ParseList("ops.yaml", []byte(tc.file))
			if err == nil {
				t.Fatalf("parsed %+v, want an error saying %q", l.Signers(), tc.want)
			}
			if !errors.Is(err, operator.ErrInvalidList) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalidList saying %q", err, tc.want)
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

func TestLoadListNamesTheFile(t *testing.T) {
	_, err := operator.LoadList(t.TempDir() + "/missing.yaml")
	if !errors.Is(err, operator.ErrInvalidList) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("err = %v, want ErrInvalidList naming missing.yaml", err)
	}
}

func TestVerify(t *testing.T) {
	alice, root, stranger := newOperatorKey(t), newOperatorKey(t), newOperatorKey(t)
	list := operators(t, alice, root)
	now := time.Now()
	good := func() operator.Message { m := decision(); m.SignedAt = now; return m }
	subject := wire.OperatorSubject("acme", "p-1")

	tests := []struct {
		note    string
		subject string
		msg     func() ([]byte, nats.Header)
		code    int
		field   string
		want    string // in the reason
	}{
		{note: "good", msg: func() ([]byte, nats.Header) { return sign(t, alice, good()) }},
		{note: "good, an operator of every tenant", subject: wire.OperatorSubject("globex", "p-1"), msg: func() ([]byte, nats.Header) {
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
		{note: "tenant not allowed", subject: wire.OperatorSubject("globex", "p-1"), msg: func() ([]byte, nats.Header) {
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
		{note: "subject of another tenant", subject: wire.OperatorSubject("globex", "p-1"), msg: func() ([]byte, nats.Header) {
			return sign(t, root, func() operator.Message { m := good(); m.Operator = "root"; return m }())
		}, code: 400, field: "tenant", want: "names tenant acme, the subject globex"},
		{note: "subject of another proposal", subject: wire.OperatorSubject("acme", "p-2"), msg: func() ([]byte, nats.Header) { return sign(t, alice, good()) },
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
				if m.ProposalSHA256 != heldDigest || len(m.Criteria) != 1 || m.Criteria[0].ID != "ux-check" {
					t.Fatalf("message = %+v", m)
				}
				return
			}
			var r *operator.Refusal
			if !errors.As(err, &r) {
				t.Fatalf("err = %v, want a refusal %d", err, tc.code)
			}
			if r.Code != tc.code || r.Field != tc.field || !strings.Contains(r.Reason, tc.want) {
				t.Fatalf("refusal %d field %q: %s; want %d field %q saying %q", r.Code, r.Field, r.Reason, tc.code, tc.field, tc.want)
			}
			if !errors.Is(err, operator.ErrRefused) {
				t.Errorf("%v does not match ErrRefused", err)
			}
			if sig := hdr.Get(wire.OperatorSigHeader); strings.Contains(err.Error(), string(alice.seed)) || (sig != "" && strings.Contains(err.Error(), sig)) {
				t.Errorf("refusal %q quotes a secret", err)
			}
		})
	}
}

func FuzzParseList(f *testing.F) {
	a, b := newOperatorKey(f), newOperatorKey(f)
	f.Add([]byte("operators:\n  - id: alice\n    key: " + a.pub + "\n    tenants: [acme]\n  - {id: root, key: " + b.pub + "}\n"))
	f.Add([]byte("operators:\n  - &x {id: alice, key: " + a.pub + "}\n  - *x\n"))
	f.Add([]byte("operators: [{id: a, key: " + a.pub + ", tenants: [acme, acme]}]\n"))
	f.Add([]byte("operators:\n  - id: alice\n    key: " + string(a.seed) + "\n"))
	f.Add([]byte("operators: ~\n"))
	f.Add([]byte("{operators: [[]]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := operator.ParseList("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, operator.ErrInvalidList) || !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("err = %v, want ErrInvalidList naming the file", err)
			}
			return
		}
		ops := l.Signers()
		if len(ops) == 0 {
			t.Fatal("parsed a list of nobody")
		}
		ids, keys := map[string]bool{}, map[string]bool{}
		for _, op := range ops {
			if !operator.ValidID(op.ID) || !nkeys.IsValidPublicUserKey(op.Key) || ids[op.ID] || keys[op.Key] {
				t.Fatalf("parsed an invalid or repeated operator %+v", op)
			}
			ids[op.ID], keys[op.Key] = true, true
			for _, tenant := range op.Tenants {
				if !gated.ValidTenant(tenant) || tenant == gated.UnknownTenant {
					t.Fatalf("operator %s has tenant %q", op.ID, tenant)
				}
			}
		}
	})
}

// The operators file docs/OPERATORS.md shows is one gated accepts.
func TestOperatorsFileInTheDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/OPERATORS.md")
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
	l, err := operator.ParseList("OPERATORS.md", []byte(file.String()))
	if err != nil {
		t.Fatalf("the documented operators file is refused: %v\n%s", err, file.String())
	}
	ops := l.Signers()
	if len(ops) != 2 || !ops[0].Allows("acme") || ops[0].Allows("globex") || !ops[1].Allows("globex") {
		t.Fatalf("documented operators = %+v", ops)
	}
}
