package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// decision is the state of one pass through the pipeline.
type decision struct {
	e         *Engine
	d         Delivery
	start     time.Time
	digest    string
	p         *Proposal
	tenant    string
	id        string
	action    string
	revision  string
	evalUS    int64
	targetKey string
	// failure is an infrastructure error met while judging: nothing is
	// decided and the delivery is retried.
	failure error
	// holder names this delivery in review claims; claimed is true once
	// it holds (or may hold) the proposal's claim, which is then released
	// when the decision ends.
	holder  string
	claimed bool
	// claimRev is the store's revision of the claim this delivery took; 0
	// when it took none, or took over one left by a crash (GiveUp).
	claimRev uint64
	// awaited is the verdict another message's review stored while this
	// delivery was judging or waited on the claim; it is handed over (see
	// handOver), not decided again.
	awaited *Verdict
	// received is true once the delivery's arrival is recorded on its
	// trail.
	received bool
	// run is set for a run proposal once the policy has decided it.
	run *runState
	// target and dkey keep the proposal's target key and its dedupe key
	// (under dkey.revision) once computed.
	target struct {
		key string
		set bool
	}
	dkey struct {
		key      dedupeKey
		revision string
		set      bool
	}
	// history carries the recent verdicts on the proposal's target from
	// readHistoryAhead; nil when it read none.
	history chan historyRead
	// auditMu serialises the trail: reviews of a quorum record
	// concurrently, and a trail is written by one goroutine at a time.
	auditMu sync.Mutex
}

func (r *decision) decide(ctx context.Context) (*Verdict, error) {
	subjTenant, subjAction, subjErr := ParseProposalSubject(r.d.Subject)
	var decodeErr error
	if subjErr != nil {
		decodeErr = subjErr
	} else {
		r.p, decodeErr = DecodeProposal(r.d.Data, subjTenant, subjAction, r.e.cfg.Limits)
	}
	if r.p != nil {
		r.tenant, r.id, r.action = r.p.Tenant, r.p.ID, r.p.Action
	} else {
		r.tenant, r.id = RecoverAddress(r.d.Subject, r.d.Data, r.d.MsgID)
		r.action = subjAction
	}

	if decodeErr == nil {
		r.readHistoryAhead(ctx)
	}
	if r.id != "" {
		stored, err := r.e.cfg.Store.Get(ctx, r.tenant, r.id)
		switch {
		case err == nil:
			return r.handOver(ctx, stored, false)
		case !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrCorruptRecord):
			// A corrupt entry (reported by the store) is no verdict: the
			// proposal is decided afresh, and Create replaces the entry.
			return nil, fmt.Errorf("looking up verdict %s.%s: %w", r.tenant, r.id, err)
		}
	}

	if err := r.recordReceived(ctx); err != nil {
		return nil, err
	}
	if decodeErr != nil {
		reason := "invalid proposal: " + decodeErr.Error()
		if err := r.record(ctx, EventInvalid, map[string]any{"error": decodeErr.Error()}); err != nil {
			return nil, err
		}
		return r.finish(ctx, r.verdict(OutcomeInvalid, StageValidation, reason))
	}
	if v, hit, err := r.dedupe(ctx); hit || err != nil {
		return v, err
	}
	v := r.judge(ctx)
	// The claim is released only when this delivery ends with no verdict
	// stored, so that another delivery may review. Once a verdict is
	// stored it is kept: a copy of the proposal finds the stored verdict
	// before it looks at claims, or, when it looked just before the
	// verdict was stored, finds the claim live and waits for that verdict,
	// which is already there. Keeping it saves the release's write; it
	// goes with the bucket's TTL, as the release's purge marker would.
	stored := false
	defer func() {
		if !stored {
			r.releaseClaim(ctx)
		}
	}()
	if r.failure != nil {
		return nil, r.failure
	}
	if r.awaited != nil {
		stored = true
		return r.handOver(ctx, r.awaited, false)
	}
	r.finishRun(v)
	if err := ctx.Err(); err != nil {
		// The caller gave up (shutdown), so nothing the pipeline saw after
		// that is a decision: leave the proposal for redelivery.
		return nil, fmt.Errorf("deciding %s.%s: %w", r.tenant, r.id, err)
	}
	decided, err := r.finish(ctx, v)
	stored = err == nil
	if err == nil && decided == v {
		r.rememberRejection(v)
	}
	return decided, err
}

