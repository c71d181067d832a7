package store

import (
	"fmt"

	"github.com/gated/gated"
)

// Kinds of the records gated keeps in the verdict bucket, as RecordError
// names them.
const (
	RecordVerdict = "verdict"
	RecordClaim   = "claim"
	RecordRun     = "run"
	RecordHistory = "history"
)

// RecordError says that a record read back from the verdict bucket is not
// what gated stores under its key: it does not decode, or it names another
// tenant, proposal, run or target. Only gated writes the bucket, so such a
// record was put there by something else (with a NATS deployment that let
// a client write into gated's account, for example as the reply subject of
// a JetStream publish). It wraps gated.ErrCorruptRecord.
type RecordError struct {
	// Kind is RecordVerdict, RecordClaim, RecordRun or RecordHistory.
	Kind string `json:"kind"`
	// Tenant is the key's tenant token.
	Tenant string `json:"tenant"`
	// Key is the bucket key, Revision the entry's revision.
	Key      string `json:"key"`
	Revision uint64 `json:"revision"`
	// Problem says what does not match.
	Problem string `json:"problem"`
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("%s record %s (revision %d) is not gated's: %s", e.Kind, e.Key, e.Revision, e.Problem)
}

// Unwrap lets errors.Is match gated.ErrCorruptRecord.
func (e *RecordError) Unwrap() error { return gated.ErrCorruptRecord }
