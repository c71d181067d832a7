package console

import (
	"time"

	"github.com/gated/gated"
)

// AddEvent adds one audit event to a proposal's page, as the page of
// GET /api/proposals reads each event of the proposal's records.
func (out *Proposal) AddEvent(seq uint64, stored time.Time, ev gated.AuditEvent) {
	out.addEvent(seq, stored, ev)
}
