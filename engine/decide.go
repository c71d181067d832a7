package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gated/gated"
)

// pass is the state of one delivery's pass through the pipeline (or of an
// operator's decision on a held verdict, see Resolve). Its eventHead
// is what every audit event of the proposal carries; log records them.
type pass struct {
	e      *Engine
	d      Delivery
	start  time.Time
	digest string
	p      *gated.Proposal
	eventHead
	log auditLog
	// keys are derived from the proposal once it decodes.
	keys proposalKeys
	// claim is this delivery's review claim, released when the decision
	// ends with no verdict stored.
	claim *reviewClaim
	// run is set for a run proposal once the policy has decided it.
	run *runState
	// dkey keeps the proposal's dedupe key under dkey.revision once
	// computed.
	dkey struct {
		key      dedupeKey
		revision string
		set      bool
	}
	// history carries the recent verdicts on the proposal's target from
	// readHistoryAhead; nil when it read none.
	history chan historyRead
	// budgetHeld are the leases this pass holds on its budgets.
	budgetHeld []BudgetUse
	// hist is the target's history the policy decided on, policyIn the
	// whole input, routed persona included, and decided the decision the
	// policy made on it: an approval joins hist (joinTarget), and when
	// hist changed it is decided again from policyIn and compared with
	// decided (recheck). reviewers are the reviewers chosen for it, each
	// with the decision made in its name.
	hist      History
	policyIn  PolicyInput
	decided   PolicyDecision
	reviewers []candidate
	// lostSeq is the audit sequence of this delivery's own verdict once
	// it lost the race to the store (finish); 0 otherwise.
	lostSeq uint64
}

// proposalKeys are the keys the engine derives from a decoded proposal,
// each in one place.
type proposalKeys struct {
	// target is the digest of the canonical target (Proposal.TargetKey),
	// part of the dedupe key; "" for a run review.
	target string
	// history is the target whose recent approvals the policy reads and
	// an approval joins: target for a mutating action, "" otherwise. A
	// run review judges work already done, not an operation on a target:
	// it neither reads nor joins a target's history.
	history string
}

// keysOf derives the keys of p.
func keysOf(p *gated.Proposal) proposalKeys {
	if p.Kind == gated.KindRun {
		return proposalKeys{}
	}
	k := proposalKeys{target: p.TargetKey()}
	if p.Mutating() {
		k.history = k.target
	}
	return k
}

// decode decodes the delivery's proposal and sets the decision's address
// from it or, when it does not decode, from what can be recovered of it.
func (r *pass) decode() error {
	subjTenant, subjAction, subjErr := parseProposalSubject(r.d.Subject)
	var decodeErr error
	if subjErr != nil {
		decodeErr = subjErr
	} else {
		r.p, decodeErr = gated.DecodeProposal(r.d.Data, subjTenant, subjAction, r.e.cfg.Limits)
	}
	if r.p == nil {
		r.tenant, r.id = recoverAddress(r.d.Subject, r.d.Data, r.d.MsgID)
		r.action = subjAction
		return decodeErr
	}
	r.tenant, r.id, r.action = r.p.Tenant, r.p.ID, r.p.Action
	if r.p.Operator != nil {
		r.operator = r.p.Operator.ID
	}
	r.keys = keysOf(r.p)
	return decodeErr
}

