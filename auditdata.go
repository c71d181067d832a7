package gated

import (
	"encoding/json"
	"slices"
	"time"
)

// The data of every audit event, declared once: every event gated
// records has one type here (NewAuditEventData), and the readers of the
// audit stream (verify, replay, re-review, shadow, the console, the
// notifier, the reviewer metrics) decode an event's data through it. An
// event of a proposal starts its data with the AuditHead members, then
// the members of its type.

// AuditHead is what every event of a proposal carries in its data.
type AuditHead struct {
	Action string `json:"action,omitempty"`
	// Operator is the id of the human the agent acts for, once the
	// proposal is decoded.
	Operator string `json:"operator,omitempty"`
	// Delivery is the JetStream delivery count of the proposal message.
	Delivery int `json:"delivery,omitempty"`
	// PolicyEvalUS is how long the policy evaluation took, on every event
	// recorded after it.
	PolicyEvalUS int64 `json:"policy_eval_us,omitempty"`
}

// ReceivedData is the data of proposal.received: the delivery's bytes.
// Its members are in the order of their names, as the map it replaced
// wrote them.
type ReceivedData struct {
	Bytes   int    `json:"bytes"`
	SHA256  string `json:"sha256"`
	Subject string `json:"subject"`
}

// PolicyDecidedData is the data of policy.decided: the policy's decision,
// or, when the evaluation failed, Error (and ShadowRevision) alone.
type PolicyDecidedData struct {
	DeniedTools []string `json:"denied_tools"`
	Denies      []Deny   `json:"denies"`
	EvalUS      int64    `json:"eval_us"`
	// Holds are the policy's reasons to hold an action for an operator.
	Holds         []Hold     `json:"holds,omitempty"`
	Review        Route      `json:"review"`
	ReviewerTools []string   `json:"reviewer_tools"`
	Run           *RunPolicy `json:"run"`
	// ShadowRevision is the revision of the shadow policy that decided
	// the proposal beside the live one, when there is one.
	ShadowRevision string `json:"shadow_revision,omitempty"`
	SOP            string `json:"sop"`
	// Input is what a replay needs to rebuild the policy input.
	Input *ReplayInput `json:"input,omitempty"`
	// Error says why the evaluation failed; a failed evaluation records
	// it and ShadowRevision alone (the engine never sets it on a
	// decision, whose JSON appendJSON writes).
	Error string `json:"error,omitempty"`
}

// PolicyRecheckedData is the data of policy.rechecked: the decision on
// the target's changed history, and what changed.
type PolicyRecheckedData struct {
	PolicyDecidedData
	Changed []string `json:"changed,omitempty"`
}

// ReviewStartedData is the data of review.started.
type ReviewStartedData struct {
	ReviewID        string    `json:"review_id"`
	Persona         string    `json:"persona"`
	Plugin          string    `json:"plugin"`
	Tools           []string  `json:"tools"`
	Deadline        time.Time `json:"deadline"`
	Quorum          int       `json:"quorum,omitempty"`
	PersonaRevision string    `json:"persona_revision,omitempty"`
	Model           string    `json:"model,omitempty"`
}

// ReviewFinishedData is the data of review.finished: the reviewer's
// answer as judged, or (Outcome, Failure, Error) why it gave none.
type ReviewFinishedData struct {
	ReviewID      string         `json:"review_id"`
	Plugin        string         `json:"plugin"`
	PluginVersion string         `json:"plugin_version,omitempty"`
	PID           int            `json:"pid,omitempty"`
	Decision      ReviewDecision `json:"decision,omitempty"`
	Gates         any            `json:"gates,omitempty"`
	MissingGates  any            `json:"missing_gates,omitempty"`
	LatencyMS     float64        `json:"latency_ms"`
	Why           string         `json:"why,omitempty"`
	Model         string         `json:"model,omitempty"`
	Outcome       Outcome        `json:"outcome,omitempty"`
	Failure       any            `json:"failure,omitempty"`
	Error         string         `json:"error,omitempty"`
	Criteria      any            `json:"criteria,omitempty"`
	MissingWork   int            `json:"missing_work,omitempty"`
}

// OperatorAwaitedData is the data of operator.awaited: an action held
// for an operator until Deadline.
type OperatorAwaitedData struct {
	Deadline time.Time `json:"deadline"`
	Reason   string    `json:"reason"`
	Rule     string    `json:"rule"`
}

