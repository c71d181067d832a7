// Package bustest starts gated for tests on a real NATS server with
// JetStream (internal/natstest starts the server): gated's intake over it,
// with the real engine and default policy, the gate serve runs
// (internal/server), and a fleet client of it, with the proposals and
// verdicts the tests send and a sample of every audit event.
package bustest
