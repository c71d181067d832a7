package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/reviewtext"
	"github.com/gated/gated/internal/textcut"
)

// runState is what a decision on a run proposal carries from the policy
// to the verdict.
type runState struct {
	policy *gated.RunPolicy
	// ctx is what reviewers are told.
	ctx *gated.RunContext
	// criteria are the proposal's criteria by id.
	criteria map[string]gated.Criterion
	// cuts are warnings about reviewer output gated cut to the limits;
	// the reviews of a quorum add to them concurrently.
	mu   sync.Mutex
	cuts []string
	// run is the proposal's run section: its id, task and status.
	run *gated.Run
}

// newRunState prepares the review of a run from the policy's decision and
// the run's record.
func newRunState(p *gated.Proposal, rp *gated.RunPolicy, rec *gated.RunRecord) *runState {
	rp.Limits = rp.Limits.WithDefaults()
	if rp.MaxRounds <= 0 {
		rp.MaxRounds = DefaultMaxRounds
	}
	st := &runState{policy: rp, criteria: make(map[string]gated.Criterion, len(p.Criteria)), run: p.Run}
	rc := &gated.RunContext{
		Round: p.Run.Round, MaxRounds: rp.MaxRounds, Criteria: rp.Criteria,
		Manual: rp.Manual, Limits: rp.Limits, AcceptedStatus: rp.AcceptedStatus,
	}
	for _, c := range p.Criteria {
		st.criteria[c.ID] = c
		if c.Kind == gated.CriterionAIReview {
			rc.AIReview = append(rc.AIReview, c.ID)
		}
	}
	rc.PriorFindings = priorFindings(p.Run, rec)
	st.ctx = rc
	return st
}

// priorFindings are the findings of the run's latest recorded round, with
// the status and resolution the worker reports for each in
// run.prior_reviews. Without a record (the run's first round, or a record
// past its TTL) the worker's own account is all there is.
func priorFindings(run *gated.Run, rec *gated.RunRecord) []gated.Finding {
	reported := map[string]gated.Finding{}
	var own []gated.Finding
	for _, pr := range run.PriorReviews {
		for _, f := range pr.Findings {
			reported[f.ID] = f
			own = append(own, f)
		}
	}
	var last *gated.RunRound
	if rec != nil {
		for i := range rec.Rounds {
			r := &rec.Rounds[i]
			if r.Next == gated.NextContinuation && r.Round < run.Round && (last == nil || r.Round > last.Round) {
				last = r
			}
		}
	}
	if last == nil {
		return own
	}
	out := make([]gated.Finding, 0, len(last.Findings))
	for _, f := range last.Findings {
		f.Status, f.Resolution = gated.FindingOpen, ""
		if w, ok := reported[f.ID]; ok && w.Status == gated.FindingResolved {
			f.Status, f.Resolution = gated.FindingResolved, w.Resolution
		}
		out = append(out, f)
	}
	return out
}

