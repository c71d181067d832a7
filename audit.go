package gated

import (
	"encoding/json"
	"time"
)

// The audit events: the envelope of every record of the audit stream
// (gated.audit.<tenant>.<event>) and the name of every event. The data
// of each event has its type in auditdata.go.

// AuditEvent is one step on the way to a verdict. Every event of the
// audit stream has this one schema; what is particular to an event is in
// Data, a JSON object. Events of a proposal carry in Data its "action",
// its "operator" (the operator id, once the proposal is decoded),
// the JetStream "delivery" count and, once the policy has run, the
// "policy_eval_us" it took.
type AuditEvent struct {
	V          int       `json:"v"`
	Event      string    `json:"event"`
	Tenant     string    `json:"tenant"`
	ProposalID string    `json:"proposal_id,omitempty"`
	At         time.Time `json:"at"`
	// Instance names the gated process that recorded the event; the audit
	// trail fills it in when it is empty.
	Instance       string          `json:"instance,omitempty"`
	PolicyRevision string          `json:"policy_revision,omitempty"`
	Data           json.RawMessage `json:"data,omitempty"`
}

// Audit event names. They become the last tokens of the audit subject
// audit.<tenant>.<event>.
const (
	EventReceived      = "proposal.received"
	EventInvalid       = "proposal.invalid"
	EventPolicyDecided = "policy.decided"
	EventReviewSkipped = "review.skipped"
	EventReviewStarted = "review.started"
	EventReviewDone    = "review.finished"
	// EventReviewUnrouted records a persona whose reviewer the Router
	// could not place (its plugin could not be started, is not
	// configured, or gated is shutting down): the persona, the plugin,
	// how it failed and the Router's error, which the verdict never
	// holds.
	EventReviewUnrouted = "review.unrouted"
	// EventReviewAwaited records that a proposal found its review claimed
	// by another message carrying the same proposal and waited for that
	// review's verdict instead of reviewing again.
	EventReviewAwaited = "review.awaited"
	EventVerdict       = "verdict.decided"
	EventReplayed      = "verdict.replayed"
	// EventDeduplicated records that a proposal got the answer of an
	// identical proposal rejected shortly before, instead of a new
	// judgement.
	EventDeduplicated = "proposal.deduplicated"
	// EventToolCalled and EventToolDenied record a reviewer's tool call
	// through the host: run, or refused.
	EventToolCalled = "tool.called"
	EventToolDenied = "tool.denied"
	// EventPolicyReloaded and EventPolicyReloadFailed are gated's own
	// events, under the UnknownTenant token: a policy swapped in, and a
	// policy refused (the last good one stays in force).
	EventPolicyReloaded     = "policy.reloaded"
	EventPolicyReloadFailed = "policy.reload_failed"
	// EventOperatorDecided records an operator's decision on the manual
	// criteria of a held run verdict; EventOperatorRefused an operator
	// message gated did not accept, and why.
	EventOperatorDecided = "operator.decided"
	EventOperatorRefused = "operator.refused"
	// EventOperatorAwaited records that a proposal's verdict is held for
	// an operator: its data names the deadline (RFC 3339), the reason and
	// the rule that routed it.
	EventOperatorAwaited = "operator.awaited"
	// EventConsoleRefused records a request to the web console that was
	// refused because it asked for a tenant the operator may not see or
	// decide for, or did not come from the console's own origin.
	EventConsoleRefused = "console.refused"
	// EventRecordCorrupt records a record read back from gated's store
	// that is not what gated stored under its key; it was refused, not
	// replayed or used. It is filed under the key's tenant.
	EventRecordCorrupt = "record.corrupt"
	// EventNotifyDelivered and EventNotifyFailed record a notification
	// delivered to a webhook sink, and one that was not (its attempts ran
	// out, it grew too old, or the sink's queue was full). The notifier
	// sends no notification for them.
	EventNotifyDelivered = "notify.delivered"
	EventNotifyFailed    = "notify.failed"
	// EventAuditVerificationFailed records a message of the audit stream
	// that did not verify as gated read it while serving: not a record,
	// a body that does not match its hash, a MAC that does not verify, or
	// a broken chain link. It is filed under the tenant of the message.
	EventAuditVerificationFailed = "audit.verification_failed"
)

// EventPolicyRechecked records that an approval found its target's history
// changed since the policy read it (another approval joined it), and what
// the policy decided on the history as it then stood: the verdict stands
// when it denies nothing and asks for nothing more than the approval had,
// and is rejected at stage policy otherwise. Its data has the shape of
// policy.decided's, with the fresh input, and "changed", what the policy
// asks for that the approval did not have.
const EventPolicyRechecked = "policy.rechecked"

// EventPolicyShadowDiffers records that the shadow policy (a candidate
// evaluated beside the live one, serve --shadow-policies) decided a proposal
// otherwise than the live policy. Its data is a ShadowComparison.
const EventPolicyShadowDiffers = "policy.shadow_differs"

// EventBudgetRefused records that a proposal was refused by a budget
// before anything expensive ran; its data is the BudgetRefusal.
const EventBudgetRefused = "budget.refused"

// Audit events of grants. grant.issued is recorded by the engine with the
// approved verdict it belongs to; the others by gated's grant endpoint
// and expiry sweep.
const (
	// EventGrantIssued records a grant an approved verdict carries: gid,
	// tenant, proposal_id, kid, exp.
	EventGrantIssued = "grant.issued"
	// EventGrantUsed records a grant an executor used (its single use).
	EventGrantUsed = "grant.used"
	// EventGrantRefused records a use of a grant that was refused, and why.
	EventGrantRefused = "grant.refused"
	// EventGrantExpired records a grant that expired unused.
	EventGrantExpired = "grant.expired"
	// EventGrantOutcome records what an executor reported about a used
	// grant: gid, tenant, proposal_id, action, target_key, status, error,
	// reviewers.
	EventGrantOutcome = "grant.outcome"
	// EventGrantOutcomeRefused records an outcome report gated did not
	// accept (malformed, or naming a grant that is unknown, unused, of
	// another tenant or another gid), and why.
	EventGrantOutcomeRefused = "grant.outcome_refused"

	// EventLocalDecided records a call a gateway of the tenant decided
	// itself (gated mcp's reads the policy approves at its own stage),
	// reported to gated in a batch; EventLocalRefused a batch gated
	// refused, with why.
	EventLocalDecided = "local.decided"
	EventLocalRefused = "local.refused"
)

// EventFlowCleared records that an operator cleared an agent's flow state
// with a signed decision (gated operator clear-flow), before the state is
// cleared; its data is a FlowClearedData.
const EventFlowCleared = "flow.cleared"

// The events of a reviewer plugin's process, under the UnknownTenant
// token: plugins.Host records them.
const (
	EventPluginStarted   = "plugin.started"
	EventPluginRefused   = "plugin.refused"
	EventPluginExited    = "plugin.exited"
	EventPluginUnhealthy = "plugin.unhealthy"
)
