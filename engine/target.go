package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// maxTargetJoins bounds how often one approval tries to join its target's
// history while other approvals keep changing it. Each failed try means
// another approval joined, which the policy then denies against in the
// default bundle, so the bound is reached only by a policy that lets
// approvals on one target overlap; the delivery is then retried.
const maxTargetJoins = 8

// EventPolicyRechecked records that an approval found its target's history
// changed since the policy read it (another approval joined it), and what
// the policy decided on the history as it then stood: the verdict stands
// when it denies nothing, and is rejected at stage policy when it denies.
// Its data has the shape of policy.decided's, with the fresh input.
const EventPolicyRechecked = "policy.rechecked"

// joinTarget adds v, when it approves a mutating action, to its target's
// history by compare-and-set against the history the policy decided on.
// When another approval joined in between, the policy decides again with
// the history as it now stands: the review's approval is kept only while
// the policy still denies nothing, and otherwise the verdict returned is
// the policy's rejection (or an error verdict when it cannot evaluate).
// An error means the store failed: nothing is decided and the delivery is
// retried; the target may then hold this approval, which only closes it
// for the policy's window.
func (r *pass) joinTarget(ctx context.Context, v *Verdict) (*Verdict, error) {
	if v.Outcome != OutcomeApproved || v.TargetKey == "" || r.p == nil {
		return v, nil
	}
	h := r.hist
	for range maxTargetJoins {
		fresh, err := r.e.cfg.Store.Join(ctx, v, h)
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, ErrTargetChanged) {
			return nil, fmt.Errorf("joining the history of target %s: %w", v.TargetKey, err)
		}
		h = fresh
		if out := r.recheck(ctx, v, h); out != nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("joining the history of target %s: it changed under %d concurrent approvals", v.TargetKey, maxTargetJoins)
}

// recheck evaluates the policy for v's proposal again on h, the target's
// history as it stands now, and returns the verdict that replaces v: a
// rejection at stage policy when the policy denies, an error verdict when
// it cannot evaluate, nil when it denies nothing and v stands.
func (r *pass) recheck(ctx context.Context, v *Verdict, h History) *Verdict {
	in := r.policyIn
	in.History, in.Now = h.Verdicts, r.e.cfg.Clock.Now()
	pd, err := r.e.cfg.Policy.Evaluate(ctx, in)
	if err != nil {
		r.log.recordBestEffort(ctx, EventPolicyRechecked, policyFailedData{Error: err.Error()})
		out := r.verdict(OutcomeError, StagePolicy, "policy evaluation failed on the target's changed history: "+err.Error())
		out.Reviews = v.Reviews
		return out
	}
	settled, _ := PolicyOutcome(r.p, pd, Routed{Persona: in.Persona})
	personaName := ""
	if in.Persona != nil {
		personaName = in.Persona.Name
	}
	r.log.recordBestEffort(ctx, EventPolicyRechecked, policyDecidedData{
		Denies: settled.Denies, Review: pd.Review, ReviewerTools: pd.ReviewerTools, DeniedTools: pd.DeniedTools,
		EvalUS: pd.Eval.Microseconds(), SOP: sopID(pd.SOP), Holds: pd.Holds,
		Input: &ReplayInput{Proposal: r.d.Data, Persona: personaName, Now: in.Now.UTC(), History: h.Verdicts},
	})
	if len(settled.Denies) == 0 {
		return nil
	}
	out := r.verdict(OutcomeRejected, StagePolicy, settled.Reason)
	out.Policy = newPolicyRef(settled.Denies, pd)
	// The reviews ran and stay on the record; the policy overrules them.
	out.Reviews = v.Reviews
	return out
}

// joinHeld adds next, an operator's approval of the held action held, to
// the target's history, unless another approval joined the target while
// the action was held: then it returns that approval as a
// parallel_operation denial, and nothing joins. The proposal itself is
// not at hand to evaluate the policy again, so any approval of another
// proposal that joined since the policy held the action denies, whatever
// its age: the safe side. An error means the store failed.
func (e *Engine) joinHeld(ctx context.Context, held, next *Verdict, now time.Time) (*Deny, error) {
	h, err := e.cfg.Store.Recent(ctx, held.Tenant, held.TargetKey)
	for range maxTargetJoins {
		if err != nil {
			return nil, fmt.Errorf("reading the history of target %s: %w", held.TargetKey, err)
		}
		if d := joinedWhileHeld(held, h, now); d != nil {
			return d, nil
		}
		h, err = e.cfg.Store.Join(ctx, next, h)
		if err == nil {
			return nil, nil
		}
		if !errors.Is(err, ErrTargetChanged) {
			return nil, fmt.Errorf("joining the history of target %s: %w", held.TargetKey, err)
		}
		err = nil // h is the history as it now stands
	}
	return nil, fmt.Errorf("joining the history of target %s: it changed under %d concurrent approvals", held.TargetKey, maxTargetJoins)
}

// joinedWhileHeld returns the denial of an operator's approval of held
// when h, the target's history now, is not the one the policy held the
// action on and holds an approval of another proposal: the newest such.
func joinedWhileHeld(held *Verdict, h History, now time.Time) *Deny {
	if held.AwaitingOperator != nil && h.Revision == held.AwaitingOperator.TargetRevision {
		return nil
	}
	for i := len(h.Verdicts) - 1; i >= 0; i-- {
		o := h.Verdicts[i]
		if !o.Approved || o.ProposalID == held.ProposalID {
			continue
		}
		who := "an unnamed agent"
		if o.Agent != "" {
			who = "agent " + o.Agent
		}
		return &Deny{Rule: "parallel_operation", Message: fmt.Sprintf(
			"%s on the same target was approved %ds ago for %s (proposal %s) while this action was held for an operator; no parallel operation",
			o.Action, int(now.Sub(o.DecidedAt).Round(time.Second)/time.Second), who, o.ProposalID)}
	}
	return nil
}
