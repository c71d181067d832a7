// Package wire is gated's NATS contract in one place: every subject and
// header gated, fleets, reviewer tools and operators share, and the
// names of the streams and bucket a fleet reads. It imports nothing, so
// the engine, the server (package bus), the fleet client (package fleet),
// the plugin host and the command can all use it without cycles or heavy
// dependencies. No other package spells a gated subject.
package wire

// Root begins every subject of the contract.
const Root = "gated."

// Subjects of the v1 wire contract.
const (
	// ProposalSubjectPrefix + tenant + "." + action is where a fleet
	// publishes a proposal.
	ProposalSubjectPrefix = Root + "proposals."
	// ProposalSubjects matches every proposal subject: the proposal
	// stream's subjects.
	ProposalSubjects = ProposalSubjectPrefix + "*.*"
	// VerdictSubjectPrefix + tenant + "." + id is where gated publishes a
	// proposal's verdict; fleets subscribe to it before they propose.
	VerdictSubjectPrefix = Root + "verdicts."
	// ReviewSubject is the review service's endpoint for a proposal of any
	// tenant: the tenant comes from the payload. It is for single-tenant or
	// trusted deployments; give tenants ReviewSubjectPrefix + tenant.
	ReviewSubject = Root + "review"
	// ReviewSubjectPrefix + tenant is the review service's per-tenant
	// endpoint: it refuses a proposal of another tenant, so NATS
	// permissions on the subject confine a tenant to its own proposals.
	ReviewSubjectPrefix = ReviewSubject + "."
	// AuditSubjectPrefix + tenant + "." + event is where gated appends
	// audit events.
	AuditSubjectPrefix = Root + "audit."
	// OperatorSubjectPrefix + tenant + "." + proposal id is where an
	// operator decision is sent (request/reply).
	OperatorSubjectPrefix = Root + "operator."
	// FlowClearSubjectPrefix + tenant is where an operator's signed
	// clearing of an agent's flow state is sent (request/reply).
	FlowClearSubjectPrefix = Root + "flowclear."
	// ContinuationSubjectPrefix + tenant + "." + run id is where a
	// rejected run review's continuation request is published.
	ContinuationSubjectPrefix = Root + "continuations."
	// EscalationSubjectPrefix + tenant is where a run that ran out of
	// review rounds is published.
	EscalationSubjectPrefix = Root + "escalations."
	// StatusSubjectPrefix + tenant + "." + id is where gated publishes
	// each step of a proposal's progress (core NATS, best effort); a
	// tenant may subscribe to its own, gated.status.<tenant>.>.
	StatusSubjectPrefix = Root + "status."
	// StatusWatchSubjectPrefix + tenant + "." + id is where a fleet that
	// follows a proposal's status tells gated so (request/reply, every
	// gated answers): on a server it does not run, gated publishes a
	// proposal's status only when somebody asked for it.
	StatusWatchSubjectPrefix = Root + "watch."
	// StatusWatchSubjects is what every gated subscribes to for them.
	StatusWatchSubjects = StatusWatchSubjectPrefix + "*.*"
	// ToolSubjectPrefix + tool name is where tools that gated does not
	// answer itself are requested (request/reply).
	ToolSubjectPrefix = Root + "tools."
	// GrantKeysSubject answers any request with gated's grant key set
	// (docs/GRANTS.md); every tenant account may import it.
	GrantKeysSubject = Root + "grants.keys"
	// GrantSubjectPrefix + tenant + ".use" is where an executor uses a
	// grant of tenant, once (request/reply).
	GrantSubjectPrefix = Root + "grants."
	// GrantUseSubjects matches every tenant's grant-use subject.
	GrantUseSubjects = GrantSubjectPrefix + "*.use"
	// GrantUseAgentSubjects matches every agent's grant-use subject,
	// gated.grants.<tenant>.use.<agent>: a use there is accepted only for
	// a grant issued to that agent, so that NATS permissions which let
	// each agent's user publish on its own alone keep agents of one
	// tenant from using each other's grants (docs/GRANTS.md).
	GrantUseAgentSubjects = GrantSubjectPrefix + "*.use.*"
	// OutcomeSubjectPrefix + tenant + "." + proposal id is where an
	// executor reports what happened to an approved action (started,
	// succeeded, failed) or that it refused the grant; stream
	// OutcomesStream captures it.
	OutcomeSubjectPrefix = Root + "outcomes."
	// OutcomeSubjects matches every tenant's outcome subject.
	OutcomeSubjects = OutcomeSubjectPrefix + "*.*"
	// OutcomeAgentSubjects matches every agent's outcome subject,
	// gated.outcomes.<tenant>.<proposal_id>.<agent>: a report there is
	// taken in only from the agent the grant was issued to or that used
	// it. With OutcomeSubjects, the outcome stream's subjects.
	OutcomeAgentSubjects = OutcomeSubjectPrefix + "*.*.*"
)

// OutcomeSubject is where the executor of tenant's approved proposal id
// reports its outcome.
func OutcomeSubject(tenant, id string) string { return OutcomeSubjectPrefix + tenant + "." + id }

// OutcomeSubjectAs is where agent, which may publish there alone,
// reports the outcome of tenant's approved proposal id.
func OutcomeSubjectAs(tenant, id, agent string) string {
	return OutcomeSubjectPrefix + tenant + "." + id + "." + agent
}

// LocalDecisionToken takes the place of a proposal id in an outcome
// subject to make it the subject of a batch of local decisions
// (gated.LocalBatch): gated.outcomes.<tenant>.~local, or, for an agent
// that may publish on its own subjects alone,
// gated.outcomes.<tenant>.~local.<agent>. No proposal id holds "~", so
// the subject is never an outcome report's, and a gateway that may
// report outcomes may report its local decisions with no other
// permission.
const LocalDecisionToken = "~local"

