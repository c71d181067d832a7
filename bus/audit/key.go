package audit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// maxAuditTipScan bounds how many messages CheckKey reads back from
// the end of the audit stream looking for a valid record.
const maxAuditTipScan = 1000

// CheckKey checks, before a gated writes its first record, that
// records MACed with key (none when key is empty) may extend the audit
// stream: its newest valid record (looking back past at most 1000
// messages that are not records) carries no MAC, or a MAC that verifies
// under key. A stream that does not exist or holds no valid record
// accepts any key. A mismatch is an *KeyError; other errors are
// NATS's.
func CheckKey(ctx context.Context, js jetstream.JetStream, key []byte) error {
	stream, err := js.Stream(ctx, Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening stream %s: %w", Stream, err)
	}
	tip, err := newestAuditRecord(ctx, stream)
	if err != nil || tip == nil || tip.MAC == "" {
		return err
	}
	keyErr := &KeyError{Seq: tip.Seq, RecordKeyID: tip.KeyID}
	switch {
	case len(key) == 0:
		keyErr.Problem = KeyMissing
		return keyErr
	case KeyID(key) != tip.KeyID:
		keyErr.Problem, keyErr.KeyID = KeyOther, KeyID(key)
		return keyErr
	case !tip.macValid(key):
		keyErr.Problem, keyErr.KeyID = KeyBadMAC, KeyID(key)
		return keyErr
	}
	return nil
}

// newestAuditRecord returns the stream's newest valid record, or nil when
// none is among its last maxAuditTipScan messages.
func newestAuditRecord(ctx context.Context, stream jetstream.Stream) (*Record, error) {
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", Stream, err)
	}
	first, last := max(info.State.FirstSeq, 1), info.State.LastSeq
	for seq, n := last, 0; seq >= first && seq > 0 && n < maxAuditTipScan; seq, n = seq-1, n+1 {
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading audit record %d: %w", seq, err)
		}
		r, err := DecodeRecord(m.Subject, m.Header, m.Data)
		if err != nil {
			continue
		}
		r.Seq, r.Stored = m.Sequence, m.Time
		return r, nil
	}
	return nil, nil
}

// macValid reports whether the record's MAC verifies under key.
func (r *Record) macValid(key []byte) bool {
	digest, ok := r.macDigest()
	return ok && hmac.Equal([]byte(auditMAC(key, digest, r.V)), []byte(r.macText()))
}

// macDigest is what the record's MAC covers: the SHA-256 of its body, as
// its hash header spells it on a version-1 record. ok is false when a
// version-1 hash header does not spell one.
func (r *Record) macDigest() (digest [sha256.Size]byte, ok bool) {
	if r.V > 1 {
		return sha256.Sum256(r.Body), true
	}
	raw, err := hex.DecodeString(r.Hash)
	if err != nil || len(raw) != sha256.Size {
		return digest, false
	}
	return [sha256.Size]byte(raw), true
}

// macText is the MAC header as compared: hex is read in either case.
func (r *Record) macText() string {
	if r.V > 1 {
		return r.MAC
	}
	return strings.ToLower(r.MAC)
}
