package audit

import (
	"errors"
	"fmt"

	"github.com/gated/gated/engine"
)

// Sentinel errors of the package.
var (
	// ErrInvalidConfig is wrapped by the errors of NewWriter about its
	// Config.
	ErrInvalidConfig = errors.New("invalid audit writer configuration")
	// ErrClosed means the Writer was closed: the event was not
	// recorded.
	ErrClosed = errors.New("the auditor is closed")
	// ErrTrailSealed means the trail was sealed already; start a new trail
	// with Writer.Trail. It is engine.ErrTrailSealed, which the
	// engine.AuditTrail contract names.
	ErrTrailSealed = engine.ErrTrailSealed
	// ErrNoStream means the GATED_AUDIT stream does not exist: run
	// `gated serve` (or bus.Setup) against the server first.
	ErrNoStream = errors.New("the audit stream " + Stream + " does not exist (has gated serve run against this NATS server?)")
)

// ErrInvalidRecord is wrapped by every error of DecodeRecord: the
// message is not a record gated wrote.
var ErrInvalidRecord = errors.New("not a valid gated audit record")

// ErrKeyMismatch is wrapped by the error of CheckKey when a key
// would not extend the audit stream's chain of MACed records.
var ErrKeyMismatch = errors.New("the audit key does not match the audit stream")

// KeyProblem says why a key does not match the audit stream.
type KeyProblem int

const (
	// KeyMissing: the newest record is MACed, and there is no key.
	KeyMissing KeyProblem = iota + 1
	// KeyOther: the newest record is MACed with another key.
	KeyOther
	// KeyBadMAC: the newest record names the key, but its MAC does
	// not verify under it: the record was forged or modified.
	KeyBadMAC
)

// KeyError is the error of CheckKey when the key does not
// match the newest record of the audit stream.
type KeyError struct {
	Problem KeyProblem
	// Seq is the stream sequence of the newest valid record, and
	// RecordKeyID the key id it names.
	Seq         uint64
	RecordKeyID string
	// KeyID is the id of the key checked; empty when there is none.
	KeyID string
}

// Error says which key the stream's newest record names and what is wrong
// with the key checked.
func (e *KeyError) Error() string {
	switch e.Problem {
	case KeyMissing:
		return fmt.Sprintf("the audit stream %s holds records MACed with key %s (the newest at seq %d), and there is no audit key to extend it with", Stream, e.RecordKeyID, e.Seq)
	case KeyOther:
		return fmt.Sprintf("the audit key is key %s, but the newest record of the audit stream %s (seq %d) is MACed with key %s", e.KeyID, Stream, e.Seq, e.RecordKeyID)
	default:
		return fmt.Sprintf("the newest record of the audit stream %s (seq %d) names key %s, but its MAC does not verify under it: the record was forged or modified", Stream, e.Seq, e.RecordKeyID)
	}
}

// Unwrap makes the error match ErrKeyMismatch.
func (e *KeyError) Unwrap() error { return ErrKeyMismatch }
