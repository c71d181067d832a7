package gated

import (
	"encoding/json"
	"time"

	"github.com/gated/gated/internal/jsonw"
	"github.com/gated/gated/internal/textcut"
)

// Outcome is the final answer gated gives a proposal.
type Outcome string

const (
	// OutcomeApproved means the action may run. It is the only outcome for
	// which Verdict.Approved is true.
	OutcomeApproved Outcome = "approved"
	// OutcomeRejected means the policy or a reviewer said no.
	OutcomeRejected Outcome = "rejected"
	// OutcomeBlocked means no reviewer could be routed: a missing plugin or
	// persona, an open circuit, or only the proposer itself to review.
	OutcomeBlocked Outcome = "blocked"
	// OutcomeError means a reviewer, tool or piece of infrastructure failed.
	OutcomeError Outcome = "error"
	// OutcomeTimeout means the review passed its deadline.
	OutcomeTimeout Outcome = "timeout"
	// OutcomeInvalid means the proposal itself is malformed.
	OutcomeInvalid Outcome = "invalid"
)

// Stage is the pipeline step that produced a verdict.
type Stage string

const (
	// StageValidation is decoding and validation of the proposal.
	StageValidation Stage = "validation"
	// StagePolicy is the Rego policy.
	StagePolicy Stage = "policy"
	// StageDedupe is the replay of an earlier identical rejection.
	StageDedupe Stage = "dedupe"
	// StageReview is the reviewer plugin.
	StageReview Stage = "review"
	// StageOperator is an operator's decision on the manual criteria of a
	// run review, or on an action, that was held for it; and the timeout
	// of a held action whose deadline passed.
	StageOperator Stage = "operator"
)

// Verdict is gated's answer to a proposal: the v1 wire schema.
type Verdict struct {
	V          int        `json:"v"`
	ProposalID string     `json:"proposal_id"`
	Tenant     string     `json:"tenant"`
	Action     string     `json:"action"`
	Kind       Kind       `json:"kind"`
	Outcome    Outcome    `json:"outcome"`
	Approved   bool       `json:"approved"`
	Stage      Stage      `json:"stage"`
	Reason     string     `json:"reason"`
	Policy     *PolicyRef `json:"policy,omitempty"`
	Reviews    []Review   `json:"reviews,omitempty"`
	DecidedAt  time.Time  `json:"decided_at"`
	LatencyMS  float64    `json:"latency_ms"`
	AuditSeq   uint64     `json:"audit_seq"`
	// ProposalSHA256 is the digest of the proposal bytes the verdict
	// answers. A proposal that reuses an id with other bytes is refused
	// instead of being handed somebody else's verdict.
	ProposalSHA256 string `json:"proposal_sha256,omitempty"`
	// TargetKey identifies the target of a mutating proposal (see
	// TargetKey); the store keeps recent approvals per target so the policy
	// can refuse parallel operations.
	TargetKey string `json:"target_key,omitempty"`
	// Agent is the proposing agent (requested_by.agent). The policy tells
	// an agent's own recent operations on a target from other agents'.
	Agent string `json:"agent,omitempty"`
	// DuplicateOf names the earlier proposal whose rejection a verdict at
	// stage dedupe repeats.
	DuplicateOf string `json:"duplicate_of,omitempty"`
	// Run is the run review's part of the verdict of a kind run proposal.
	Run *RunVerdict `json:"run,omitempty"`
	// AwaitingOperator is set on an action's verdict that the policy
	// holds for an operator: the outcome is blocked, and the verdict is
	// not final until an operator decides or the deadline passes.
	AwaitingOperator *OperatorHold `json:"awaiting_operator,omitempty"`
	// Operator is the operator's decision on a held action: who decided,
	// with which key, and why.
	Operator *OperatorRef `json:"operator_decision,omitempty"`
	// Grant is the signed grant of an approved action (docs/GRANTS.md):
	// set on every approved verdict of kind action, on no other.
	Grant string `json:"grant,omitempty"`
	// Budget is set on a verdict refused by a budget before anything
	// expensive ran: the outcome is blocked, and it names the limit and
	// when it resets.
	Budget *BudgetRefusal `json:"budget,omitempty"`
	// Execution is the last outcome the executor of an approval reported.
	// It is set only on the entries of a target's history (what the
	// policy sees as input.history[i].execution), never on a verdict
	// that is published or stored under its proposal.
	Execution *Execution `json:"execution,omitempty"`
	// Labels are the labels the proposal added to its action's (its
	// labels member): the verdict keeps them so that the action's
	// execution, when its grant is used, carries them into the agent's
	// flow state with the policy data's.
	Labels []string `json:"labels,omitempty"`

	// encoded is the verdict's JSON, written once by the engine when the
	// verdict was final (see JSON). It holds for this Verdict at
	// encodedSeq only: encodedFor tells a copy, which may be changed, from
	// the verdict itself.
	encoded    []byte
	encodedFor *Verdict
	encodedSeq uint64
}

