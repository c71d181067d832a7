package sop

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/plugins/sdk"
)

// Gates of a run review, as the built-in run-reviewer persona requires
// them.
const (
	// GateCriteriaMet passes when every required criterion the policy
	// judged passed.
	GateCriteriaMet = "criteria_met"
	// GatePriorFindingsClosed passes when no finding of an earlier round
	// is still open.
	GatePriorFindingsClosed = "prior_findings_closed"
	// GateRunCompleted passes when the run completed, or ended with a
	// status the policy accepts for its task (RunContext.AcceptedStatus).
	GateRunCompleted = "run_completed"
)

// ErrCannotJudge means a run has required ai_review criteria. Judging
// them takes a reading of the work, which a deterministic reviewer cannot
// give; the run review fails with an error verdict instead of guessing.
// Route such runs to a persona served by an LLM reviewer.
var ErrCannotJudge = errors.New("the deterministic reviewer cannot judge ai_review criteria")

// errNoRunContext means gated sent a run proposal without its run
// context, or a run context without its proposal.
var errNoRunContext = errors.New("the review of a run proposal came without its run context; the deterministic reviewer judges runs only from what gated established")

// reviewRun judges a run from what the policy established: the required
// criteria it judged must all have passed (criteria_met), and the worker
// must have resolved every finding of the earlier rounds
// (prior_findings_closed). It approves only when both gates pass. A run
// with required ai_review criteria is not its to judge: it returns
// ErrCannotJudge.
func (r Reviewer) reviewRun(req *sdk.Request) (*sdk.Response, error) {
	run := req.Run
	if run == nil || req.Proposal == nil {
		return nil, errNoRunContext
	}
	kinds, required := proposalCriteria(req.Proposal)
	var cannot, optional []string
	for _, id := range run.AIReview {
		// An id gated names but the proposal does not describe counts as
		// required: doubt never lets a run through.
		if _, known := kinds[id]; !known || required[id] {
			cannot = append(cannot, id)
		} else {
			optional = append(optional, id)
		}
	}
	for _, c := range req.Proposal.Criteria {
		if c.Kind == gated.CriterionAIReview && c.Required && !slices.Contains(cannot, c.ID) {
			cannot = append(cannot, c.ID)
		}
	}
	if len(cannot) > 0 {
		return nil, fmt.Errorf("%w (required: %s); route the run to an LLM persona", ErrCannotJudge, strings.Join(cannot, ", "))
	}

	res := &sdk.Response{}
	for _, id := range optional {
		res.Warnings = append(res.Warnings, fmt.Sprintf("criterion %s (ai_review, optional) was not judged: the deterministic reviewer cannot judge ai_review criteria", id))
	}
	criteria, criteriaWork := criteriaGate(run, req.Proposal.Criteria, required)
	findings, findingsWork := findingsGate(run)
	status, statusWork := statusGate(run, req.Proposal.Run)
	res.Gates = []gated.GateResult{criteria, findings, status}
	res.MissingWork = append(append(criteriaWork, findingsWork...), statusWork...)

	who := "the run"
	if p := req.Proposal.Run; p != nil && p.RunID != "" {
		who = "run " + p.RunID
	}
	if criteria.Passed && findings.Passed && status.Passed {
		res.Decision = gated.DecisionApprove
		res.Notes = fmt.Sprintf("Round %d of %s: every required criterion passed and no finding of an earlier round is open.", run.Round, who)
		if run.AcceptedStatus != "" {
			res.Notes += fmt.Sprintf(" It ended %s: accepted terminal status %s, as the policy accepts for its task.", run.AcceptedStatus, run.AcceptedStatus)
		}
	} else {
		res.Decision = gated.DecisionReject
		res.Notes = fmt.Sprintf("Round %d of %s is not done: %d item(s) of missing work.", run.Round, who, len(res.MissingWork))
		res.NextRoundGuidance = guidance(criteria.Passed, findings.Passed)
		if !status.Passed {
			res.NextRoundGuidance = "Finish the task: a run that ended " + strconv.Quote(statusOf(req.Proposal.Run)) + " is not accepted. " + res.NextRoundGuidance
		}
	}
	res.Text = renderRun(res)
	return res, nil
}

// proposalCriteria indexes the proposal's criteria by id: their kinds, and
// which are required.
func proposalCriteria(p *gated.Proposal) (kinds map[string]string, required map[string]bool) {
	kinds, required = map[string]string{}, map[string]bool{}
	for _, c := range p.Criteria {
		kinds[c.ID] = c.Kind
		required[c.ID] = required[c.ID] || c.Required
	}
	return kinds, required
}

