package gated

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/gated/gated/engine/wire"
)

// Run statuses: how a worker's run ended.
const (
	RunCompleted = "completed"
	RunFailed    = "failed"
	RunCanceled  = "canceled"
)

// Criterion kinds. Deterministic criteria (command_result, file_contains)
// are judged by the policy from the evidence the fleet supplies; ai_review
// criteria by the reviewer; manual criteria by an operator.
const (
	CriterionCommandResult = "command_result"
	CriterionFileContains  = "file_contains"
	CriterionAIReview      = "ai_review"
	CriterionManual        = "manual"
)

// Judges of a criterion, as CriterionEval.JudgedBy names them: "policy",
// "reviewer:<persona>" or "operator:<operator id>".
const (
	JudgedByPolicy   = "policy"
	JudgedByReviewer = "reviewer:"
	JudgedByOperator = "operator:"
)

// Finding states: a finding is open until the worker resolves it.
const (
	FindingOpen     = "open"
	FindingResolved = "resolved"
)

// Follow-ups of a rejected run review.
const (
	// NextContinuation sends the run back to its worker for one more round.
	NextContinuation = "continuation"
	// NextEscalation hands a run that used its last round to a human.
	NextEscalation = "escalation"
)

// Finding is one thing a review asked the worker to do: a missing-work
// item or a comment on the diff. The next round's proposal echoes it in
// run.prior_reviews with its status, so the reviewer can tell what was
// done.
type Finding struct {
	// ID is "r<round>-f<n>": unique within the run.
	ID   string `json:"id"`
	Body string `json:"body"`
	Path string `json:"path,omitempty"`
	// Line is the line of Path the finding is about, or null.
	Line *int `json:"line"`
	// Criterion names the criterion whose failure the finding reports.
	Criterion string `json:"criterion,omitempty"`
	// Status is "open" or "resolved"; empty reads as open.
	Status string `json:"status,omitempty"`
	// Resolution is the worker's account of how it resolved the finding.
	Resolution string `json:"resolution,omitempty"`
}

// Open tells whether the finding still needs work.
func (f Finding) Open() bool { return f.Status != FindingResolved }

// PriorReview is a review of an earlier round of the run, as the worker
// echoes it back: the review's findings with the worker's status on each.
type PriorReview struct {
	ProposalID string    `json:"proposal_id,omitempty"`
	Round      int       `json:"round"`
	Findings   []Finding `json:"findings,omitempty"`
	// Summary is free text the orchestrator kept about the review.
	Summary string `json:"summary,omitempty"`
}

// RunLimits bound what a review may hand the next round. Reviewer output
// beyond them is cut, and the cut is reported as a warning on the
// verdict: a cut never turns a rejection into an approval.
type RunLimits struct {
	// MaxItems bounds each list: missing work, comments, warnings and
	// findings. Default 20.
	MaxItems int `json:"max_items"`
	// MaxItemBytes bounds each missing-work item, comment body and
	// warning. Default 2 KiB.
	MaxItemBytes int `json:"max_item_bytes"`
	// MaxGuidanceBytes bounds next_round_guidance. Default 8 KiB.
	MaxGuidanceBytes int `json:"max_guidance_bytes"`
}

// Run limit defaults, and the largest values a policy may set.
const (
	DefaultRunMaxItems         = 20
	DefaultRunMaxItemBytes     = 2 << 10
	DefaultRunMaxGuidanceBytes = 8 << 10
	CeilingRunMaxItems         = 256
	CeilingRunMaxItemBytes     = 16 << 10
	CeilingRunMaxGuidanceBytes = 64 << 10
)

// WithDefaults fills unset limits and caps each at its ceiling.
func (l RunLimits) WithDefaults() RunLimits {
	fill := func(v *int, def, ceiling int) {
		if *v <= 0 {
			*v = def
		}
		*v = min(*v, ceiling)
	}
	fill(&l.MaxItems, DefaultRunMaxItems, CeilingRunMaxItems)
	fill(&l.MaxItemBytes, DefaultRunMaxItemBytes, CeilingRunMaxItemBytes)
	fill(&l.MaxGuidanceBytes, DefaultRunMaxGuidanceBytes, CeilingRunMaxGuidanceBytes)
	return l
}

// RunContext is what a reviewer of a run is told besides the proposal.
type RunContext struct {
	Round     int `json:"round"`
	MaxRounds int `json:"max_rounds"`
	// Criteria are the policy's judgement of the deterministic criteria.
	Criteria []CriterionEval `json:"criteria,omitempty"`
	// AIReview names the criteria the reviewer must judge.
	AIReview []string `json:"ai_review,omitempty"`
	// Manual names the criteria an operator will judge.
	Manual []string `json:"manual,omitempty"`
	// PriorFindings are the findings of earlier rounds, with the worker's
	// status on each. gated takes them from its own record of the run, so
	// a worker cannot drop a finding by leaving it out.
	PriorFindings []Finding `json:"prior_findings,omitempty"`
	Limits        RunLimits `json:"limits"`
	// AcceptedStatus is the status other than completed that the policy
	// accepts for this run (RunPolicy.AcceptedStatus), or empty: a run
	// that did not complete and whose status is not accepted cannot be
	// approved, whatever its reviewer answers.
	AcceptedStatus string `json:"accepted_status,omitempty"`
}

