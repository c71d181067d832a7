// Package fleet is gated's client for agent fleets: it proposes an action,
// waits for gated's verdict, and lets a tool run only on an approval.
//
// A Client wraps a NATS connection. Client.Propose and Client.ProposeRaw
// publish a proposal and wait for its verdict; Client.RequestReview asks the
// review service instead; Client.Verdict looks a stored verdict up;
// Client.Watch (and the WithStatus option of ProposeWith and ProposeRaw)
// follows a proposal's progress on its status subject; and
// Client.Continuations and Client.Escalations follow the rounds of run
// reviews. A ToolGate puts a fleet's tools behind gated: Guard wraps a Go
// function so that a write or destructive call runs only after gated
// approves it, and ToolGate.Authorize serves runtimes that dispatch tools
// dynamically.
//
// Every call fails closed: its error is nil only for an approval of exactly
// the proposal sent, confirmed by the stored verdict that only gated can
// write. A verdict that is not an approval comes as a *VerdictError and a
// refusal of the review service as a *ServiceError; errors.Is matches both
// against the sentinel errors of this package.
//
// The package needs only the NATS client library: a fleet that imports it
// does not compile the NATS server, OPA or the plugin host that gated
// itself is built from.
package fleet