func (r *pass) decide(ctx context.Context) (*gated.Verdict, error) {
	end := r.e.trace(ctx, TraceDecode)
	decodeErr := r.decode()
	end(decodeErr)
	if decodeErr == nil {
		r.readHistoryAhead(ctx)
	}
	// A first delivery is decided without a look-up: the store's create
	// is the idempotency check (finish), and a copy of a decided proposal
	// meets the stored verdict there; only an approval looks first (below).
	// A redelivery looks first, since an earlier delivery may have stored
	// its verdict and crashed before the ack.
	if r.id != "" && r.d.Attempt != 1 {
		stored, err := r.storedVerdict(ctx)
		if err != nil {
			return nil, err
		}
		if stored != nil {
			return r.handOver(ctx, stored, false)
		}
	}

	if err := r.log.recordReceived(ctx, r.d.Subject, len(r.d.Data), r.digest); err != nil {
		return nil, err
	}
	if decodeErr != nil {
		reason := "invalid proposal: " + decodeErr.Error()
		if err := r.log.record(ctx, gated.EventInvalid, map[string]any{"error": decodeErr.Error()}); err != nil {
			return nil, err
		}
		return r.finish(ctx, r.verdict(gated.OutcomeInvalid, gated.StageValidation, reason))
	}
	if v, hit, err := r.dedupe(ctx); hit || err != nil {
		return v, err
	}
	v, awaited, err := r.judge(ctx)
	// The claim is released only when this delivery ends with no verdict
	// stored, so that another delivery may review. Once a verdict is
	// stored it is kept: a redelivery finds the stored verdict before it
	// looks at claims, and a copy delivered first finds the claim live and
	// waits for that verdict, which is already there, or, once the claim
	// went stale, takes it and finds the stored verdict (reviewClaim.take). Keeping it saves the release's write; it
	// goes with the bucket's TTL, as the release's purge marker would.
	stored := false
	defer func() {
		if !stored {
			r.claim.release(ctx)
		}
	}()
	if err != nil {
		return nil, err
	}
	if awaited {
		stored = true
		return r.handOver(ctx, v, false)
	}
	r.finishRun(v)
	if err := ctx.Err(); err != nil {
		// The caller gave up (shutdown), so nothing the pipeline saw after
		// that is a decision: leave the proposal for redelivery.
		return nil, fmt.Errorf("deciding %s.%s: %w", r.tenant, r.id, err)
	}
	// A first delivery's approval is this id's decision only if no verdict
	// is stored under the id: it looks, before it joins its target, is
	// granted, sealed or published, and a verdict found is handed over as
	// on a redelivery's look-up (a copy gets it, other bytes are invalid).
	if r.d.Attempt == 1 && v.Approved {
		prior, err := r.storedVerdict(ctx)
		if err != nil {
			return nil, err
		}
		if prior != nil {
			stored = true
			return r.handOver(ctx, prior, false)
		}
	}
	// An approval joins its target's history before anything of it is
	// stored or signed, so that a proposal it overtook is decided again.
	if v, err = r.joinTarget(ctx, v); err != nil {
		return nil, err
	}
	decided, err := r.finish(ctx, v)
	stored = err == nil
	if err == nil && decided == v {
		r.rememberRejection(v)
		r.countRefusal(ctx, v)
	}
	if err != nil || decided != v {
		// Nothing was decided, or a verdict stored first stands: the hold
		// lease taken for this decision is given back.
		r.releaseHold(ctx)
	}
	return decided, err
}