// LocalDecisionSubject is where a gateway of tenant reports its local
// decisions; with agent, on that agent's subject.
func LocalDecisionSubject(tenant, agent string) string {
	if agent == "" {
		return OutcomeSubjectPrefix + tenant + "." + LocalDecisionToken
	}
	return OutcomeSubjectPrefix + tenant + "." + LocalDecisionToken + "." + agent
}

// OutcomeMsgID is the Nats-Msg-Id of an outcome report: a report sent
// again with the same nonce within the stream's duplicate window is
// dropped. The nonce is random, one per report, so that nobody who
// cannot read the report can send another message under its id first
// and have the stream drop the real report as a duplicate.
func OutcomeMsgID(tenant, id, status, nonce string) string {
	return tenant + "." + id + "." + status + "." + nonce
}

// GrantUseSubject is where an executor uses a grant of tenant.
func GrantUseSubject(tenant string) string { return GrantSubjectPrefix + tenant + ".use" }

// GrantUseSubjectAs is where agent, which may publish there alone, uses a
// grant of tenant that was issued to it.
func GrantUseSubjectAs(tenant, agent string) string { return GrantUseSubject(tenant) + "." + agent }

// Headers of the v1 wire contract.
const (
	// ToolErrorHeader, on a reply to a tool request, says the tool failed
	// and why; the body is then ignored.
	ToolErrorHeader = "Gated-Tool-Error"
	// StatusHeader, on a proposal, set to "1", says its proposer follows
	// its status (gated.status.<tenant>.<id>): gated then publishes it on
	// any server. Without it, and without a watch, gated publishes it
	// only where it can see a subscriber (its embedded server).
	StatusHeader = "Gated-Status"
	// AuditHashHeader, on an audit record, is the hex SHA-256 of the
	// record's body.
	AuditHashHeader = "Gated-Audit-Hash"
	// AuditMACHeader, on an audit record, is the hex HMAC-SHA256, under
	// the audit key, of the 32 bytes the hash header spells.
	AuditMACHeader = "Gated-Audit-Mac"
	// AuditKeyHeader, on an audit record, names the key of the MAC.
	AuditKeyHeader = "Gated-Audit-Key"
	// OperatorKeyHeader, on an operator decision, carries the operator's
	// nkey public user key ("U…").
	OperatorKeyHeader = "Gated-Operator-Key"
	// OperatorSigHeader, on an operator decision, carries the ed25519
	// signature of the exact body bytes, base64 raw URL encoded.
	OperatorSigHeader = "Gated-Operator-Sig"
	// NotifyIDHeader, on a webhook notification, identifies it: the same
	// id on a second request is the same notification delivered again.
	NotifyIDHeader = "Gated-Notify-Id"
	// NotifyKindHeader, on a webhook notification, names its kind, e.g.
	// awaiting_operator.
	NotifyKindHeader = "Gated-Notify-Kind"
	// NotifyTimestampHeader, on a webhook notification, is the Unix time
	// in seconds at which this attempt was signed.
	NotifyTimestampHeader = "Gated-Notify-Timestamp"
	// NotifySignatureHeader, on a webhook notification, is "v1=" and the
	// hex HMAC-SHA256, under the sink's secret, of the timestamp header's
	// value, a dot, and the exact body bytes.
	NotifySignatureHeader = "Gated-Notify-Signature"
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
	// GrantsBucket holds one record per grant gated issued, keyed
	// <tenant>.<proposal id>: issued, used or expired.
	GrantsBucket = "GATED_GRANTS"
	// OutcomesStream captures outcome reports (work-queue retention)
	// until gated has audited and stored them.
	OutcomesStream = "GATED_OUTCOMES"
)

// ProposalSubject is where a proposal of tenant for action is published.
func ProposalSubject(tenant, action string) string {
	return ProposalSubjectPrefix + tenant + "." + action
}

// VerdictSubject is where the verdict for tenant and id is published.
func VerdictSubject(tenant, id string) string {
	return VerdictSubjectPrefix + tenant + "." + id
}

// StatusSubject is where the status events of tenant's proposal id are
// published.
func StatusSubject(tenant, id string) string {
	return StatusSubjectPrefix + tenant + "." + id
}

// StatusWatchSubject is where a fleet asks gated for the status events of
// tenant's proposal id.
func StatusWatchSubject(tenant, id string) string {
	return StatusWatchSubjectPrefix + tenant + "." + id
}

// ContinuationSubject is where the continuations of one run are published.
func ContinuationSubject(tenant, runID string) string {
	return ContinuationSubjectPrefix + tenant + "." + runID
}

// EscalationSubject is where the escalations of a tenant's runs are
// published.
func EscalationSubject(tenant string) string {
	return EscalationSubjectPrefix + tenant
}

// OperatorSubject is where an operator decision on a tenant's proposal
// is sent.
func OperatorSubject(tenant, proposalID string) string {
	return OperatorSubjectPrefix + tenant + "." + proposalID
}

// FlowClearSubject is where an operator's clearing of the flow state of
// an agent of tenant is sent.
func FlowClearSubject(tenant string) string {
	return FlowClearSubjectPrefix + tenant
}

// AuditSubject is the subject of one audit event of tenant.
func AuditSubject(tenant, event string) string {
	return AuditSubjectPrefix + tenant + "." + event
}

// VerdictKey is the key of the verdict of tenant's proposal id in
// VerdictBucket. VerdictKey("*", "*") matches every verdict key: the
// bucket's other keys have three tokens or more.
func VerdictKey(tenant, id string) string {
	return tenant + "." + id
}

// ToolSubject is where the named tool is requested.
func ToolSubject(name string) string {
	return ToolSubjectPrefix + name
}
