package audit

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/gated/gated"

	"github.com/gated/gated/engine/wire"
	"github.com/nats-io/nats.go"
)

// The signer reuses its HMACs: every record's MAC must still be the MAC
// of that record alone, whatever was signed before it.
func TestSignerReusesMACs(t *testing.T) {
	key := bytes.Repeat([]byte{7}, MinKeyLen)
	s := newAuditSigner(key)
	for i := range 50 {
		digest := sha256.Sum256([]byte(strconv.Itoa(i % 3)))
		hdr := nats.Header{}
		s.sign(hdr, digest, 1)
		if got, want := hdr.Get(wire.AuditMACHeader), auditMAC(key, digest, 1); got != want {
			t.Fatalf("record %d: MAC %s, want %s", i, got, want)
		}
		if got, want := hdr.Get(wire.AuditHashHeader), hex.EncodeToString(digest[:]); got != want {
			t.Fatalf("record %d: hash %s, want %s", i, got, want)
		}
	}
	mac := hmac.New(sha256.New, key)
	d := sha256.Sum256([]byte("x"))
	mac.Write(d[:])
	sum := mac.Sum(nil)
	if got, want := auditMAC(key, d, 1), hex.EncodeToString(sum); got != want {
		t.Fatalf("auditMAC = %s, want HMAC-SHA-256 %s", got, want)
	}
	// A version-2 record spells the same MAC in unpadded base64url, and
	// carries no hash header.
	if got, want := auditMAC(key, d, RecordVersion), base64.RawURLEncoding.EncodeToString(sum); got != want {
		t.Fatalf("auditMAC of version 2 = %s, want %s", got, want)
	}
	hdr := nats.Header{}
	s.sign(hdr, d, RecordVersion)
	if h := hdr.Get(wire.AuditHashHeader); h != "" {
		t.Fatalf("a version-%d record has hash header %s", RecordVersion, h)
	}
}

// FuzzAppendEvent holds the hand-written envelope to encoding/json's: for
// data encoding/json wrote (as the engine's is), byte for byte; for any
// other valid data, the same document; invalid data is refused by both.
func FuzzAppendEvent(f *testing.F) {
	f.Add(1, "verdict.decided", "acme", "p-1", int64(1_700_000_000_123_456_789), "host-1", "rev1", []byte(`{"outcome":"approved","reason":"a <b> & c"}`))
	f.Add(0, "proposal.received", "_", "", int64(0), "", "", []byte(nil))
	f.Add(1, "x\u2028", "t\"\\", "id\x00", int64(-5), "é", "\xff", []byte(` { "a" : [1, 2] } `))
	f.Add(1, "e", "t", "i", int64(1), "", "", []byte(`{"a":`))
	f.Fuzz(func(t *testing.T, v int, event, tenant, id string, at int64, instance, revision string, data []byte) {
		ev := gated.AuditEvent{V: v, Event: event, Tenant: tenant, ProposalID: id, At: time.Unix(0, at).UTC(),
			Instance: instance, PolicyRevision: revision, Data: data}
		// appendEvent takes data compacted (normalizeData).
		var got []byte
		var gotErr error
		compacted := ev
		if len(data) > 0 {
			var buf bytes.Buffer
			gotErr = json.Compact(&buf, data)
			compacted.Data = buf.Bytes()
		}
		if gotErr == nil {
			got, gotErr = appendEvent(nil, compacted)
		}
		want, wantErr := json.Marshal(ev)
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("appendEvent error %v, encoding/json error %v", gotErr, wantErr)
		}
		if gotErr != nil {
			return
		}
		var gotDoc, wantDoc any
		if err := json.Unmarshal(got, &gotDoc); err != nil {
			t.Fatalf("appendEvent wrote invalid JSON %q: %v", got, err)
		}
		if err := json.Unmarshal(want, &wantDoc); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gotDoc, wantDoc) {
			t.Fatalf("appendEvent wrote\n%s\nencoding/json\n%s", got, want)
		}
		// Data as the engine writes it: encoded by encoding/json.
		var doc any
		if json.Unmarshal(data, &doc) != nil {
			return
		}
		ev.Data, _ = json.Marshal(doc)
		got, _ = appendEvent(nil, ev)
		want, _ = json.Marshal(ev)
		if !bytes.Equal(got, want) {
			t.Fatalf("appendEvent wrote\n%s\nencoding/json\n%s", got, want)
		}
	})
}

// FuzzNormalizeData: an event's data is kept as it is only when
// encoding/json's Compact would give back the same bytes; otherwise it
// is what Compact gives, and data that is not JSON is refused.
func FuzzNormalizeData(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{ "a" : 1 }`, `{"s":"a b\" c"}`, `{"s":"\\"}`, `{"a":[1, 2]}`, `{"a":"x`, `{"a":1}}`, `[1]`, ` null `, "{\"a\":\"\t\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := normalizeData(gated.AuditEvent{Event: "x", Data: data}, false)
		tr := bytes.TrimSpace(data)
		if len(tr) == 0 || string(tr) == "null" || tr[0] != '{' {
			return // absent or wrapped: not the fast path
		}
		var want bytes.Buffer
		werr := json.Compact(&want, tr)
		if (err != nil) != (werr != nil) {
			t.Fatalf("normalizeData(%q) error %v, Compact error %v", data, err, werr)
		}
		if err == nil && !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("normalizeData(%q) = %q, Compact gives %q", data, got, want.Bytes())
		}
	})
}