// judge runs policy and review, and returns the verdict. It never returns
// an approval that the policy or the host's reading of a review did not
// grant explicitly. awaited says that v is not this delivery's decision
// but the verdict another message carrying the proposal had reviewed and
// stored (see reviewClaim): it is handed over, not decided again. An error
// is an infrastructure failure: nothing is decided and the delivery is
// retried.
func (r *pass) judge(ctx context.Context) (v *gated.Verdict, awaited bool, err error) {
	p := r.p
	// The policy says who reviews (a proposal's reviewer only where the
	// policy lets it replace the routed persona): evaluate in the default
	// persona's name first, and EvaluateRouted follows the policy's route.
	personaName := r.e.cfg.DefaultPersona
	var history []gated.Verdict
	if r.keys.history != "" {
		if r.hist, err = r.recentHistory(ctx); err != nil {
			return nil, false, fmt.Errorf("reading recent verdicts on the target: %w", err)
		}
		history = r.hist.Verdicts
	}
	var record *gated.RunRecord
	if p.Kind == gated.KindRun {
		if record, err = r.e.cfg.Store.RunRecord(ctx, p.Tenant, p.Run.RunID); err != nil {
			return nil, false, fmt.Errorf("reading the record of run %s: %w", p.Run.RunID, err)
		}
	}
	in := PolicyInput{Proposal: p, History: history, RunRecord: record, Now: r.start}
	// The budget counters are read for the policy only when it can read
	// them: two round trips to the bucket on every proposal otherwise.
	in.BudgetUnread = r.e.cfg.Budgets != nil && r.e.cfg.PolicyReadsBudget != nil && !r.e.cfg.PolicyReadsBudget()
	if !in.BudgetUnread {
		if err := r.readBudget(ctx, &in); err != nil {
			return nil, false, err
		}
	}
	// So is the agent's flow state.
	in.SessionUnread = r.e.cfg.Sessions != nil && r.e.cfg.PolicyReadsSession != nil && !r.e.cfg.PolicyReadsSession()
	if !in.SessionUnread {
		r.readSession(ctx, &in)
	}
	pd, routed, err := EvaluateRouted(ctx, r.e.cfg.Policy.Evaluate, r.e.cfg.Personas, in, personaName, true)
	for range 2 {
		// The policy changed to one that reads them since it was asked.
		read, rerr := r.readUnread(ctx, &in, err)
		if rerr != nil {
			return nil, false, rerr
		}
		if !read {
			break
		}
		pd, routed, err = EvaluateRouted(ctx, r.e.cfg.Policy.Evaluate, r.e.cfg.Personas, in, personaName, true)
	}
	budget := in.Budget
	r.policyIn = in
	r.policyIn.Persona = routed.Persona
	shadowRev, shadow := r.shadow(ctx, in, routed, pd, err)
	if err != nil {
		v := r.verdict(gated.OutcomeError, gated.StagePolicy, "policy evaluation failed: "+err.Error())
		r.log.recordBestEffort(ctx, gated.EventPolicyDecided, policyFailedData{Error: err.Error(), ShadowRevision: shadowRev})
		r.recordShadow(ctx, shadow)
		return v, false, nil
	}
	r.revision, r.evalUS = pd.Revision, pd.Eval.Microseconds()
	r.decided = pd
	settled, done := PolicyOutcome(p, pd, routed)
	if p.Kind == gated.KindRun {
		if pd.Run == nil {
			v := r.verdict(settled.Outcome, settled.Stage, settled.Reason)
			r.log.recordBestEffort(ctx, gated.EventPolicyDecided, policyFailedData{Error: "decision.run is missing", ShadowRevision: shadowRev})
			r.recordShadow(ctx, shadow)
			return v, false, nil
		}
		r.run = newRunState(p, pd.Run, record)
	}
	policyRef := newPolicyRef(settled.Denies, pd)
	r.log.recordBestEffort(ctx, gated.EventPolicyDecided, gated.PolicyDecidedData{
		Denies: policyRef.Denies, Review: pd.Review, ReviewerTools: pd.ReviewerTools,
		DeniedTools: pd.DeniedTools, EvalUS: policyRef.EvalUS, SOP: sopID(pd.SOP), Run: pd.Run, Holds: pd.Holds,
		Input:          &gated.ReplayInput{Proposal: r.d.Data, Persona: personaName, Now: r.start.UTC(), History: history, RunRecord: record, Budget: budget, Session: in.Session},
		ShadowRevision: shadowRev,
	})
	r.recordShadow(ctx, shadow)
	if done {
		held := settled.Outcome == gated.OutcomeBlocked && len(pd.Holds) > 0 && p.Kind != gated.KindRun
		// The budget is the last word before anything is approved without
		// review or handed to an operator.
		var refused *gated.Verdict
		switch {
		case settled.Outcome == gated.OutcomeApproved:
			refused, err = r.admit(ctx, BudgetRead, time.Time{})
		case held:
			refused, err = r.admit(ctx, BudgetHold, r.e.operatorHold(pd.Holds, r.start).Deadline)
		}
		if err != nil {
			return nil, false, err
		}
		if refused != nil {
			refused.Policy = policyRef
			return refused, false, nil
		}
		if settled.Outcome == gated.OutcomeApproved && pd.Skipped {
			r.log.recordBestEffort(ctx, gated.EventReviewSkipped, map[string]any{"why": settled.Reason})
		}
		v := r.verdict(settled.Outcome, settled.Stage, settled.Reason)
		v.Policy = policyRef
		if held {
			r.hold(ctx, v, pd.Holds)
		}
		return v, false, nil
	}
	v, awaited, err = r.review(ctx, pd, routed, in)
	if err != nil || awaited {
		return v, awaited, err
	}
	if v.Policy == nil { // set when the policy refused a reviewer the proposal added
		v.Policy = policyRef
	}
	return v, false, nil
}

// readBudget reads the proposal's budget counters into in, when budgets
// are kept; in is then no longer without them.
func (r *pass) readBudget(ctx context.Context, in *PolicyInput) error {
	b := r.e.cfg.Budgets
	if b == nil {
		return nil
	}
	st, err := b.State(ctx, r.p.Tenant, budgetAgent(r.p), r.start)
	if err != nil {
		return fmt.Errorf("reading the budget counters of %s: %w", r.p.Tenant, err)
	}
	in.Budget, in.BudgetUnread = &st, false
	return nil
}

