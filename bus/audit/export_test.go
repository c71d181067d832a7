package audit

import (
	"testing"

	"github.com/gated/gated"
	"github.com/nats-io/nats.go"
)

// Queued is how many events wait in a's writer queues, so that a
// test can tell when a writer has taken an event.
func Queued(a *Writer) int {
	n := 0
	for _, w := range a.writers {
		n += len(w.in)
	}
	return n
}

// Enqueueing reports whether a Record or Seal is inside a's queueing
// section (holding its read lock), as one blocked on a full queue is.
func Enqueueing(a *Writer) bool {
	if a.mu.TryLock() {
		a.mu.Unlock()
		return false
	}
	return true
}

// SetVerdictWindow makes the verdict check's windows hold recent verdict
// records and waiting stored verdicts, until the test ends.
func SetVerdictWindow(t interface{ Cleanup(func()) }, recent, waiting int) {
	r, w := recentVerdicts, waitingVerdicts
	recentVerdicts, waitingVerdicts = recent, waiting
	t.Cleanup(func() { recentVerdicts, waitingVerdicts = r, w })
}

// NewLegacyRecordMsg builds the stream message of a legacy record of
// version 2, as gated wrote it before version 3: its JSON, or compressed.
func NewLegacyRecordMsg(evs []gated.AuditEvent, c Chain, key []byte, compress bool) (*nats.Msg, error) {
	e, err := encodeV2(evs, false)
	if err != nil {
		return nil, err
	}
	e.compress = compress
	m, _ := e.msg(c, newAuditSigner(key))
	return m, nil
}

// DecodeInFull makes Verify decode every record in full, as it does
// without keys, until the test ends.
func DecodeInFull(t testing.TB) {
	quickKeyed = false
	t.Cleanup(func() { quickKeyed = true })
}
