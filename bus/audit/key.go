package bus

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

// ErrAuditKeyMismatch is wrapped by the error of CheckAuditKey when a key
// would not extend the audit stream's chain of MACed records.
var ErrAuditKeyMismatch = errors.New("the audit key does not match the audit stream")

// maxAuditTipScan bounds how many messages CheckAuditKey reads back from
// the end of the audit stream looking for a valid record.
const maxAuditTipScan = 1000

// AuditKeyProblem says why a key does not match the audit stream.
type AuditKeyProblem int

const (
	// AuditKeyMissing: the newest record is MACed, and there is no key.
	AuditKeyMissing AuditKeyProblem = iota + 1
	// AuditKeyOther: the newest record is MACed with another key.
	AuditKeyOther
	// AuditKeyBadMAC: the newest record names the key, but its MAC does
	// not verify under it: the record was forged or modified.
	AuditKeyBadMAC
)

// AuditKeyError is the error of CheckAuditKey when the key does not
// match the newest record of the audit stream.
type AuditKeyError struct {
	Problem AuditKeyProblem
	// Seq is the stream sequence of the newest valid record, and
	// RecordKeyID the key id it names.
	Seq         uint64
	RecordKeyID string
	// KeyID is the id of the key checked; empty when there is none.
	KeyID string
}

// Error says which key the stream's newest record names and what is wrong
// with the key checked.
func (e *AuditKeyError) Error() string {
	switch e.Problem {
	case AuditKeyMissing:
		return fmt.Sprintf("the audit stream %s holds records MACed with key %s (the newest at seq %d), and there is no audit key to extend it with", AuditStream, e.RecordKeyID, e.Seq)
	case AuditKeyOther:
		return fmt.Sprintf("the audit key is key %s, but the newest record of the audit stream %s (seq %d) is MACed with key %s", e.KeyID, AuditStream, e.Seq, e.RecordKeyID)
	default:
		return fmt.Sprintf("the newest record of the audit stream %s (seq %d) names key %s, but its MAC does not verify under it: the record was forged or modified", AuditStream, e.Seq, e.RecordKeyID)
	}
}

// Unwrap makes the error match ErrAuditKeyMismatch.
func (e *AuditKeyError) Unwrap() error { return ErrAuditKeyMismatch }

// CheckAuditKey checks, before a gated writes its first record, that
// records MACed with key (none when key is empty) may extend the audit
// stream: its newest valid record (looking back past at most 1000
// messages that are not records) carries no MAC, or a MAC that verifies
// under key. A stream that does not exist or holds no valid record
// accepts any key. A mismatch is an *AuditKeyError; other errors are
// NATS's.
func CheckAuditKey(ctx context.Context, js jetstream.JetStream, key []byte) error {
	stream, err := js.Stream(ctx, AuditStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening stream %s: %w", AuditStream, err)
	}
	tip, err := newestAuditRecord(ctx, stream)
	if err != nil || tip == nil || tip.MAC == "" {
		return err
	}
	keyErr := &AuditKeyError{Seq: tip.Seq, RecordKeyID: tip.KeyID}
	switch {
	case len(key) == 0:
		keyErr.Problem = AuditKeyMissing
		return keyErr
	case AuditKeyID(key) != tip.KeyID:
		keyErr.Problem, keyErr.KeyID = AuditKeyOther, AuditKeyID(key)
		return keyErr
	case !tip.macValid(key):
		keyErr.Problem, keyErr.KeyID = AuditKeyBadMAC, AuditKeyID(key)
		return keyErr
	}
	return nil
}

// newestAuditRecord returns the stream's newest valid record, or nil when
// none is among its last maxAuditTipScan messages.
func newestAuditRecord(ctx context.Context, stream jetstream.Stream) (*AuditRecord, error) {
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", AuditStream, err)
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
		r, err := DecodeAuditRecord(m.Subject, m.Header, m.Data)
		if err != nil {
			continue
		}
		r.Seq, r.Stored = m.Sequence, m.Time
		return r, nil
	}
	return nil, nil
}

// macValid reports whether the record's MAC verifies under key.
func (r *AuditRecord) macValid(key []byte) bool {
	raw, err := hex.DecodeString(r.Hash)
	if err != nil || len(raw) != sha256.Size {
		return false
	}
	return hmac.Equal([]byte(auditMAC(key, [sha256.Size]byte(raw))), []byte(strings.ToLower(r.MAC)))
}
