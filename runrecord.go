package gated

import "time"

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
	Round      int       `json:"round"`
	ProposalID string    `json:"proposal_id"`
	Outcome    Outcome   `json:"outcome"`
	Next       string    `json:"next,omitempty"`
	Findings   []Finding `json:"findings,omitempty"`
	DecidedAt  time.Time `json:"decided_at"`
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

// Records tells whether a verdict adds a round to its run's record: a run
// verdict that continues, escalates or approves. Other outcomes (errors,
// timeouts, blocks, rejections that send nothing) leave the round open to
// another try.
func Records(v *Verdict) bool {
	return v != nil && v.Run != nil && (v.Run.Next != "" || v.Approved)
}

// Add records v's round in r and reports whether r changed. A round
// already recorded for another proposal stays as it is: one round of a
// run has one follow-up. A replay of the same proposal's round changes
// nothing (except an operator decision replacing a held verdict, which
// is never recorded before it is replaced).
func (r *RunRecord) Add(v *Verdict) bool {
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
	case v.Run.Next == NextEscalation:
		r.Closed = RunEscalated
	}
	return true
}
