package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
)

// TestCheckKeyedTakesTheWritersRecords: the quick check reads the records
// gated's writer writes, compressed or not, with strings that hold
// escapes and data that looks like events, with and without a folded
// grant, and gives what the full decode gives, the verdict's print
// included; it leaves a record without a MAC, or with one under another
// key, to the full decode.
func TestCheckKeyedTakesTheWritersRecords(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	other := []byte("fedcba9876543210fedcba9876543210")
	at := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	ev := func(name, data string) gated.AuditEvent {
		return gated.AuditEvent{V: 1, Event: name, Tenant: "acme", ProposalID: "p1", At: at, Data: []byte(data)}
	}
	verdict := `{"operator":"alice","delivery":1,"v":1,"proposal_id":"p1","tenant":"acme","action":"a","kind":"action","outcome":"approved","approved":true,"stage":"policy","reason":"ok","decided_at":"2026-11-01T09:00:00Z","latency_ms":1,"audit_seq":0}`
	trails := map[string][]gated.AuditEvent{
		"escapes": {ev(gated.EventReceived, `{"action":"a","note":"say \"hi\\\"}]","x":[{"v":1,"event":"verdict.decided"}]}`),
			ev(gated.EventVerdict, verdict)},
		"folded grant": {ev(gated.EventReceived, `{"action":"a"}`),
			ev(gated.EventGrantIssued, `{"gid":"g1","tenant":"acme","proposal_id":"p1","kid":"k1","exp":1}`),
			ev(gated.EventVerdict, verdict[:len(verdict)-1]+`,"grant":"tok"}`)},
		"no verdict": {ev(gated.EventReceived, `{"action":"a"}`)},
	}
	for note, evs := range trails {
		for _, build := range []func([]gated.AuditEvent, Chain, []byte) (*nats.Msg, error){NewRecordMsg, NewCompressedRecordMsg} {
			for _, k := range [][]byte{key, other, nil} {
				m, err := build(evs, Chain{N: 2, Prev: hex.EncodeToString(make([]byte, 32))}, k)
				if err != nil {
					t.Fatal(err)
				}
				e := Entry{Seq: 7, Subject: m.Subject, Header: m.Header, Data: m.Data}
				sum := sha256.Sum256(e.Data)
				rc := recordCheck{seq: e.Seq, digest: hex.EncodeToString(sum[:])}
				for _, prints := range []bool{false, true} {
					c := newRecordChecker(map[string][]byte{KeyID(key): key}, prints)
					quick, ok := c.checkKeyed(e, sum, rc)
					if want := string(k) == string(key); ok != want {
						t.Fatalf("%s, key %q, prints %v: quick check taken %v, want %v", note, k, prints, ok, want)
					}
					if !ok {
						continue
					}
					r, err := decodeRecord(e.Subject, e.Header, e.Data, nil)
					if err != nil {
						t.Fatal(err)
					}
					full := c.checkDecoded(r, rc, sum)
					if quick.tenant != full.tenant || quick.chain != full.chain || quick.digest != full.digest ||
						quick.verdict != full.verdict && prints || quick.print != full.print || quick.printable != full.printable ||
						quick.byGID != full.byGID || full.invalid != "" || full.macProblem != "" || full.hashBad {
						t.Fatalf("%s, prints %v: quick %+v, full %+v", note, prints, quick, full)
					}
					if prints && note != "no verdict" && !quick.printable {
						t.Fatalf("%s: no print", note)
					}
				}
			}
		}
	}
}