// judge runs policy and review. It never returns an approval that the
// policy or the host's reading of a review did not grant explicitly.
func (r *decision) judge(ctx context.Context) *Verdict {
	p := r.p
	// The policy says who reviews (a proposal's reviewer only where the
	// policy lets it replace the routed persona): evaluate in the default
	// persona's name first, and EvaluateRouted follows the policy's route.
	personaName := r.e.cfg.DefaultPersona
	if p.Mutating() && p.Kind != KindRun {
		// A run review judges work already done, not an operation on a
		// target: it neither reads nor joins a target's history.
		r.targetKey = r.proposalTarget()
	}
	var history []Verdict
	if r.targetKey != "" {
		var err error
		if history, err = r.recentHistory(ctx); err != nil {
			r.failure = fmt.Errorf("reading recent verdicts on the target: %w", err)
			return nil
		}
	}
	var record *RunRecord
	if p.Kind == KindRun {
		var err error
		if record, err = r.e.cfg.Store.RunRecord(ctx, p.Tenant, p.Run.RunID); err != nil {
			r.failure = fmt.Errorf("reading the record of run %s: %w", p.Run.RunID, err)
			return nil
		}
	}
	in := PolicyInput{Proposal: p, History: history, RunRecord: record, Now: r.start}
	pd, routed, err := EvaluateRouted(ctx, r.e.cfg.Policy.Evaluate, r.e.cfg.Personas, in, personaName, true)
	if err != nil {
		v := r.verdict(OutcomeError, StagePolicy, "policy evaluation failed: "+err.Error())
		r.recordBestEffort(ctx, EventPolicyDecided, map[string]any{"error": err.Error()})
		return v
	}
	r.revision, r.evalUS = pd.Revision, pd.Eval.Microseconds()
	settled, done := PolicyOutcome(p, pd, routed)
	if p.Kind == KindRun {
		if pd.Run == nil {
			v := r.verdict(settled.Outcome, settled.Stage, settled.Reason)
			r.recordBestEffort(ctx, EventPolicyDecided, map[string]any{"error": "decision.run is missing"})
			return v
		}
		r.run = newRunState(p, pd.Run, record)
	}
	policyRef := &PolicyRef{Denies: settled.Denies, Revision: pd.Revision, EvalUS: pd.Eval.Microseconds()}
	r.recordBestEffort(ctx, EventPolicyDecided, policyDecidedData{
		Denies: policyRef.Denies, Review: pd.Review, ReviewerTools: pd.ReviewerTools,
		DeniedTools: pd.DeniedTools, EvalUS: policyRef.EvalUS, SOP: sopID(pd.SOP), Run: pd.Run,
	})
	if done {
		if settled.Outcome == OutcomeApproved && pd.Skipped {
			r.recordBestEffort(ctx, EventReviewSkipped, map[string]any{"why": settled.Reason})
		}
		v := r.verdict(settled.Outcome, settled.Stage, settled.Reason)
		v.Policy = policyRef
		return v
	}
	v := r.review(ctx, pd, routed, in)
	if v == nil {
		return nil // r.failure or r.awaited says why
	}
	if v.Policy == nil { // set when the policy refused a reviewer the proposal added
		v.Policy = policyRef
	}
	return v
}

// historyRead is a target's recent verdicts as the store returned them.
type historyRead struct {
	verdicts []Verdict
	err      error
}

// readHistoryAhead starts reading the recent verdicts on the proposal's
// target, which the policy will need, beside the look-up of a stored
// verdict: the two round trips to the store overlap instead of adding up.
// Only a mutating proposal with a target that is not a run has a history
// (see judge).
func (r *decision) readHistoryAhead(ctx context.Context) {
	if !r.p.Mutating() || r.p.Kind == KindRun {
		return
	}
	key := r.proposalTarget()
	if key == "" {
		return
	}
	ch := make(chan historyRead, 1)
	r.history = ch
	store, tenant := r.e.cfg.Store, r.p.Tenant
	go func() {
		v, err := store.Recent(ctx, tenant, key)
		ch <- historyRead{v, err}
	}()
}

// recentHistory returns the recent verdicts on r.targetKey, read ahead
// when readHistoryAhead started it: judge sets r.targetKey under the
// conditions readHistoryAhead reads under, to the same key.
func (r *decision) recentHistory(ctx context.Context) ([]Verdict, error) {
	if r.history != nil {
		h := <-r.history
		r.history = nil
		return h.verdicts, h.err
	}
	return r.e.cfg.Store.Recent(ctx, r.tenant, r.targetKey)
}

