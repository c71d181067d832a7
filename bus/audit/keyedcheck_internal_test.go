package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated/engine"
)

// TestCheckKeyedTakesTheWritersRecords: the quick check reads the records
// gated's writer writes, compressed or not, with strings that hold
// escapes, and gives what the full decode gives; it leaves a record
// without a MAC, or with one under another key, to the full decode.
func TestCheckKeyedTakesTheWritersRecords(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	other := []byte("fedcba9876543210fedcba9876543210")
	at := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	evs := []engine.AuditEvent{
		{V: 1, Event: engine.EventReceived, Tenant: "acme", ProposalID: "p1", At: at, Data: []byte(`{"action":"a","note":"say \"hi\\\"}]"}`)},
		{V: 1, Event: engine.EventVerdict, Tenant: "acme", ProposalID: "p1", At: at, Data: []byte(`{"outcome":"approved","x":[{"v":1,"event":"received"}]}`)},
	}
	c := newRecordChecker(map[string][]byte{KeyID(key): key}, false)
	for _, build := range []func([]engine.AuditEvent, Chain, []byte) (*nats.Msg, error){NewRecordMsg, NewCompressedRecordMsg} {
		for _, k := range [][]byte{key, other, nil} {
			m, err := build(evs, Chain{N: 2, Prev: hex.EncodeToString(make([]byte, 32))}, k)
			if err != nil {
				t.Fatal(err)
			}
			e := Entry{Seq: 7, Subject: m.Subject, Header: m.Header, Data: m.Data}
			sum := sha256.Sum256(e.Data)
			quick, ok := c.checkKeyed(e, sum, recordCheck{seq: e.Seq, digest: hex.EncodeToString(sum[:])})
			if want := string(k) == string(key); ok != want {
				t.Fatalf("key %q: quick check taken %v, want %v", k, ok, want)
			}
			if !ok {
				continue
			}
			c.prints = true // the full decode
			full := c.check(e)
			c.prints = false
			if quick.tenant != full.tenant || quick.chain != full.chain || quick.digest != full.digest ||
				quick.invalid != "" || full.invalid != "" || full.macProblem != "" || full.hashBad {
				t.Fatalf("quick %+v, full %+v", quick, full)
			}
		}
	}
}
