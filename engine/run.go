package engine

import (
	"time"

	"github.com/gated/gated"
)

// DefaultMaxRounds is how many review rounds a run gets when the policy
// names no maximum.
const DefaultMaxRounds = 5

// RunPolicy is the policy's part of the decision on a run proposal,
// data.gated.decision.run.
type RunPolicy struct {
	// Reviewed is true when the review policy (none, on_success,
	// on_failure, always) asks for this run to be reviewed; Why says why
	// or why not.
	Reviewed bool   `json:"reviewed"`
	Why      string `json:"why,omitempty"`
	// ReviewPolicy is the review policy in force for the run's tenant.
	ReviewPolicy string `json:"review_policy,omitempty"`
	// MaxRounds is the last round a rejection may continue to; a
	// rejection of that round escalates instead.
	MaxRounds int `json:"max_rounds"`
	// Criteria are the deterministic criteria the policy judged.
	Criteria []gated.CriterionEval `json:"criteria,omitempty"`
	// MissingWork lists what failed required criteria ask of the worker.
	MissingWork []string `json:"missing_work,omitempty"`
	// Manual names the required manual criteria: an operator must judge
	// them before the run can be approved.
	Manual []string `json:"manual,omitempty"`
	// Continuable is true when a rejection of the run is about the work
	// itself (every deny is a failed criterion), so another round may fix
	// it. A run rejected for any other reason gets no follow-up.
	Continuable bool            `json:"continuable"`
	Limits      gated.RunLimits `json:"limits"`
	// AcceptedStatus is the run's status when it is not completed and the
	// policy accepts it for the run's task (run_review.accept_terminal);
	// empty otherwise. gated approves a run that did not complete only
	// when this names its status.
	AcceptedStatus string `json:"accepted_status,omitempty"`
}

// StatusAccepted reports whether a run that ended with status may be
// approved under the policy's accepted status: a completed run always, any
// other only when accepted names its status.
func StatusAccepted(status, accepted string) bool {
	return status == gated.RunCompleted || (accepted != "" && accepted == status)
}

// RunRecord is gated's own record of a run's reviews, kept in the verdict
// store: the rounds that ended in a continuation, an escalation or an
// approval. The policy reads it (input.run_record) to refuse rounds out
// of order and runs that are closed.
type RunRecord struct {
	Tenant string     `json:"tenant"`
	RunID  string     `json:"run_id"`
	TaskID string     `json:"task_id,omitempty"`
	Rounds []RunRound `json:"rounds"`
	// Closed is "", "accepted" (a round was approved) or "escalated".
	Closed string `json:"closed,omitempty"`
}

// Run record states.
const (
	RunAccepted  = "accepted"
	RunEscalated = "escalated"
)

// RunRound is one decided round of a run.
type RunRound struct {
	Round      int             `json:"round"`
	ProposalID string          `json:"proposal_id"`
	Outcome    gated.Outcome   `json:"outcome"`
	Next       string          `json:"next,omitempty"`
	Findings   []gated.Finding `json:"findings,omitempty"`
	DecidedAt  time.Time       `json:"decided_at"`
	// Sent is true once the round's follow-up is stored in the run stream.
	Sent bool `json:"sent,omitempty"`
}

// Round returns the record of round n, or nil.
func (r *RunRecord) Round(n int) *RunRound {
	if r == nil {
		return nil
	}
	for i := range r.Rounds {
		if r.Rounds[i].Round == n {
			return &r.Rounds[i]
		}
	}
	return nil
}

// OperatorDecision is an operator's judgement of the manual criteria a
// blocked run verdict waits on, or of an action held for an operator. The bus checks the operator's signature
// before the engine sees it.
type OperatorDecision struct {
	Tenant     string `json:"tenant"`
	ProposalID string `json:"proposal_id"`
	// ProposalSHA256 is the digest of the proposal the operator judged; it
	// must match the verdict's.
	ProposalSHA256 string `json:"proposal_sha256"`
	// Operator is the operator's id from gated's operator list, and Key
	// the public key that signed.
	Operator string `json:"operator"`
	Key      string `json:"key,omitempty"`
	// Criteria judge a held run's manual criteria; Decision, approve or
	// reject, decides a held action. A decision has one or the other.
	Criteria []OperatorFinding `json:"criteria,omitempty"`
	Decision string            `json:"decision,omitempty"`
	Reason   string            `json:"reason,omitempty"`
}

// OperatorFinding is an operator's verdict on one manual criterion.
type OperatorFinding struct {
	ID     string `json:"id"`
	Pass   bool   `json:"pass"`
	Reason string `json:"reason,omitempty"`
}

// Records tells whether a verdict adds a round to its run's record: a run
// verdict that continues, escalates or approves. Other outcomes (errors,
// timeouts, blocks, rejections that send nothing) leave the round open to
// another try.
func Records(v *gated.Verdict) bool {
	return v != nil && v.Run != nil && (v.Run.Next != "" || v.Approved)
}

// Add records v's round in r and reports whether r changed. A round
// already recorded for another proposal stays as it is: one round of a
// run has one follow-up. A replay of the same proposal's round changes
// nothing (except an operator decision replacing a held verdict, which
// is never recorded before it is replaced).
func (r *RunRecord) Add(v *gated.Verdict) bool {
	if !Records(v) {
		return false
	}
	if r.Round(v.Run.Round) != nil {
		return false
	}
	if r.RunID == "" {
		r.Tenant, r.RunID = v.Tenant, v.Run.RunID
	}
	if r.TaskID == "" {
		r.TaskID = v.Run.TaskID
	}
	r.Rounds = append(r.Rounds, RunRound{
		Round: v.Run.Round, ProposalID: v.ProposalID, Outcome: v.Outcome, Next: v.Run.Next,
		Findings: v.Run.Findings, DecidedAt: v.DecidedAt,
	})
	switch {
	case v.Approved:
		r.Closed = RunAccepted
	case v.Run.Next == gated.NextEscalation:
		r.Closed = RunEscalated
	}
	return true
}
