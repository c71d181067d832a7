package audit_test

import (
	"errors"
	"testing"

	"github.com/gated/gated"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine/wire"
)

// TestCheckAuditKey checks which keys may extend an audit stream: any key
// when there is no MACed record, and only the key of the newest valid
// record when it is MACed.
func TestCheckAuditKey(t *testing.T) {
	otherKey := []byte("another key of thirty-two bytes!")
	publish := func(t *testing.T, js jetstream.JetStream, m *nats.Msg) {
		t.Helper()
		if _, err := js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	keyed := func(t *testing.T, js jetstream.JetStream) {
		publish(t, js, auditMsg(t, verdictEvent("acme", "p1"), audit.Chain{N: 1}, testKey))
	}
	tests := []struct {
		note  string
		setup bool
		msgs  func(t *testing.T, js jetstream.JetStream)
		key   []byte
		want  audit.KeyProblem // 0: accepted
	}{
		{note: "no stream, no key"},
		{note: "empty stream, no key", setup: true},
		{note: "unkeyed records, no key", setup: true, msgs: func(t *testing.T, js jetstream.JetStream) {
			publish(t, js, auditMsg(t, verdictEvent("acme", "p1"), audit.Chain{N: 1}, nil))
		}},
		{note: "unkeyed records, a key", setup: true, key: testKey, msgs: func(t *testing.T, js jetstream.JetStream) {
			publish(t, js, auditMsg(t, verdictEvent("acme", "p1"), audit.Chain{N: 1}, nil))
		}},
		{note: "keyed records, no key", setup: true, msgs: keyed, want: audit.KeyMissing},
		{note: "keyed records, their key", setup: true, msgs: keyed, key: testKey},
		{note: "keyed records, another key", setup: true, msgs: keyed, key: otherKey, want: audit.KeyOther},
		{note: "keyed records under garbage, no key", setup: true, want: audit.KeyMissing, msgs: func(t *testing.T, js jetstream.JetStream) {
			keyed(t, js)
			for range 3 {
				publish(t, js, &nats.Msg{Subject: "gated.audit.acme.verdict.decided", Data: []byte("not a record")})
			}
		}},
		{note: "a forged MAC naming the key", setup: true, key: testKey, want: audit.KeyBadMAC, msgs: func(t *testing.T, js jetstream.JetStream) {
			m := auditMsg(t, verdictEvent("acme", "p1"), audit.Chain{N: 1}, testKey)
			m.Header.Set(wire.AuditMACHeader, hexSHA256([]byte("forged")))
			publish(t, js, m)
		}},
		{note: "records of the Writer, no key", setup: true, want: audit.KeyMissing, msgs: func(t *testing.T, js jetstream.JetStream) {
			a := bustest.AuditWriter(t, js, audit.Config{Key: testKey})
			if _, err := a.Trail().Seal(t.Context(), gated.AuditEvent{V: 1, Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p1"}); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			_, js := bustest.Connect(t, bustest.Server(t))
			if tc.setup {
				if _, err := bus.Setup(t.Context(), js, bus.Config{}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.msgs != nil {
				tc.msgs(t, js)
			}
			err := audit.CheckKey(t.Context(), js, tc.key)
			var mismatch *audit.KeyError
			switch {
			case tc.want == 0 && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == 0:
			case !errors.As(err, &mismatch) || !errors.Is(err, audit.ErrKeyMismatch):
				t.Fatalf("err = %v, want an KeyError", err)
			case mismatch.Problem != tc.want || mismatch.RecordKeyID != audit.KeyID(testKey) || mismatch.Seq != 1:
				t.Fatalf("got %+v (%v), want problem %d about key %s at seq 1", mismatch, err, tc.want, audit.KeyID(testKey))
			}
		})
	}
}