// OperatorDecidedData is the data of operator.decided.
type OperatorDecidedData struct {
	Operator     string          `json:"operator"`
	Key          string          `json:"key,omitempty"`
	Decision     string          `json:"decision,omitempty"`
	Criteria     json.RawMessage `json:"criteria,omitempty"`
	Reason       string          `json:"reason,omitempty"`
	HeldAuditSeq uint64          `json:"held_audit_seq,omitempty"`
	Outcome      Outcome         `json:"outcome,omitempty"`
}

// FlowClearedData is the data of flow.cleared: who cleared which agent's
// flow state, why, and what the state held (its record's revision, and
// its actions, or why they did not decode).
type FlowClearedData struct {
	Operator string           `json:"operator"`
	Key      string           `json:"key"`
	Agent    string           `json:"agent"`
	Reason   string           `json:"reason,omitempty"`
	Revision uint64           `json:"revision"`
	Recent   []ExecutedAction `json:"recent,omitempty"`
	Corrupt  string           `json:"corrupt,omitempty"`
}

// GrantIssuedData is the data of grant.issued: the grant's id and key,
// never its signed token.
type GrantIssuedData struct {
	GID        string `json:"gid"`
	Tenant     string `json:"tenant"`
	ProposalID string `json:"proposal_id"`
	KID        string `json:"kid"`
	Exp        int64  `json:"exp"`
}

// GrantUsedData is the data of grant.used: the grant an executor used,
// by (free text the executor chose) and, on an agent's subject, as the
// agent. Its members are in the order of their names, as the map it
// replaced wrote them.
type GrantUsedData struct {
	Action     string `json:"action"`
	As         string `json:"as,omitempty"`
	By         string `json:"by"`
	GID        string `json:"gid"`
	ProposalID string `json:"proposal_id"`
	Tenant     string `json:"tenant"`
}

// GrantRefusedData is the data of grant.refused (a use of a grant
// refused, or an executor's report that it refused the action: At and
// By "executor") and of grant.outcome_refused (an outcome report gated
// did not accept): why, and what the request named. Its members are in
// the order of their names, as the maps it replaced wrote them.
type GrantRefusedData struct {
	As         string     `json:"as,omitempty"`
	At         *time.Time `json:"at,omitempty"`
	By         string     `json:"by,omitempty"`
	GID        string     `json:"gid,omitempty"`
	ProposalID string     `json:"proposal_id,omitempty"`
	Reason     string     `json:"reason"`
}

// GrantExpiredData is the data of grant.expired: a grant that expired
// unused. Its members are in the order of their names, as the map it
// replaced wrote them.
type GrantExpiredData struct {
	Exp        int64  `json:"exp"`
	GID        string `json:"gid"`
	ProposalID string `json:"proposal_id"`
	Tenant     string `json:"tenant"`
}

// GrantOutcomeData is the data of grant.outcome: what an executor
// reported of a used grant. Its members are in the order of their names,
// as the map it replaced wrote them.
type GrantOutcomeData struct {
	Action     string              `json:"action"`
	As         string              `json:"as,omitempty"`
	At         time.Time           `json:"at"`
	Error      string              `json:"error"`
	GID        string              `json:"gid"`
	InHistory  bool                `json:"in_history"`
	ProposalID string              `json:"proposal_id"`
	Reviewers  []map[string]string `json:"reviewers"`
	Status     string              `json:"status"`
	TargetKey  string              `json:"target_key"`
	Tenant     string              `json:"tenant"`
}

// PluginEventData is the data of the plugin events: which plugin, and
// what happened to its process. Its members are in the order of their
// names, as the maps it replaced wrote them.
type PluginEventData struct {
	ActualSHA256 string  `json:"actual_sha256,omitempty"`
	Error        string  `json:"error,omitempty"`
	IntervalS    float64 `json:"interval_s,omitempty"`
	Misses       int     `json:"misses,omitempty"`
	Path         string  `json:"path,omitempty"`
	PID          int     `json:"pid,omitempty"`
	PinnedSHA256 string  `json:"pinned_sha256,omitempty"`
	Plugin       string  `json:"plugin"`
	SHA256       string  `json:"sha256,omitempty"`
	UptimeS      float64 `json:"uptime_s,omitempty"`
	Version      string  `json:"version,omitempty"`
	Why          string  `json:"why,omitempty"`
}

