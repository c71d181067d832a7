package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/reviewtext"
	"github.com/gated/gated/internal/textcut"
)

// Operator decisions on a held action.
const (
	// OperatorApprove and OperatorReject are the decisions an operator
	// may take on an action held for one.
	OperatorApprove = "approve"
	OperatorReject  = "reject"
	// holdClaimTTL bounds how long one settlement of a held verdict (a
	// decision, or the deadline) keeps others off it: time to audit and
	// store. A settlement that crashed is taken over after it.
	holdClaimTTL = 30 * time.Second
)

// sortedHolds returns the holds sorted by rule.
func sortedHolds(holds []gated.Hold) []gated.Hold {
	out := slices.Clone(holds)
	slices.SortStableFunc(out, func(a, b gated.Hold) int { return strings.Compare(a.Rule, b.Rule) })
	return out
}

// holdWhy says why the holds hold an action: their reasons in rule order,
// each once.
func holdWhy(holds []gated.Hold) string {
	var whys []string
	for _, h := range sortedHolds(holds) {
		why := strings.TrimSpace(h.Why)
		if why == "" {
			why = "rule " + h.Rule
		}
		whys = append(whys, why)
	}
	return strings.Join(slices.Compact(whys), "; ")
}

// holdReason is the reason of a held action's verdict.
func holdReason(holds []gated.Hold) string {
	return "held for an operator decision: " + holdWhy(holds)
}

// operatorHold is the hold of an action the policy held at start: its
// deadline is the shortest of the holds' and the engine's default.
func (e *Engine) operatorHold(holds []gated.Hold, start time.Time) *gated.OperatorHold {
	sorted := sortedHolds(holds)
	wait := e.cfg.OperatorDeadline
	for _, h := range sorted {
		if h.Deadline > 0 && h.Deadline < wait {
			wait = h.Deadline
		}
	}
	return &gated.OperatorHold{
		Deadline: start.Add(wait).UTC(),
		Reason:   holdWhy(sorted),
		Rule:     textcut.Cut(sorted[0].Rule, gated.MaxPolicyRuleLen),
	}
}

// hold marks v, the verdict of an action the policy held, as awaiting an
// operator, and records operator.awaited.
func (r *pass) hold(ctx context.Context, v *gated.Verdict, holds []gated.Hold) {
	h := r.e.operatorHold(holds, r.start)
	if r.p != nil {
		// An operator's approval carries a grant bound to the target; a
		// target no grant can bind is refused when the operator approves.
		h.TargetSHA256, _ = grantTarget(r.p)
	}
	// An operator's approval joins the target's history only if no other
	// approval joined it since the policy read it (see joinHeld).
	h.TargetRevision = r.hist.Revision
	v.AwaitingOperator = h
	r.log.recordBestEffort(ctx, gated.EventOperatorAwaited, map[string]any{
		"deadline": h.Deadline.Format(time.RFC3339Nano), "reason": h.Reason, "rule": h.Rule,
	})
}