// JSON returns the verdict's wire encoding. A verdict the engine decided
// was encoded once, for its audit record, and that encoding is returned,
// so that storing and publishing the verdict do not encode it again; any
// other verdict, a copy, or one whose AuditSeq changed since, is encoded
// now.
func (v *Verdict) JSON() ([]byte, error) {
	if v.encodedFor == v && v.encodedSeq == v.AuditSeq && v.encoded != nil {
		return v.encoded, nil
	}
	return json.Marshal(v)
}

// SetAuditSeq sets v.AuditSeq to seq. doc is v's JSON with audit_seq 0,
// as gated's engine encoded it for the verdict's audit record: the
// sequence is spliced into it, and the result is what JSON returns from
// then on, so that storing and publishing the verdict do not encode it
// again. When doc has no top-level audit_seq, JSON encodes v anew.
func (v *Verdict) SetAuditSeq(seq uint64, doc []byte) {
	v.AuditSeq = seq
	if sealed, ok := jsonw.SetTopLevelUint(doc, "audit_seq", seq); ok {
		v.keepEncoding(sealed)
	}
}

// keepEncoding records doc, v's JSON at its current AuditSeq, for JSON.
func (v *Verdict) keepEncoding(doc []byte) {
	v.encoded, v.encodedFor, v.encodedSeq = doc, v, v.AuditSeq
}

// OperatorHold says why an action's verdict waits for an operator and
// until when.
type OperatorHold struct {
	// Deadline is when the hold ends in a timeout, never an approval.
	Deadline time.Time `json:"deadline"`
	// Reason is why a person must decide; Rule the policy rule that held
	// the action (the first by name when several did).
	Reason string `json:"reason"`
	Rule   string `json:"rule"`
	// TargetSHA256 is the digest the grant of an operator's approval
	// binds the target with (grant.TargetSHA256): the held verdict keeps
	// it, since the proposal is not at hand when the operator decides.
	TargetSHA256 string `json:"target_sha256,omitempty"`
	// TargetRevision is the store's revision of the target's history the
	// policy held the action on (0 for none): an operator's approval is
	// refused when another approval joined the target since.
	TargetRevision uint64 `json:"target_revision,omitempty"`
}

// Final reports whether v is a final verdict: every verdict but an
// action's held for an operator and a run's held on manual criteria.
func (v *Verdict) Final() bool {
	if v.Outcome != OutcomeBlocked {
		return true
	}
	return v.AwaitingOperator == nil && (v.Run == nil || len(v.Run.AwaitingOperator) == 0)
}

// OperatorRef is an operator's decision on a held action, as its verdict
// records it.
type OperatorRef struct {
	// ID is the operator's id in gated's operator list, and Key the public
	// nkey that signed the decision.
	ID  string `json:"id"`
	Key string `json:"key"`
	// Decision is approve or reject.
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
}

// PolicyRef is the policy's part of a verdict.
type PolicyRef struct {
	Denies []Deny `json:"denies"`
	// Rules names the rules that decided: the distinct rules of Denies in
	// their order, at most MaxPolicyRules of them; RulesMore counts those
	// left out.
	Rules     []string `json:"rules,omitempty"`
	RulesMore int      `json:"rules_more,omitempty"`
	// Route is the routing rule that decided the review (the policy's
	// decision.review.rule), empty when the policy names none.
	Route    string `json:"route,omitempty"`
	Revision string `json:"revision"`
	EvalUS   int64  `json:"eval_us"`
}

// Bounds of the rule names in a verdict's policy section.
const (
	// MaxPolicyRules is how many distinct deny rules PolicyRef.Rules names.
	MaxPolicyRules = 8
	// MaxPolicyRuleLen is the longest rule name PolicyRef keeps, in bytes;
	// a longer one is cut at a character boundary.
	MaxPolicyRuleLen = 128
)