// refusedForBudget tells whether a policy refused in because its budget
// counters were not read: they are read, and in evaluated again.
func refusedForBudget(in PolicyInput, err error) bool {
	return in.BudgetUnread && errors.Is(err, ErrBudgetUnread)
}

// historyRead is a target's recent verdicts as the store returned them.
type historyRead struct {
	history History
	err     error
}

// readHistoryAhead starts reading the recent verdicts on the proposal's
// history key, which the policy will need, beside the look-up of a stored
// verdict: the two round trips to the store overlap instead of adding up.
func (r *pass) readHistoryAhead(ctx context.Context) {
	key := r.keys.history
	if key == "" {
		return
	}
	ch := make(chan historyRead, 1)
	r.history = ch
	var history TargetHistory = r.e.cfg.Store
	tenant := r.tenant
	go func() {
		h, err := history.Recent(ctx, tenant, key)
		ch <- historyRead{h, err}
	}()
}

// recentHistory returns the recent verdicts on the proposal's history
// key, read ahead when readHistoryAhead started it.
func (r *pass) recentHistory(ctx context.Context) (History, error) {
	if r.history != nil {
		h := <-r.history
		r.history = nil
		return h.history, h.err
	}
	return r.e.cfg.Store.Recent(ctx, r.tenant, r.keys.history)
}

// storedVerdict looks up the verdict stored under the delivery's tenant
// and id; nil when there is none. A corrupt entry (reported by the store)
// is no verdict: the proposal is decided afresh, and Create replaces the
// entry.
func (r *pass) storedVerdict(ctx context.Context) (*gated.Verdict, error) {
	stored, err := r.e.cfg.Store.Get(ctx, r.tenant, r.id)
	switch {
	case err == nil:
		return stored, nil
	case errors.Is(err, gated.ErrNotFound) || errors.Is(err, gated.ErrCorruptRecord):
		return nil, nil
	}
	return nil, fmt.Errorf("looking up verdict %s.%s: %w", r.tenant, r.id, err)
}

// idReused is the verdict of a proposal whose id names another one.
// It is never stored, and names no target: the key is the other
// proposal's.
func (r *pass) idReused() *gated.Verdict {
	v := r.verdict(gated.OutcomeInvalid, gated.StageValidation, fmt.Sprintf(
		"id %q was already used by a different proposal of tenant %q; ids name one proposal, choose a new one", r.id, r.tenant))
	v.TargetKey = ""
	return v
}

// answers reports whether stored answers exactly the delivery's bytes.
// A verdict without a digest answers nothing: gated sets one on every
// verdict it stores, so one without is not a verdict of this proposal.
func (r *pass) answers(stored *gated.Verdict) bool {
	return stored.ProposalSHA256 != "" && stored.ProposalSHA256 == r.digest
}

// handOver gives the delivery a verdict that another decision stored
// under the proposal's tenant and id: found on look-up, awaited on a
// review claim, or met when storing this delivery's own verdict. Every
// such verdict goes through here. It is the delivery's only when it
// answers the delivery's bytes (answers); otherwise the id belongs to a
// different proposal, and the delivery is answered invalid, audited on its
// trail and not stored, since the key is that proposal's.
//
// sealed says the delivery's trail is sealed already with a verdict of
// its own that lost the race to the store (see lost).
func (r *pass) handOver(ctx context.Context, stored *gated.Verdict, sealed bool) (*gated.Verdict, error) {
	if sealed {
		return r.lost(ctx, stored)
	}
	if !r.answers(stored) {
		if !r.log.received {
			if err := r.log.recordReceived(ctx, r.d.Subject, len(r.d.Data), r.digest); err != nil {
				return nil, err
			}
		}
		v := r.idReused()
		if err := r.sealVerdict(ctx, v); err != nil {
			return nil, err
		}
		return v, nil // not stored: the key belongs to the other proposal
	}
	data := map[string]any{"audit_seq": stored.AuditSeq, "outcome": stored.Outcome}
	if r.lostSeq != 0 {
		data["superseded_seq"] = r.lostSeq
	}
	if _, err := r.log.seal(ctx, gated.EventReplayed, data); err != nil {
		return nil, err
	}
	return stored, nil
}