// criteriaGate passes when every required deterministic criterion was
// judged by the policy and passed. A required criterion the policy did not
// judge fails the gate: a missing judgement is missing evidence.
func criteriaGate(run *gated.RunContext, all []gated.Criterion, required map[string]bool) (gated.GateResult, []string) {
	g := gated.GateResult{Name: GateCriteriaMet}
	var work, failed []string
	judged := map[string]bool{}
	passed := 0
	for _, c := range run.Criteria {
		judged[c.ID] = true
		if !c.Required && !required[c.ID] {
			continue
		}
		if c.Pass {
			passed++
			continue
		}
		failed = append(failed, c.ID)
		reason := c.Reason
		if reason == "" {
			reason = "failed"
		}
		work = append(work, fmt.Sprintf("criterion %s (%s) is not met: %s", c.ID, c.Kind, reason))
	}
	for _, c := range all {
		deterministic := c.Kind == gated.CriterionCommandResult || c.Kind == gated.CriterionFileContains
		if !c.Required || !deterministic || judged[c.ID] {
			continue
		}
		judged[c.ID] = true
		failed = append(failed, c.ID)
		work = append(work, fmt.Sprintf("criterion %s (%s) was not judged by the policy: supply its evidence", c.ID, c.Kind))
	}
	switch {
	case len(failed) > 0:
		g.Detail = "required criteria not met: " + strings.Join(failed, ", ")
	case passed == 0:
		g.Passed, g.Detail = true, "the run has no required criteria for the policy to judge"
	default:
		g.Passed, g.Detail = true, fmt.Sprintf("all %d required criteria judged by the policy passed", passed)
	}
	if len(run.Manual) > 0 {
		g.Detail += "; manual criteria are left to an operator: " + strings.Join(run.Manual, ", ")
	}
	return g, work
}

// findingsGate passes when every finding of the earlier rounds is
// resolved.
func findingsGate(run *gated.RunContext) (gated.GateResult, []string) {
	g := gated.GateResult{Name: GatePriorFindingsClosed}
	var work, open []string
	for _, f := range run.PriorFindings {
		if !f.Open() {
			continue
		}
		open = append(open, f.ID)
		item := fmt.Sprintf("prior finding %s is still open: %s", f.ID, f.Body)
		if f.Path != "" {
			at := f.Path
			if f.Line != nil {
				at += ":" + strconv.Itoa(*f.Line)
			}
			item += " (" + at + ")"
		}
		work = append(work, item)
	}
	switch {
	case len(open) > 0:
		g.Detail = fmt.Sprintf("%d of %d prior findings still open: %s", len(open), len(run.PriorFindings), strings.Join(open, ", "))
	case len(run.PriorFindings) == 0:
		g.Passed, g.Detail = true, "no findings from earlier rounds"
	default:
		g.Passed, g.Detail = true, fmt.Sprintf("all %d prior findings resolved", len(run.PriorFindings))
	}
	return g, work
}

// statusGate passes when the run completed, or ended with the status the
// policy accepts for its task. A run that failed or was canceled is not
// done because its criteria pass: the worker says it did not finish.
func statusGate(run *gated.RunContext, p *gated.Run) (gated.GateResult, []string) {
	g := gated.GateResult{Name: GateRunCompleted}
	var status, task string
	if p != nil {
		status, task = p.Status, p.TaskID
	}
	switch {
	case status == gated.RunCompleted:
		g.Passed, g.Detail = true, "the run completed"
		return g, nil
	case engine.StatusAccepted(status, run.AcceptedStatus):
		g.Passed = true
		g.Detail = fmt.Sprintf("the run ended %s, which the policy accepts for task %s (accepted terminal status %s)", status, task, status)
		return g, nil
	}
	g.Detail = fmt.Sprintf("the run ended %q, and the policy does not accept that status for its task (run_review.accept_terminal)", status)
	return g, []string{fmt.Sprintf("the run ended %q: complete the task (run.status %s), or have the policy accept %q for task %q (run_review.accept_terminal)",
		status, gated.RunCompleted, status, task)}
}

// guidance is the deterministic advice for the next round.
func guidance(criteriaMet, findingsClosed bool) string {
	var parts []string
	if !criteriaMet {
		parts = append(parts, "Make every required criterion pass and include the evidence of each (the command's exit code and output, or the file's content) in the next proposal.")
	}
	if !findingsClosed {
		parts = append(parts, "Address each open finding, then echo it in run.prior_reviews with status \"resolved\" and a resolution that says what changed.")
	}
	parts = append(parts, "Do nothing beyond the missing work; each item listed is checked again in the next round.")
	return strings.Join(parts, " ")
}

// runAnswer is the fenced JSON block of a run review's text, the format
// the run-reviewer persona asks of every reviewer.
type runAnswer struct {
	Criteria          []gated.CriterionEval `json:"criteria"`
	Comments          []gated.Comment       `json:"comments"`
	MissingWork       []string              `json:"missing_work"`
	NextRoundGuidance string                `json:"next_round_guidance"`
	Warnings          []string              `json:"warnings"`
}

func renderRun(res *sdk.Response) string {
	var b strings.Builder
	b.WriteString(render(res))
	answer := runAnswer{
		Criteria: res.Criteria, Comments: res.Comments, MissingWork: res.MissingWork,
		NextRoundGuidance: res.NextRoundGuidance, Warnings: res.Warnings,
	}
	if answer.Criteria == nil {
		answer.Criteria = []gated.CriterionEval{}
	}
	if answer.Comments == nil {
		answer.Comments = []gated.Comment{}
	}
	if answer.MissingWork == nil {
		answer.MissingWork = []string{}
	}
	if answer.Warnings == nil {
		answer.Warnings = []string{}
	}
	raw, _ := json.MarshalIndent(answer, "", "  ")
	fmt.Fprintf(&b, "```json\n%s\n```\n", raw)
	return b.String()
}

func statusOf(p *gated.Run) string {
	if p == nil {
		return ""
	}
	return p.Status
}

// runReview tells whether req is the review of a run.
func runReview(req *sdk.Request) bool {
	return req.Run != nil || (req.Proposal != nil && req.Proposal.Kind == gated.KindRun)
}