// NewPolicyRef is the policy section of a verdict that denies decided, or
// that the routing rule route decided when there are none, under the
// policy at revision, whose evaluation took evalUS microseconds. The
// audit trail rebuilds a verdict's policy section with it from the
// policy.decided event of the verdict's record.
func NewPolicyRef(denies []Deny, route, revision string, evalUS int64) *PolicyRef {
	ref := &PolicyRef{Denies: denies, Route: ruleName(route), Revision: revision, EvalUS: evalUS}
	seen := make(map[string]bool, len(denies))
	for _, deny := range denies {
		if seen[deny.Rule] {
			continue
		}
		seen[deny.Rule] = true
		if len(ref.Rules) == MaxPolicyRules {
			ref.RulesMore++
			continue
		}
		ref.Rules = append(ref.Rules, ruleName(deny.Rule))
	}
	return ref
}

// ruleName cuts a rule name to MaxPolicyRuleLen bytes without splitting
// a character.
func ruleName(s string) string { return textcut.Cut(s, MaxPolicyRuleLen) }

// Deny is one policy rule that refused the proposal.
type Deny struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

// ReviewDecision is what a reviewer concluded, as the host reads it.
type ReviewDecision string

const (
	// DecisionApprove is an explicit, well-formed approval.
	DecisionApprove ReviewDecision = "approve"
	// DecisionReject is everything else.
	DecisionReject ReviewDecision = "reject"
)

// Review is one reviewer's contribution to a verdict.
type Review struct {
	Plugin            string          `json:"plugin"`
	PluginVersion     string          `json:"plugin_version,omitempty"`
	Persona           string          `json:"persona"`
	Model             string          `json:"model,omitempty"`
	DecisionText      string          `json:"decision_text"`
	Decision          ReviewDecision  `json:"decision"`
	Gates             []GateResult    `json:"gates,omitempty"`
	MissingGates      []string        `json:"missing_gates,omitempty"`
	SOPID             string          `json:"sop_id,omitempty"`
	RollbackPath      string          `json:"rollback_path,omitempty"`
	Notes             string          `json:"notes,omitempty"`
	Criteria          []CriterionEval `json:"criteria,omitempty"`
	Comments          []Comment       `json:"comments,omitempty"`
	MissingWork       []string        `json:"missing_work,omitempty"`
	NextRoundGuidance string          `json:"next_round_guidance,omitempty"`
	// Warnings are remarks that never change the verdict.
	Warnings   []string `json:"warnings,omitempty"`
	Confidence float64  `json:"confidence,omitempty"`
	Turns      int      `json:"turns,omitempty"`
	Tokens     Tokens   `json:"tokens"`
	LatencyMS  float64  `json:"latency_ms"`
}

// GateResult is one check a reviewer reports on: a gate the persona may
// require, and whether it passed.
type GateResult struct {
	Name   string `json:"name"`
	Passed bool   `json:"passed"`
	Detail string `json:"detail,omitempty"`
}

// CriterionEval is a judgement of one acceptance criterion.
type CriterionEval struct {
	ID         string   `json:"id"`
	Pass       bool     `json:"pass"`
	Confidence float64  `json:"confidence,omitempty"`
	Reason     string   `json:"reason,omitempty"`
	Refs       []string `json:"refs,omitempty"`
	// Kind and Required echo the criterion; JudgedBy names who judged it
	// ("policy", "reviewer:<persona>", "operator:<id>"). The host fills
	// them in; what a reviewer sends there is ignored.
	Kind     string `json:"kind,omitempty"`
	Required bool   `json:"required,omitempty"`
	JudgedBy string `json:"judged_by,omitempty"`
}

// Comment is a reviewer's remark on a run's diff: on one line of a file,
// or on the file as a whole when Line is null.
type Comment struct {
	Path string `json:"path"`
	Line *int   `json:"line"`
	Body string `json:"body"`
}

// Tokens counts the model tokens a review used.
type Tokens struct {
	Prompt     int `json:"prompt"`
	Completion int `json:"completion"`
}

// Settled is an outcome that a policy decision settles on its own, before
// any reviewer is asked.
type Settled struct {
	Outcome Outcome
	Stage   Stage
	// Reason is the verdict's reason: one human sentence.
	Reason string
	// Denies are the decision's denies sorted by rule, never nil.
	Denies []Deny
}
