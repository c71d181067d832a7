// Package store keeps gated's verdicts in the GATED_VERDICTS JetStream
// key-value bucket.
//
// A [Verdicts] store implements engine.VerdictStore: the verdict of each
// proposal for idempotent replay, the recent approvals on each target that
// the policy reads as history, the review claims that let many messages
// carrying one proposal have it reviewed once, and the record of a run's
// rounds. Every record read back is checked against its key; one that is
// not gated's is refused with a [*RecordError] and never used as state.
//
// The bucket itself is created by the server's setup (bus.Setup); this
// package only reads and writes it, and does not import bus.
package store