// resolveAction applies an operator's decision to an action held for
// one: approved or rejected at stage operator, with the operator's id,
// key and reason. A decision at or past the deadline is refused
// (ErrNotAwaiting): the action times out instead.
func (e *Engine) resolveAction(ctx context.Context, held *gated.Verdict, d OperatorDecision, trail AuditTrail) (*gated.Verdict, error) {
	key := d.Tenant + "." + d.ProposalID
	switch {
	case len(d.Criteria) > 0:
		return nil, fmt.Errorf("%w: %s is an action held for an operator: decide it with approve or reject, not criteria", gated.ErrDecisionMismatch, key)
	case d.Decision != OperatorApprove && d.Decision != OperatorReject:
		return nil, fmt.Errorf("%w: %s is an action held for an operator: the decision must be approve or reject, not %q",
			gated.ErrDecisionMismatch, key, textcut.Clip(d.Decision, 32))
	}
	return e.settleHeld(ctx, held, trail, func(next *gated.Verdict, now time.Time) ([]auditStep, error) {
		// Checked under the claim, at the time the verdict carries: a
		// decision that began before the deadline and reached the claim
		// after it is too late.
		if deadline := held.AwaitingOperator.Deadline; !now.Before(deadline) {
			return nil, fmt.Errorf("%w: %s passed its deadline %s: it times out, and no decision can approve it",
				gated.ErrNotAwaiting, key, deadline.Format(time.RFC3339))
		}
		reason := strings.TrimSpace(d.Reason)
		next.Operator = &gated.OperatorRef{ID: d.Operator, Key: d.Key, Decision: d.Decision, Reason: textcut.Clip(reason, gated.DefaultRunMaxItemBytes)}
		if d.Decision == OperatorApprove {
			next.Outcome, next.Approved = gated.OutcomeApproved, true
			next.Reason = fmt.Sprintf("operator %s approved the held action", d.Operator)
		} else {
			next.Outcome, next.Approved = gated.OutcomeRejected, false
			next.Reason = fmt.Sprintf("operator %s rejected the held action", d.Operator)
		}
		if reason != "" {
			next.Reason += ": " + textcut.Clip(reviewtext.FirstLine(reason), 240)
		}
		return []auditStep{{gated.EventOperatorDecided, map[string]any{
			"operator": d.Operator, "key": d.Key, "decision": d.Decision, "reason": next.Operator.Reason,
			"held_audit_seq": held.AuditSeq, "outcome": next.Outcome,
		}}}, nil
	})
}

// Expire times out the action of tenant and id held for an operator once
// its deadline has passed, and returns the timeout verdict that replaces
// the held one (audited as verdict.decided on trail). Errors wrap
// ErrNotFound (no verdict), ErrNotAwaiting (not a held action, or
// settled already), ErrNotDue (the deadline is still ahead), ErrClaimed
// (an operator's decision is being applied: try again shortly), or are
// store and audit failures. Of a decision and the deadline that race,
// exactly one settles the verdict.
func (e *Engine) Expire(ctx context.Context, tenant, id string, trail AuditTrail) (*gated.Verdict, error) {
	if trail == nil {
		return nil, fmt.Errorf("%w: a timeout needs an audit trail", ErrInvalidOption)
	}
	held, err := e.cfg.Store.Get(ctx, tenant, id)
	if err != nil {
		return nil, fmt.Errorf("looking up verdict %s.%s: %w", tenant, id, err)
	}
	if held.Outcome != gated.OutcomeBlocked || held.AwaitingOperator == nil {
		return nil, fmt.Errorf("%w: %s.%s is %s at stage %s", gated.ErrNotAwaiting, tenant, id, held.Outcome, held.Stage)
	}
	deadline := held.AwaitingOperator.Deadline
	return e.settleHeld(ctx, held, trail, func(next *gated.Verdict, now time.Time) ([]auditStep, error) {
		if now.Before(deadline) {
			return nil, fmt.Errorf("%w: %s.%s waits until %s", gated.ErrNotDue, tenant, id, deadline.Format(time.RFC3339Nano))
		}
		next.Outcome, next.Approved = gated.OutcomeTimeout, false
		next.Reason = fmt.Sprintf("no operator decided the held action before its deadline %s (%s)",
			deadline.Format(time.RFC3339), held.AwaitingOperator.Reason)
		return nil, nil
	})
}

// auditStep is one event a settlement records before its verdict.
type auditStep struct {
	event string
	data  any
}