// AuditVerificationFailedData is the data of audit.verification_failed:
// the stream message that did not verify, and why. Its members are in
// the order of their names, as the map it replaced wrote them.
type AuditVerificationFailedData struct {
	Kind    string `json:"kind"`
	Problem string `json:"problem"`
	Seq     uint64 `json:"seq"`
	Subject string `json:"subject"`
}

// AuditNote is the data of an event no reader interprets beyond its
// head: readers show its members as stored.
type AuditNote map[string]json.RawMessage

// auditEventData names, for every event gated records, a new value of
// its data's type.
var auditEventData = map[string]func() any{
	EventReceived:                func() any { return new(ReceivedData) },
	EventInvalid:                 func() any { return new(AuditNote) },
	EventPolicyDecided:           func() any { return new(PolicyDecidedData) },
	EventPolicyRechecked:         func() any { return new(PolicyRecheckedData) },
	EventPolicyShadowDiffers:     func() any { return new(ShadowComparison) },
	EventReviewSkipped:           func() any { return new(AuditNote) },
	EventReviewStarted:           func() any { return new(ReviewStartedData) },
	EventReviewDone:              func() any { return new(ReviewFinishedData) },
	EventReviewUnrouted:          func() any { return new(AuditNote) },
	EventReviewAwaited:           func() any { return new(AuditNote) },
	EventVerdict:                 func() any { return new(Verdict) },
	EventReplayed:                func() any { return new(AuditNote) },
	EventDeduplicated:            func() any { return new(AuditNote) },
	EventToolCalled:              func() any { return new(AuditNote) },
	EventToolDenied:              func() any { return new(AuditNote) },
	EventPolicyReloaded:          func() any { return new(AuditNote) },
	EventPolicyReloadFailed:      func() any { return new(AuditNote) },
	EventOperatorAwaited:         func() any { return new(OperatorAwaitedData) },
	EventOperatorDecided:         func() any { return new(OperatorDecidedData) },
	EventOperatorRefused:         func() any { return new(AuditNote) },
	EventConsoleRefused:          func() any { return new(AuditNote) },
	EventRecordCorrupt:           func() any { return new(AuditNote) },
	EventNotifyDelivered:         func() any { return new(AuditNote) },
	EventNotifyFailed:            func() any { return new(AuditNote) },
	EventAuditVerificationFailed: func() any { return new(AuditVerificationFailedData) },
	EventPluginStarted:           func() any { return new(PluginEventData) },
	EventPluginRefused:           func() any { return new(PluginEventData) },
	EventPluginExited:            func() any { return new(PluginEventData) },
	EventPluginUnhealthy:         func() any { return new(PluginEventData) },
	EventBudgetRefused:           func() any { return new(BudgetRefusal) },
	EventGrantIssued:             func() any { return new(GrantIssuedData) },
	EventGrantUsed:               func() any { return new(GrantUsedData) },
	EventGrantRefused:            func() any { return new(GrantRefusedData) },
	EventGrantExpired:            func() any { return new(GrantExpiredData) },
	EventGrantOutcome:            func() any { return new(GrantOutcomeData) },
	EventGrantOutcomeRefused:     func() any { return new(GrantRefusedData) },
	EventFlowCleared:             func() any { return new(FlowClearedData) },
	EventLocalDecided:            func() any { return new(LocalDecision) },
	EventLocalRefused:            func() any { return new(LocalRefusedData) },
}

// AuditEventNames returns the name of every event gated records, sorted.
func AuditEventNames() []string {
	names := make([]string, 0, len(auditEventData))
	for n := range auditEventData {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// NewAuditEventData returns a new value of the data type of the event
// name, a pointer for json.Unmarshal; ok is false for a name gated does
// not record.
func NewAuditEventData(name string) (data any, ok bool) {
	f, ok := auditEventData[name]
	if !ok {
		return nil, false
	}
	return f(), true
}

// DecodeAuditData decodes the data of ev into T, the type
// NewAuditEventData gives for its event; the head's members are not T's
// and are skipped. An event without data decodes to T's zero value.
func DecodeAuditData[T any](ev AuditEvent) (T, error) {
	var d T
	if len(ev.Data) == 0 {
		return d, nil
	}
	err := json.Unmarshal(ev.Data, &d)
	return d, err
}
