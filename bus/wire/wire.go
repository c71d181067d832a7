// Package wire names what gated and the fleets that use it share on NATS:
// the subjects both sides publish and subscribe to, and the stream and
// bucket a fleet reads from. It imports no NATS code, so the fleet client
// (package fleet) and the server (package bus) can both use it without
// either pulling in the other.
package wire

import "github.com/gated/gated/engine"

// Subjects of the v1 wire contract that fleets and gated share.
const (
	// VerdictSubjectPrefix + tenant + "." + id is where gated publishes a
	// proposal's verdict; fleets subscribe to it before they propose.
	VerdictSubjectPrefix = "gated.verdicts."
	// ReviewSubject is the review service's endpoint for a proposal of any
	// tenant: the tenant comes from the payload. It is for single-tenant or
	// trusted deployments; give tenants ReviewSubjectPrefix + tenant.
	ReviewSubject = "gated.review"
	// ReviewSubjectPrefix + tenant is the review service's per-tenant
	// endpoint: it refuses a proposal of another tenant, so NATS
	// permissions on the subject confine a tenant to its own proposals.
	ReviewSubjectPrefix = "gated.review."
)

// Names of the JetStream stream and bucket fleets read.
const (
	// VerdictBucket is the key-value bucket of verdicts, keyed
	// <tenant>.<id>, for idempotent replay and look-up.
	VerdictBucket = "GATED_VERDICTS"
	// RunsStream keeps the follow-ups of run reviews: continuations on
	// gated.continuations.<tenant>.<run_id> and escalations on
	// gated.escalations.<tenant>.
	RunsStream = "GATED_RUNS"
)

// VerdictSubject is where the verdict for tenant and id is published.
func VerdictSubject(tenant, id string) string {
	return VerdictSubjectPrefix + tenant + "." + id
}

// ContinuationSubject is where the continuations of one run are published.
func ContinuationSubject(tenant, runID string) string {
	return engine.ContinuationSubjectPrefix + tenant + "." + runID
}

// EscalationSubject is where the escalations of a tenant's runs are
// published.
func EscalationSubject(tenant string) string {
	return engine.EscalationSubjectPrefix + tenant
}