// judgeRun applies the run review rules to one reviewer's answer, after
// the decision authority (Judge) read it. It returns the review's outcome
// and one sentence on it: approved, rejected, or error when the reviewer
// broke the rules in a way that leaves nothing to act on.
func (st *runState) judgeRun(rev *gated.Review, approved bool, why string) (gated.Outcome, string) {
	who := fmt.Sprintf("reviewer %s (persona %s)", rev.Plugin, rev.Persona)
	st.bound(rev)

	var violations []string
	seen := map[string]bool{}
	kept := rev.Criteria[:0:0]
	for _, c := range rev.Criteria {
		crit, known := st.criteria[c.ID]
		switch {
		case !known:
			violations = append(violations, fmt.Sprintf("criterion %q is not one of the proposal's", textcut.Clip(c.ID, 64)))
			continue
		case seen[c.ID]:
			violations = append(violations, fmt.Sprintf("criterion %q is judged twice", c.ID))
			continue
		case math.IsNaN(c.Confidence) || c.Confidence < 0 || c.Confidence > 1:
			violations = append(violations, fmt.Sprintf("criterion %q has confidence %v outside [0, 1]", c.ID, c.Confidence))
			continue
		case crit.Kind != gated.CriterionAIReview:
			rev.Warnings = append(rev.Warnings, fmt.Sprintf("gated ignored the reviewer's judgement of %s criterion %q: %s",
				crit.Kind, c.ID, judgeOf(crit.Kind)))
			continue
		}
		seen[c.ID] = true
		c.Kind, c.Required, c.JudgedBy = crit.Kind, crit.Required, gated.JudgedByReviewer+rev.Persona
		kept = append(kept, c)
	}
	rev.Criteria = kept
	if len(violations) > 0 {
		rev.Decision = gated.DecisionReject
		return gated.OutcomeError, fmt.Sprintf("%s broke the run review rules: %s", who, strings.Join(violations, "; "))
	}

	outcome := gated.OutcomeRejected
	if approved {
		outcome = gated.OutcomeApproved
		var unmet []string
		for _, id := range st.ctx.AIReview {
			crit := st.criteria[id]
			if !crit.Required {
				continue
			}
			i := slices.IndexFunc(rev.Criteria, func(c gated.CriterionEval) bool { return c.ID == id })
			switch {
			case i < 0:
				unmet = append(unmet, id)
				rev.MissingWork = append(rev.MissingWork, fmt.Sprintf("criterion %s (ai_review) was not judged by the reviewer: %s", id, crit.Description))
			case !rev.Criteria[i].Pass:
				unmet = append(unmet, id)
				rev.MissingWork = append(rev.MissingWork, fmt.Sprintf("criterion %s (ai_review) failed: %s", id, rev.Criteria[i].Reason))
			}
		}
		switch {
		case len(unmet) > 0:
			outcome = gated.OutcomeRejected
			why = fmt.Sprintf("%s approved without passing required criteria %s; an approval needs every required criterion passed",
				who, strings.Join(unmet, ", "))
		case len(rev.MissingWork) > 0:
			outcome = gated.OutcomeRejected
			why = fmt.Sprintf("%s approved but listed %d missing-work items; an approval requires none, so the run goes back",
				who, len(rev.MissingWork))
		}
		if outcome == gated.OutcomeApproved && !StatusAccepted(st.run.Status, st.policy.AcceptedStatus) {
			// However the reviewer reads the work, a run that did not
			// complete is not done unless the policy accepts how it ended.
			outcome = gated.OutcomeRejected
			rev.MissingWork = append(rev.MissingWork, st.notCompletedWork())
			why = fmt.Sprintf("%s approved a run that ended %s, which the policy does not accept for its task (run_review.accept_terminal); the run goes back",
				who, st.run.Status)
		}
		if outcome == gated.OutcomeRejected {
			rev.Decision = gated.DecisionReject
		}
	}
	if outcome == gated.OutcomeRejected && len(rev.MissingWork) == 0 && strings.TrimSpace(rev.NextRoundGuidance) == "" {
		return gated.OutcomeError, fmt.Sprintf("%s rejected the run without missing work or guidance (%s); a rejection must tell the worker what to do",
			who, strings.TrimSuffix(why, "."))
	}
	return outcome, why
}

// notCompletedWork is the missing-work item of a run that did not
// complete and whose status the policy does not accept.
func (st *runState) notCompletedWork() string {
	task := st.run.TaskID
	if task == "" {
		task = "(none given)"
	}
	return fmt.Sprintf("the run ended %s: complete the task (run.status %s), or have the policy accept %s for task %s (run_review.accept_terminal)",
		st.run.Status, gated.RunCompleted, st.run.Status, task)
}

func judgeOf(kind string) string {
	switch kind {
	case gated.CriterionManual:
		return "manual criteria are judged by an operator"
	default:
		return "deterministic criteria are judged by the policy from the fleet's evidence"
	}
}

