package gated

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// SchemaVersion is the proposal and verdict schema version this package
// speaks.
const SchemaVersion = 1

// Kind says what a proposal asks gated to judge.
type Kind string

const (
	// KindAction gates a tool call before it runs. It is the default.
	KindAction Kind = "action"
	// KindRun reviews a finished run of an agent.
	KindRun Kind = "run"
)

// Class is the effect an action has on the world.
type Class string

const (
	// ClassRead actions observe and change nothing.
	ClassRead Class = "read"
	// ClassWrite actions change state that can be restored.
	ClassWrite Class = "write"
	// ClassDestructive actions change state that may not be restorable.
	ClassDestructive Class = "destructive"
)

// BlastRadius is how much of the world a mutating action can touch.
type BlastRadius string

const (
	// BlastSingleDevice touches one device or service instance.
	BlastSingleDevice BlastRadius = "single_device"
	// BlastCluster touches a cluster of devices.
	BlastCluster BlastRadius = "cluster"
	// BlastTenantWide touches everything a tenant owns.
	BlastTenantWide BlastRadius = "tenant_wide"
)

// Proposal is what an agent publishes before it acts: the v1 wire schema.
// Field order and JSON names are the contract in DESIGN.md.
type Proposal struct {
	V      int            `json:"v"`
	ID     string         `json:"id"`
	Tenant string         `json:"tenant"`
	Kind   Kind           `json:"kind,omitempty"`
	Action string         `json:"action"`
	Class  Class          `json:"class"`
	Target map[string]any `json:"target,omitempty"`
	// Arguments are the exact arguments the executor runs the action
	// with, when it forwards a call (gated mcp, the clients' tool
	// gates): the target says what the action touches, the arguments
	// all it is told. The policy and the reviewer read them; an approval's
	// grant binds them through proposal_sha256. No two member names may be
	// equal under case folding, at any depth.
	Arguments      map[string]any `json:"arguments,omitempty"`
	Reason         string         `json:"reason,omitempty"`
	BlastRadius    BlastRadius    `json:"blast_radius,omitempty"`
	Operator       *Principal     `json:"operator,omitempty"`
	RequestedBy    *RequestedBy   `json:"requested_by,omitempty"`
	IncidentID     string         `json:"incident_id,omitempty"`
	ContextSummary string         `json:"context_summary,omitempty"`
	Flags          Flags          `json:"flags"`
	Reviewer       string         `json:"reviewer,omitempty"`
	Criteria       []Criterion    `json:"criteria,omitempty"`
	Run            *Run           `json:"run,omitempty"`
	CreatedAt      *time.Time     `json:"created_at,omitempty"`
	// Labels are labels the agent adds to its action's, which the policy
	// data gives it (data.gated.config.flows.labels): what the action reads
	// or does, for the flow rules (docs/POLICIES.md#flows). They add to the
	// data's, never remove any; at most MaxLabels, each a ValidLabel.
	Labels []string `json:"labels,omitempty"`
}

// Principal is the human on whose behalf an agent acts: the proposal's
// operator field. It is not an operator who signs decisions on held
// verdicts (package bus).
type Principal struct {
	ID    string   `json:"id"`
	Roles []string `json:"roles,omitempty"`
}

// RequestedBy names the agent that proposes. gated uses it to keep an agent
// from reviewing its own proposal.
type RequestedBy struct {
	Agent   string `json:"agent"`
	Session string `json:"session,omitempty"`
}

// Flags are the requests an agent may attach. Every one defaults to false,
// and the default policy refuses skip_review and force_approve outright.
type Flags struct {
	SkipReview        bool `json:"skip_review"`
	ForceApprove      bool `json:"force_approve"`
	ForceApproveNoSOP bool `json:"force_approve_no_sop"`
	UserConfirmed     bool `json:"user_confirmed"`
}

// Criterion is one acceptance criterion of a run review. Kind says who
// judges it (see CriterionCommandResult and the other kinds); Params hold
// what the criterion expects and Evidence what the fleet observed.
//
//	command_result  params {"exit_code": 0} (the default), evidence
//	                {"command": "go test ./...", "exit_code": 0, "output": "..."}
//	file_contains   params {"path": "README.md", "text": "..."} or
//	                {"path": ..., "pattern": "RE2 regexp"}, evidence
//	                {"path": "README.md", "content": "..."}
//	ai_review       judged by the reviewer from the run and its diff
//	manual          judged by an operator (see OperatorDecision)
type Criterion struct {
	ID          string         `json:"id"`
	Description string         `json:"description"`
	Required    bool           `json:"required"`
	Kind        string         `json:"kind,omitempty"`
	Params      map[string]any `json:"params,omitempty"`
	Evidence    map[string]any `json:"evidence,omitempty"`
}

// Run describes a finished run for proposals of kind run.
type Run struct {
	RunID      string `json:"run_id"`
	TaskID     string `json:"task_id,omitempty"`
	Status     string `json:"status"`
	Summary    string `json:"summary,omitempty"`
	Diff       string `json:"diff,omitempty"`
	TestOutput string `json:"test_output,omitempty"`
	// Round counts from 1; a continuation asks for the next one.
	Round int `json:"round"`
	// Worker is the agent that did the run. It never reviews it.
	Worker       string        `json:"worker"`
	PriorReviews []PriorReview `json:"prior_reviews,omitempty"`
}

// Mutating reports whether the proposal's class changes the world.
func (p *Proposal) Mutating() bool {
	return p.Class == ClassWrite || p.Class == ClassDestructive
}

// TargetKey is a digest of the canonical target (keys sorted, numbers as
// written), so two proposals on the same target share it whatever the key
// order of their JSON. It is empty for a proposal without a target.
func (p *Proposal) TargetKey() string {
	if len(p.Target) == 0 {
		return ""
	}
	canon, err := json.Marshal(p.Target) // maps marshal with sorted keys
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:16])
}

// UnknownTenant is the audit tenant token of events whose tenant could not
// be recovered from a malformed proposal, and of gated's own events (policy
// reloads). Proposals cannot use it: "_" is not a valid tenant.
const UnknownTenant = "_"
