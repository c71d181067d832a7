// Package audit is gated's audit trail: the hash-chained, MACed records
// of the GATED_AUDIT stream, their writer, and their reader and verifier.
//
// Every step of a decision is an gated.AuditEvent. A Writer appends the
// events of each delivery's trail (Writer.Trail, an engine.AuditTrail) to
// the stream on gated.audit.<tenant>.<event>, one hash chain per tenant
// over every gated instance: record n carries the SHA-256 of record n-1,
// and, when the Writer has a key, an HMAC of its own hash. CheckKey tells,
// before a gated writes, whether its key may extend the stream's chain.
//
// Read walks the stream's messages, decoded with DecodeRecord; Filter
// selects records by what they say. Verify checks every tenant's chain,
// the MACs when given the keys, the anchors (Head) kept from an earlier
// run, and that every verdict stored in the GATED_VERDICTS bucket names
// its own verdict.decided record; it returns a Report of the problems
// found.
//
// The stream itself is created by bus.Setup; this package only opens it.
package audit