// bound cuts a review's run output to the limits and notes each cut.
func (st *runState) bound(rev *gated.Review) {
	l := st.policy.Limits
	note := func(format string, args ...any) {
		st.mu.Lock()
		defer st.mu.Unlock()
		st.cuts = append(st.cuts, fmt.Sprintf("persona %s: ", rev.Persona)+fmt.Sprintf(format, args...))
	}
	cutList := func(name string, list []string) []string {
		if len(list) > l.MaxItems {
			note("%s had %d items; kept the first %d (max_items)", name, len(list), l.MaxItems)
			list = list[:l.MaxItems]
		}
		clipped := 0
		for i := range list {
			if len(list[i]) > l.MaxItemBytes {
				list[i] = textcut.Clip(list[i], l.MaxItemBytes)
				clipped++
			}
		}
		if clipped > 0 {
			note("%d %s items were longer than %d bytes and were cut (max_item_bytes)", clipped, name, l.MaxItemBytes)
		}
		return list
	}
	rev.MissingWork = cutList("missing_work", rev.MissingWork)
	rev.Warnings = cutList("warnings", rev.Warnings)
	if len(rev.Comments) > l.MaxItems {
		note("comments had %d items; kept the first %d (max_items)", len(rev.Comments), l.MaxItems)
		rev.Comments = rev.Comments[:l.MaxItems]
	}
	for i := range rev.Comments {
		if len(rev.Comments[i].Body) > l.MaxItemBytes {
			rev.Comments[i].Body = textcut.Clip(rev.Comments[i].Body, l.MaxItemBytes)
			note("comment %d was longer than %d bytes and was cut (max_item_bytes)", i+1, l.MaxItemBytes)
		}
		if ln := rev.Comments[i].Line; ln != nil && *ln < 1 {
			rev.Comments[i].Line = nil
		}
	}
	if len(rev.NextRoundGuidance) > l.MaxGuidanceBytes {
		note("next_round_guidance was %d bytes; cut to %d (max_guidance_bytes)", len(rev.NextRoundGuidance), l.MaxGuidanceBytes)
		rev.NextRoundGuidance = textcut.Clip(rev.NextRoundGuidance, l.MaxGuidanceBytes)
	}
	if len(rev.Criteria) > gated.MaxCriteria {
		note("criteria had %d judgements; kept the first %d", len(rev.Criteria), gated.MaxCriteria)
		rev.Criteria = rev.Criteria[:gated.MaxCriteria]
	}
	for i := range rev.Criteria {
		rev.Criteria[i].Reason = textcut.Clip(rev.Criteria[i].Reason, l.MaxItemBytes)
	}
}

