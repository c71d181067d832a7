package bus

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
)

// The signer reuses its HMACs: every record's MAC must still be the MAC
// of that record alone, whatever was signed before it.
func TestSignerReusesMACs(t *testing.T) {
	key := bytes.Repeat([]byte{7}, MinAuditKeyLen)
	s := newAuditSigner(key)
	for i := range 50 {
		digest := sha256.Sum256([]byte(strconv.Itoa(i % 3)))
		hdr := nats.Header{}
		s.sign(hdr, digest)
		if got, want := hdr.Get(AuditMACHeader), auditMAC(key, digest); got != want {
			t.Fatalf("record %d: MAC %s, want %s", i, got, want)
		}
		if got, want := hdr.Get(AuditHashHeader), hex.EncodeToString(digest[:]); got != want {
			t.Fatalf("record %d: hash %s, want %s", i, got, want)
		}
	}
	mac := hmac.New(sha256.New, key)
	d := sha256.Sum256([]byte("x"))
	mac.Write(d[:])
	if got, want := auditMAC(key, d), hex.EncodeToString(mac.Sum(nil)); got != want {
		t.Fatalf("auditMAC = %s, want HMAC-SHA-256 %s", got, want)
	}
}