// settleHeld replaces the held action's verdict with the one decide makes
// of a copy at the time now, or refuses with decide's error: it takes the proposal's claim, so that of a decision and the
// deadline only one settles it, records decide's events and the new
// verdict.decided on trail, and stores the verdict in held's place.
func (e *Engine) settleHeld(ctx context.Context, held *gated.Verdict, trail AuditTrail, decide func(next *gated.Verdict, now time.Time) ([]auditStep, error)) (*gated.Verdict, error) {
	tenant, id := held.Tenant, held.ProposalID
	c := &reviewClaim{claims: e.cfg.Store, verdicts: e.cfg.Store, tenant: tenant, id: id, holder: streamHolder(0)}
	mine := Claim{Holder: c.holder, Until: time.Now().Add(holdClaimTTL).UTC()}
	taken, err := c.claims.Claim(ctx, tenant, id, mine)
	switch {
	case errors.Is(err, gated.ErrClaimed):
		return nil, fmt.Errorf("%w: %s.%s is being settled by another decision (%s): look again shortly", err, tenant, id, taken.Holder)
	case err != nil:
		return nil, fmt.Errorf("claiming held verdict %s.%s: %w", tenant, id, err)
	}
	c.held, c.rev = true, taken.Revision
	defer c.release(ctx)
	// Settled since it was read, by a settlement that released its claim.
	now, err := e.cfg.Store.Get(ctx, tenant, id)
	if err != nil {
		return nil, fmt.Errorf("looking up verdict %s.%s: %w", tenant, id, err)
	}
	if now.AuditSeq != held.AuditSeq || now.AwaitingOperator == nil {
		return nil, fmt.Errorf("%w: %s.%s was settled meanwhile (now %s)", gated.ErrNotAwaiting, tenant, id, now.Outcome)
	}

	var next gated.Verdict
	raw, _ := json.Marshal(held) // a failure leaves raw empty, which Unmarshal refuses
	if err := json.Unmarshal(raw, &next); err != nil {
		return nil, fmt.Errorf("copying the held verdict: %w", err)
	}
	next.AwaitingOperator = nil
	start := e.cfg.Clock.Now()
	steps, err := decide(&next, start)
	if err != nil {
		return nil, err
	}
	// An approval joins its target's history before it is signed or
	// stored, and only while no other approval joined it meanwhile.
	var denied *gated.Deny
	if next.Approved && held.TargetKey != "" {
		if denied, err = e.joinHeld(ctx, held, &next, start); err != nil {
			return nil, err
		}
	}
	r := &pass{e: e, d: Delivery{Trail: trail}, start: start, digest: held.ProposalSHA256,
		eventHead: eventHead{tenant: tenant, id: id, action: held.Action},
		keys:      proposalKeys{history: held.TargetKey}}
	if held.Policy != nil {
		r.revision, r.evalUS = held.Policy.Revision, held.Policy.EvalUS
	}
	r.log = auditLog{trail: trail, clock: e.cfg.Clock, head: &r.eventHead}
	next.Stage, next.DecidedAt = gated.StageOperator, r.start.UTC()
	if denied != nil {
		ref := gated.PolicyRef{}
		if held.Policy != nil {
			ref = *held.Policy
		}
		ref.Denies, ref.Rules, ref.RulesMore = []gated.Deny{*denied}, []string{denied.Rule}, 0
		next.Outcome, next.Approved, next.Stage, next.Policy = gated.OutcomeRejected, false, gated.StagePolicy, &ref
		next.Reason = denyReason(ref.Denies)
		steps = append(steps, auditStep{gated.EventPolicyRechecked, map[string]any{"denies": ref.Denies}})
	}
	for _, s := range steps {
		if err := r.log.record(ctx, s.event, s.data); err != nil {
			return nil, err
		}
	}
	if err := e.grantFor(ctx, &r.log, &next, held.AwaitingOperator.TargetSHA256, start); err != nil {
		return nil, err
	}
	if err := r.sealVerdict(ctx, &next); err != nil {
		return nil, err
	}
	stored, err := e.cfg.Store.Replace(ctx, held, &next)
	switch {
	case errors.Is(err, gated.ErrExists):
		return stored, fmt.Errorf("%w: %s.%s was settled by another decision first (now %s)", gated.ErrNotAwaiting, tenant, id, stored.Outcome)
	case err != nil:
		return nil, fmt.Errorf("storing the settled verdict of %s.%s: %w", tenant, id, err)
	}
	if b := e.cfg.Budgets; b != nil {
		// Settled: the hold no longer counts against the agent's pending
		// holds. A failed release ends at the lease's expiry, the deadline.
		_ = b.Release(context.WithoutCancel(ctx), BudgetRelease{Tenant: tenant, Agent: held.Agent, ID: id, Use: BudgetHold})
	}
	return &next, nil
}