// finishRun fills in the run section of a run proposal's verdict and turns
// it into its final form: an approval waiting on required manual criteria
// is held at blocked, and a rejection about the work sends the run back
// for another round, or escalates it after the last one.
func (r *pass) finishRun(v *gated.Verdict) {
	p, st := r.p, r.run
	if p == nil || p.Kind != gated.KindRun || v == nil {
		return
	}
	rv := &gated.RunVerdict{RunID: p.Run.RunID, TaskID: p.Run.TaskID, Worker: p.Run.Worker, Round: p.Run.Round, MaxRounds: DefaultMaxRounds}
	v.Run = rv
	if st == nil {
		return // the policy did not decide: an error or invalid verdict
	}
	rv.MaxRounds = st.policy.MaxRounds
	for _, c := range st.policy.Criteria {
		c.JudgedBy = gated.JudgedByPolicy
		if crit, ok := st.criteria[c.ID]; ok {
			c.Kind, c.Required = crit.Kind, crit.Required
		}
		rv.Criteria = append(rv.Criteria, c)
	}
	for _, rev := range v.Reviews {
		rv.Criteria = append(rv.Criteria, rev.Criteria...)
		for _, w := range rev.Warnings {
			rv.Warnings = append(rv.Warnings, fmt.Sprintf("persona %s: %s", rev.Persona, w))
		}
	}
	rv.Warnings = append(rv.Warnings, st.cuts...)

	// Whoever approved it (a policy that does not review the run, a
	// reviewer), a run that did not complete is approved only when the
	// policy accepts its status, and the verdict says so.
	if v.Outcome == gated.OutcomeApproved && st.run.Status != gated.RunCompleted {
		if StatusAccepted(st.run.Status, st.policy.AcceptedStatus) {
			if !strings.Contains(v.Reason, "accepted terminal status") {
				v.Reason += fmt.Sprintf("; accepted terminal status %s (run_review.accept_terminal)", st.run.Status)
			}
		} else {
			v.Outcome, v.Approved = gated.OutcomeRejected, false
			v.Reason = fmt.Sprintf("run %s ended %s, and the policy does not accept that status for its task (decision.run.accepted_status is %q)",
				st.run.RunID, st.run.Status, st.policy.AcceptedStatus)
			rv.MissingWork = append(rv.MissingWork, st.notCompletedWork())
		}
	}

	switch v.Outcome {
	case gated.OutcomeApproved:
		if v.Stage == gated.StageReview && len(st.policy.Manual) > 0 {
			rv.AwaitingOperator = slices.Clone(st.policy.Manual)
			v.Outcome, v.Approved = gated.OutcomeBlocked, false
			v.Reason = fmt.Sprintf("held for an operator decision on manual criteria %s (%s)",
				strings.Join(rv.AwaitingOperator, ", "), strings.TrimSuffix(v.Reason, "."))
		}
	case gated.OutcomeRejected:
		continuable := v.Stage == gated.StageReview || (v.Stage == gated.StagePolicy && st.policy.Continuable)
		rv.MissingWork = append(rv.MissingWork, st.policy.MissingWork...)
		var guidance []string
		for _, rev := range v.Reviews {
			if rev.Decision != gated.DecisionReject {
				continue
			}
			rv.MissingWork = append(rv.MissingWork, rev.MissingWork...)
			rv.Comments = append(rv.Comments, rev.Comments...)
			if g := strings.TrimSpace(rev.NextRoundGuidance); g != "" {
				guidance = append(guidance, g)
			}
		}
		rv.MissingWork = compactStrings(rv.MissingWork)
		rv.NextRoundGuidance = textcut.Clip(strings.Join(guidance, "\n\n"), st.policy.Limits.MaxGuidanceBytes)
		rv.Findings = findingsOf(rv, st.policy.Limits)
		if continuable && (len(rv.MissingWork) > 0 || rv.NextRoundGuidance != "") {
			r.setNext(v)
		}
	}
}

// setNext decides the follow-up of a rejection about the work.
func (r *pass) setNext(v *gated.Verdict) {
	rv := v.Run
	if rv.Round < rv.MaxRounds {
		rv.Next = gated.NextContinuation
		rv.FollowUpSubject = wire.ContinuationSubject(v.Tenant, rv.RunID)
		return
	}
	rv.Next = gated.NextEscalation
	rv.FollowUpSubject = wire.EscalationSubject(v.Tenant)
}

// findingsOf numbers what a rejection asks of the worker: the failed
// required criteria (one finding each), the missing work and the comments.
// A missing-work item gated wrote for a criterion that already has its
// finding (see criterionWork) is not repeated.
func findingsOf(rv *gated.RunVerdict, l gated.RunLimits) []gated.Finding {
	var out []gated.Finding
	add := func(f gated.Finding) {
		f.ID = fmt.Sprintf("r%d-f%d", rv.Round, len(out)+1)
		f.Status = gated.FindingOpen
		out = append(out, f)
	}
	found := map[string]bool{}
	for _, c := range rv.Criteria {
		if c.Required && !c.Pass && !found[c.ID] {
			found[c.ID] = true
			add(gated.Finding{Body: fmt.Sprintf("criterion %s (%s) failed: %s", c.ID, c.Kind, c.Reason), Criterion: c.ID})
		}
	}
	for _, m := range rv.MissingWork {
		if id, ok := criterionWork(m); ok && found[id] {
			continue // the criterion's own finding says it
		}
		add(gated.Finding{Body: m})
	}
	for _, c := range rv.Comments {
		add(gated.Finding{Body: c.Body, Path: c.Path, Line: c.Line})
	}
	if max := 3 * l.MaxItems; len(out) > max {
		out = out[:max]
	}
	return out
}