// idReused is the verdict of a proposal whose id names another one.
func (r *decision) idReused() *Verdict {
	return r.verdict(OutcomeInvalid, StageValidation, fmt.Sprintf(
		"id %q was already used by a different proposal of tenant %q; ids name one proposal, choose a new one", r.id, r.tenant))
}

// answers reports whether stored answers exactly the delivery's bytes.
// A verdict without a digest answers nothing: gated sets one on every
// verdict it stores, so one without is not a verdict of this proposal.
func (r *decision) answers(stored *Verdict) bool {
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
// its own that lost the race to the store. A verdict of the same proposal
// is then returned as it is (another gated decided it first); a different
// proposal's is an error wrapping ErrIDTaken, since the trail cannot take
// the invalid verdict: the delivery is retried, and its next delivery
// finds the stored verdict on look-up and is answered invalid here.
func (r *decision) handOver(ctx context.Context, stored *Verdict, sealed bool) (*Verdict, error) {
	if !r.answers(stored) {
		if sealed {
			return nil, fmt.Errorf("%w: storing the verdict of %s.%s found the verdict of another proposal (digest %q) under its id",
				ErrIDTaken, r.tenant, r.id, stored.ProposalSHA256)
		}
		if !r.received {
			if err := r.recordReceived(ctx); err != nil {
				return nil, err
			}
		}
		v := r.idReused()
		if err := r.sealVerdict(ctx, v); err != nil {
			return nil, err
		}
		return v, nil // not stored: the key belongs to the other proposal
	}
	if sealed {
		return stored, nil
	}
	_, err := r.seal(ctx, r.event(EventReplayed, map[string]any{
		"audit_seq": stored.AuditSeq, "outcome": stored.Outcome,
	}))
	if err != nil {
		return nil, err
	}
	return stored, nil
}

// finish seals the audit trail with the verdict and stores it.
func (r *decision) finish(ctx context.Context, v *Verdict) (*Verdict, error) {
	if v.Policy == nil {
		// No policy decided (the proposal was invalid, or evaluation
		// failed): the verdict still names the policy in force.
		v.Policy = &PolicyRef{Denies: []Deny{}, Revision: r.revision, EvalUS: r.evalUS}
	}
	if err := r.sealVerdict(ctx, v); err != nil {
		return nil, err
	}
	if v.ProposalID == "" {
		return v, nil
	}
	stored, err := r.e.cfg.Store.Create(ctx, v)
	switch {
	case errors.Is(err, ErrExists) && stored != nil:
		// Another decision stored a verdict first: it stands, and it is
		// this delivery's only if it answers the same bytes.
		return r.handOver(ctx, stored, true)
	case err != nil:
		return nil, fmt.Errorf("storing verdict %s.%s: %w", v.Tenant, v.ProposalID, err)
	}
	return v, nil
}

// sealVerdict seals the trail with v's verdict.decided record and sets
// v.AuditSeq to the record's sequence. The verdict is encoded once: as it
// stands, with audit_seq 0, for the record, and with the record's
// sequence spliced in for the store and the wire (Verdict.JSON).
func (r *decision) sealVerdict(ctx context.Context, v *Verdict) error {
	v.AuditSeq = 0
	doc, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding verdict %s.%s: %w", v.Tenant, v.ProposalID, err)
	}
	seq, err := r.seal(ctx, r.event(EventVerdict, json.RawMessage(doc)))
	if err != nil {
		return err
	}
	v.AuditSeq = seq
	if sealed, ok := setTopLevelUint(doc, "audit_seq", seq); ok {
		v.keepEncoding(sealed)
	}
	return nil
}

func (r *decision) verdict(o Outcome, s Stage, reason string) *Verdict {
	now := r.e.cfg.Clock.Now()
	kind, agent := KindAction, ""
	if r.p != nil {
		kind = r.p.Kind
		if r.p.RequestedBy != nil {
			agent = r.p.RequestedBy.Agent
		}
	}
	return &Verdict{
		V: SchemaVersion, ProposalID: r.id, Tenant: r.tenant, Action: r.action, Kind: kind,
		Outcome: o, Approved: o == OutcomeApproved, Stage: s, Reason: reason,
		DecidedAt: now.UTC(), LatencyMS: ms(now.Sub(r.start)), ProposalSHA256: r.digest,
		TargetKey: r.targetKey, Agent: agent,
	}
}
