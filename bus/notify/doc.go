// Package notify tells people outside gated what needs them: it sends
// webhook notifications when a proposal waits for an operator, a run is
// escalated, a verdict times out, a reviewer plugin goes down, the audit
// trail fails to verify, or (on request) a proposal is decided.
//
// A Notifier reads the GATED_AUDIT stream with a durable JetStream
// consumer, so the events gated appends while no notifier runs are sent
// once one starts again, and several gated processes sharing the consumer
// send each event once between them. It maps records to notifications
// (Classify), and hands each to the sinks of a Config whose kinds and
// tenants match. Every sink delivers from a bounded queue of its own,
// with a timeout per request, exponential backoff with jitter between
// attempts, and a bound on attempts and on age; a redirect is a failure,
// never followed. Every delivery and every failure is appended to the
// audit stream (notify.delivered, notify.failed), which the Notifier
// reads back but never notifies about.
//
// Nothing here is on the path of a decision: the engine appends its
// records and moves on; a sink that hangs, fails or is gone delays only
// its own queue.
//
// While it reads, the Notifier also checks each message of the stream on
// its own (a gated record, a body that matches its hash, a MAC under
// gated's key) and against the record before it of the same tenant when
// it read that one too, and appends an audit.verification_failed record
// for a message that fails; that record is the audit_verification_failed
// notification.
package notify