// lost answers a delivery whose own verdict, sealed on its trail at
// r.lostSeq, lost the race to the store: a verdict stored first stands.
// With Delivery.Retrail the delivery is answered as a copy found on
// look-up, on a further trail that names the superseded record: the
// stored verdict when it answers the same bytes (replayed), invalid
// otherwise. Without, a verdict of the same proposal is returned as it
// is, and a different proposal's is an error wrapping ErrIDTaken, since
// the sealed trail cannot take the invalid verdict: the delivery is
// retried, and its redelivery finds the stored verdict on look-up and is
// answered invalid.
func (r *pass) lost(ctx context.Context, stored *gated.Verdict) (*gated.Verdict, error) {
	if r.d.Retrail != nil {
		r.log = auditLog{trail: r.d.Retrail(), clock: r.e.cfg.Clock, head: &r.eventHead}
		return r.handOver(ctx, stored, false)
	}
	if !r.answers(stored) {
		return nil, fmt.Errorf("%w: storing the verdict of %s.%s found the verdict of another proposal (digest %q) under its id",
			gated.ErrIDTaken, r.tenant, r.id, stored.ProposalSHA256)
	}
	return stored, nil
}

// finish seals the audit trail with the verdict and stores it.
func (r *pass) finish(ctx context.Context, v *gated.Verdict) (*gated.Verdict, error) {
	if v.Policy == nil {
		// No policy decided (the proposal was invalid, or evaluation
		// failed): the verdict still names the policy in force.
		v.Policy = &gated.PolicyRef{Denies: []gated.Deny{}, Revision: r.revision, EvalUS: r.evalUS}
	}
	if err := r.grant(ctx, v); err != nil {
		return nil, err
	}
	if err := r.sealVerdict(ctx, v); err != nil {
		return nil, err
	}
	if v.ProposalID == "" {
		return v, nil
	}
	stored, err := r.e.cfg.Store.Create(ctx, v)
	switch {
	case errors.Is(err, gated.ErrExists) && stored != nil:
		// Another decision stored a verdict first: it stands, and it is
		// this delivery's only if it answers the same bytes.
		r.lostSeq = v.AuditSeq
		return r.handOver(ctx, stored, true)
	case err != nil:
		return nil, fmt.Errorf("storing verdict %s.%s: %w", v.Tenant, v.ProposalID, err)
	}
	return v, nil
}

// grant signs the grant of v when it approves an action. A target a
// grant cannot bind (one canonical JSON cannot write) turns the approval
// into an error verdict: nothing is approved that an executor could not
// check.
func (r *pass) grant(ctx context.Context, v *gated.Verdict) error {
	if v.Outcome != gated.OutcomeApproved || r.e.cfg.Grants == nil || v.Kind == gated.KindRun {
		return nil
	}
	var target string
	if r.p != nil {
		var err error
		if target, err = grantTarget(r.p); err != nil {
			v.Outcome, v.Approved = gated.OutcomeError, false
			v.Reason = "the approval cannot carry a grant: " + err.Error()
			return nil
		}
	}
	return r.e.grantFor(ctx, &r.log, v, target, r.e.cfg.Clock.Now())
}

// sealVerdict seals the trail with v's verdict.decided record and sets
// v.AuditSeq to the record's sequence. The verdict is encoded once: as it
// stands, with audit_seq 0, for the record, and with the record's
// sequence spliced in for the store and the wire (Verdict.JSON).
func (r *pass) sealVerdict(ctx context.Context, v *gated.Verdict) error {
	v.AuditSeq = 0
	doc, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding verdict %s.%s: %w", v.Tenant, v.ProposalID, err)
	}
	seq, err := r.log.seal(ctx, gated.EventVerdict, json.RawMessage(doc))
	if err != nil {
		return err
	}
	v.SetAuditSeq(seq, doc)
	return nil
}

func (r *pass) verdict(o gated.Outcome, s gated.Stage, reason string) *gated.Verdict {
	now := r.e.cfg.Clock.Now()
	kind, agent := gated.KindAction, ""
	var labels []string
	if r.p != nil {
		kind, labels = r.p.Kind, r.p.Labels
		if r.p.RequestedBy != nil {
			agent = r.p.RequestedBy.Agent
		}
	}
	return &gated.Verdict{
		V: gated.SchemaVersion, ProposalID: r.id, Tenant: r.tenant, Action: r.action, Kind: kind,
		Outcome: o, Approved: o == gated.OutcomeApproved, Stage: s, Reason: reason,
		DecidedAt: now.UTC(), LatencyMS: ms(now.Sub(r.start)), ProposalSHA256: r.digest,
		TargetKey: r.keys.history, Agent: agent, Labels: labels,
	}
}