// criterionWork reads the criterion id from a missing-work item in the
// form gated and the policy write for a criterion: "criterion <id> (<kind>)…".
func criterionWork(m string) (id string, ok bool) {
	rest, ok := strings.CutPrefix(m, "criterion ")
	if !ok {
		return "", false
	}
	id, _, ok = strings.Cut(rest, " (")
	return id, ok && gated.ValidID(id)
}

func compactStrings(list []string) []string {
	seen := make(map[string]bool, len(list))
	out := list[:0]
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" || seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
	}
	return out
}

// Resolve applies an operator's decision to an action held for an
// operator (approve or reject, see resolveAction), or to a run verdict
// held at blocked for its manual criteria, and returns the verdict that replaces it: an
// approval when every manual criterion passed, else a rejection whose
// missing work is what failed, with its continuation or escalation. The
// decision is audited (operator.decided, then the new verdict.decided) on
// trail before the store's verdict is replaced. Errors wrap ErrNotFound
// (no verdict), ErrNotAwaiting (the verdict is not held, or was decided
// already), ErrDecisionMismatch (another proposal digest, or not exactly
// the criteria held), or are store and audit failures.
func (e *Engine) Resolve(ctx context.Context, d OperatorDecision, trail AuditTrail) (*gated.Verdict, error) {
	if trail == nil {
		return nil, fmt.Errorf("%w: an operator decision needs an audit trail", ErrInvalidOption)
	}
	if strings.TrimSpace(d.Operator) == "" {
		return nil, fmt.Errorf("%w: the decision names no operator", gated.ErrDecisionMismatch)
	}
	held, err := e.cfg.Store.Get(ctx, d.Tenant, d.ProposalID)
	if err != nil {
		return nil, fmt.Errorf("looking up verdict %s.%s: %w", d.Tenant, d.ProposalID, err)
	}
	if held.Outcome == gated.OutcomeBlocked && held.AwaitingOperator != nil {
		if held.ProposalSHA256 == "" || d.ProposalSHA256 != held.ProposalSHA256 {
			return nil, fmt.Errorf("%w: the decision is for proposal digest %q, the held verdict answers %q",
				gated.ErrDecisionMismatch, textcut.Clip(d.ProposalSHA256, 64), held.ProposalSHA256)
		}
		return e.resolveAction(ctx, held, d, trail)
	}
	if held.Outcome != gated.OutcomeBlocked || held.Run == nil || len(held.Run.AwaitingOperator) == 0 {
		return nil, fmt.Errorf("%w: %s.%s is %s at stage %s", gated.ErrNotAwaiting, d.Tenant, d.ProposalID, held.Outcome, held.Stage)
	}
	if held.ProposalSHA256 == "" || d.ProposalSHA256 != held.ProposalSHA256 {
		// A held verdict without a digest names no proposal: gated stores
		// every verdict with one, so it matches no decision.
		return nil, fmt.Errorf("%w: the decision is for proposal digest %q, the held verdict answers %q",
			gated.ErrDecisionMismatch, textcut.Clip(d.ProposalSHA256, 64), held.ProposalSHA256)
	}
	if d.Decision != "" {
		return nil, fmt.Errorf("%w: %s.%s is a run held on manual criteria: judge each criterion, not %q",
			gated.ErrDecisionMismatch, d.Tenant, d.ProposalID, textcut.Clip(d.Decision, 32))
	}
	awaiting := slices.Clone(held.Run.AwaitingOperator)
	slices.Sort(awaiting)
	decided := make([]string, 0, len(d.Criteria))
	for _, c := range d.Criteria {
		decided = append(decided, c.ID)
	}
	slices.Sort(decided)
	if !slices.Equal(awaiting, decided) {
		return nil, fmt.Errorf("%w: the verdict waits on criteria [%s], the decision judges [%s]; judge each held criterion exactly once",
			gated.ErrDecisionMismatch, strings.Join(awaiting, ", "), strings.Join(decided, ", "))
	}

	var next gated.Verdict
	raw, _ := json.Marshal(held) // a failure leaves raw empty, which Unmarshal refuses
	if err := json.Unmarshal(raw, &next); err != nil {
		return nil, fmt.Errorf("copying the held verdict: %w", err)
	}
	rv := next.Run
	rv.AwaitingOperator = nil
	var failed []string
	for _, c := range d.Criteria {
		rv.Criteria = append(rv.Criteria, gated.CriterionEval{
			ID: c.ID, Pass: c.Pass, Confidence: 1, Reason: textcut.Clip(c.Reason, gated.DefaultRunMaxItemBytes),
			Kind: gated.CriterionManual, Required: true, JudgedBy: gated.JudgedByOperator + d.Operator,
		})
		if !c.Pass {
			failed = append(failed, c.ID)
			reason := strings.TrimSpace(c.Reason)
			if reason == "" {
				reason = "the operator gave no reason"
			}
			rv.MissingWork = append(rv.MissingWork, fmt.Sprintf("criterion %s (manual) failed: operator %s: %s", c.ID, d.Operator, reason))
		}
	}
	r := &pass{e: e, d: Delivery{Trail: trail}, start: e.cfg.Clock.Now(), digest: held.ProposalSHA256,
		eventHead: eventHead{tenant: held.Tenant, id: held.ProposalID, action: held.Action},
		keys:      proposalKeys{history: held.TargetKey}}
	if held.Policy != nil {
		r.revision, r.evalUS = held.Policy.Revision, held.Policy.EvalUS
	}
	r.log = auditLog{trail: trail, clock: e.cfg.Clock, head: &r.eventHead}
	now := e.cfg.Clock.Now()
	next.Stage, next.DecidedAt = gated.StageOperator, now.UTC()
	next.LatencyMS = held.LatencyMS
	if len(failed) == 0 {
		next.Outcome, next.Approved = gated.OutcomeApproved, true
		next.Reason = fmt.Sprintf("operator %s passed manual criteria %s", d.Operator, strings.Join(decided, ", "))
	} else {
		next.Outcome, next.Approved = gated.OutcomeRejected, false
		next.Reason = fmt.Sprintf("operator %s failed manual criteria %s", d.Operator, strings.Join(failed, ", "))
		rv.Findings = findingsOf(rv, gated.RunLimits{}.WithDefaults())
		r.setNext(&next)
	}
	if reason := strings.TrimSpace(d.Reason); reason != "" {
		next.Reason += ": " + textcut.Clip(reviewtext.FirstLine(reason), 240)
	}

	if err := r.log.record(ctx, gated.EventOperatorDecided, map[string]any{
		"operator": d.Operator, "key": d.Key, "criteria": d.Criteria, "reason": textcut.Clip(d.Reason, gated.DefaultRunMaxItemBytes),
		"held_audit_seq": held.AuditSeq, "outcome": next.Outcome,
	}); err != nil {
		return nil, err
	}
	if err := r.sealVerdict(ctx, &next); err != nil {
		return nil, err
	}
	stored, err := e.cfg.Store.Replace(ctx, held, &next)
	switch {
	case errors.Is(err, gated.ErrExists):
		return stored, fmt.Errorf("%w: %s.%s was decided by another operator decision first (now %s)",
			gated.ErrNotAwaiting, d.Tenant, d.ProposalID, stored.Outcome)
	case err != nil:
		return nil, fmt.Errorf("storing the operator's verdict on %s.%s: %w", d.Tenant, d.ProposalID, err)
	}
	return &next, nil
}

// runContext is what the reviewers of this decision are told about the
// run, nil for an action. Each reviewer gets its own copy.
func (r *pass) runContext() *gated.RunContext {
	if r.run == nil {
		return nil
	}
	rc := *r.run.ctx
	rc.Criteria = slices.Clone(rc.Criteria)
	rc.AIReview = slices.Clone(rc.AIReview)
	rc.Manual = slices.Clone(rc.Manual)
	rc.PriorFindings = slices.Clone(rc.PriorFindings)
	return &rc
}