// RunVerdict is the run review's part of a verdict.
type RunVerdict struct {
	RunID     string `json:"run_id"`
	TaskID    string `json:"task_id,omitempty"`
	Worker    string `json:"worker,omitempty"`
	Round     int    `json:"round"`
	MaxRounds int    `json:"max_rounds"`
	// Criteria holds every judged criterion: by the policy, the reviewers
	// and the operator, each naming its judge.
	Criteria          []CriterionEval `json:"criteria,omitempty"`
	MissingWork       []string        `json:"missing_work,omitempty"`
	NextRoundGuidance string          `json:"next_round_guidance,omitempty"`
	Comments          []Comment       `json:"comments,omitempty"`
	// Findings are what the next round must address: the missing work and
	// the comments, each with an id the worker reports back on.
	Findings []Finding `json:"findings,omitempty"`
	// Warnings never change the verdict: remarks by reviewers, and cuts
	// gated made to keep reviewer output within the run limits.
	Warnings []string `json:"warnings,omitempty"`
	// AwaitingOperator names the manual criteria a blocked verdict waits
	// on. Such a verdict is provisional: an operator decision replaces it.
	AwaitingOperator []string `json:"awaiting_operator,omitempty"`
	// Next is the follow-up this verdict sends: "continuation",
	// "escalation" or nothing.
	Next string `json:"next,omitempty"`
	// FollowUpSubject is where the follow-up is published.
	FollowUpSubject string `json:"follow_up_subject,omitempty"`
}

// Continuation asks a run's worker for one more round. It is published on
// gated.continuations.<tenant>.<run_id>, once per run and round.
type Continuation struct {
	V      int    `json:"v"`
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
	TaskID string `json:"task_id,omitempty"`
	// Round is the round the worker is asked for: the reviewed round + 1.
	Round     int    `json:"round"`
	MaxRounds int    `json:"max_rounds"`
	Worker    string `json:"worker,omitempty"`
	// Review links the rejection this continuation follows.
	Review            ReviewLink      `json:"review"`
	MissingWork       []string        `json:"missing_work"`
	NextRoundGuidance string          `json:"next_round_guidance,omitempty"`
	Findings          []Finding       `json:"findings"`
	Criteria          []CriterionEval `json:"criteria,omitempty"`
	CreatedAt         time.Time       `json:"created_at"`
}

// Escalation hands a run that used its last review round to a human. It
// is published on gated.escalations.<tenant>, once per run.
type Escalation struct {
	V         int        `json:"v"`
	Tenant    string     `json:"tenant"`
	RunID     string     `json:"run_id"`
	TaskID    string     `json:"task_id,omitempty"`
	Rounds    int        `json:"rounds"`
	MaxRounds int        `json:"max_rounds"`
	Worker    string     `json:"worker,omitempty"`
	Reason    string     `json:"reason"`
	Review    ReviewLink `json:"review"`
	// MissingWork and Findings are what was still open after the last
	// round.
	MissingWork []string  `json:"missing_work"`
	Findings    []Finding `json:"findings"`
	CreatedAt   time.Time `json:"created_at"`
}

// ReviewLink points at the verdict a follow-up comes from.
type ReviewLink struct {
	ProposalID string `json:"proposal_id"`
	Round      int    `json:"round"`
	Outcome    string `json:"outcome"`
	Reason     string `json:"reason"`
	// Verdict is the subject the verdict was published on; the verdict
	// is also in the verdict bucket under <tenant>.<proposal_id>.
	Verdict  string `json:"verdict"`
	AuditSeq uint64 `json:"audit_seq"`
}

// FollowUp is the continuation or escalation a stored run verdict sends,
// ready to publish: the subject, the Nats-Msg-Id that makes a second
// publication of it a duplicate, and the JSON body. The body is built
// from the verdict alone, so a replay builds the same bytes. ok is false
// when the verdict sends nothing.
func FollowUp(v *Verdict) (subject, msgID string, body []byte, ok bool) {
	if v == nil || v.Run == nil || v.Run.Next == "" {
		return "", "", nil, false
	}
	run := v.Run
	link := ReviewLink{
		ProposalID: v.ProposalID, Round: run.Round, Outcome: string(v.Outcome), Reason: v.Reason,
		Verdict: wire.VerdictSubject(v.Tenant, v.ProposalID), AuditSeq: v.AuditSeq,
	}
	findings := run.Findings
	if findings == nil {
		findings = []Finding{}
	}
	missing := run.MissingWork
	if missing == nil {
		missing = []string{}
	}
	switch run.Next {
	case NextContinuation:
		var failed []CriterionEval
		for _, c := range run.Criteria {
			if !c.Pass {
				failed = append(failed, c)
			}
		}
		body = mustJSON(Continuation{
			V: SchemaVersion, Tenant: v.Tenant, RunID: run.RunID, TaskID: run.TaskID,
			Round: run.Round + 1, MaxRounds: run.MaxRounds, Worker: run.Worker, Review: link,
			MissingWork: missing, NextRoundGuidance: run.NextRoundGuidance, Findings: findings,
			Criteria: failed, CreatedAt: v.DecidedAt.UTC(),
		})
		return wire.ContinuationSubject(v.Tenant, run.RunID),
			fmt.Sprintf("%s.%s.r%d.continuation", v.Tenant, run.RunID, run.Round), body, true
	case NextEscalation:
		body = mustJSON(Escalation{
			V: SchemaVersion, Tenant: v.Tenant, RunID: run.RunID, TaskID: run.TaskID,
			Rounds: run.Round, MaxRounds: run.MaxRounds, Worker: run.Worker,
			Reason: fmt.Sprintf("run %s was rejected in round %d of %d: %s", run.RunID, run.Round, run.MaxRounds, v.Reason),
			Review: link, MissingWork: missing, Findings: findings, CreatedAt: v.DecidedAt.UTC(),
		})
		return wire.EscalationSubject(v.Tenant), fmt.Sprintf("%s.%s.escalation", v.Tenant, run.RunID), body, true
	}
	return "", "", nil, false
}

// mustJSON encodes a follow-up, which always encodes.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"marshal_error": err.Error()})
	}
	return b
}
