package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultReviewTimeout is how long a review may take unless the persona
// says otherwise.
const DefaultReviewTimeout = 60 * time.Second

// DefaultPersona is the persona that reviews when neither the proposal nor
// the policy names one.
const DefaultPersona = "reviewer"

// ClaimGrace is how long a review claim outlives the deadline of the
// reviews it covers: time for the holder to seal the audit trail and store
// the verdict, and slack for clocks that disagree between gated processes.
const ClaimGrace = 30 * time.Second

// MaxClaimWait bounds how long a delivery waits for the verdict of a
// review another message holds the claim on, whatever that claim says.
const MaxClaimWait = 10 * time.Minute

// Config is what an Engine is built from. Policy, Personas, Router and
// Store are required.
type Config struct {
	Policy   Policy
	Personas Personas
	Router   Router
	Store    VerdictStore
	// Clock defaults to the system clock.
	Clock Clock
	// Limits default to the v1 wire contract's limits.
	Limits Limits
	// DefaultPersona defaults to "reviewer".
	DefaultPersona string
	// ReviewTimeout applies when a persona sets none. Default 60 s.
	ReviewTimeout time.Duration
	// DedupeWindow is how long a rejection answers identical proposals
	// (same request under the same policy revision, see Verdict.DuplicateOf)
	// at stage dedupe instead of a new judgement. Default 120 s; a negative
	// window turns deduplication off. The memory is per Engine, so
	// proposals spread over several gated processes are deduplicated only
	// where they meet.
	DedupeWindow time.Duration
	// DedupeMax bounds how many rejections are remembered; the oldest go
	// first. Default 10000; negative is an error.
	DedupeMax int
}

// Engine runs the pipeline. It is safe for concurrent use.
type Engine struct {
	cfg Config
	// rejections is nil when deduplication is off.
	rejections *rejections
}

// New checks cfg and returns an Engine.
func New(cfg Config) (*Engine, error) {
	switch {
	case cfg.Policy == nil:
		return nil, fmt.Errorf("%w: Policy is required", ErrInvalidOption)
	case cfg.Personas == nil:
		return nil, fmt.Errorf("%w: Personas is required", ErrInvalidOption)
	case cfg.Router == nil:
		return nil, fmt.Errorf("%w: Router is required", ErrInvalidOption)
	case cfg.Store == nil:
		return nil, fmt.Errorf("%w: Store is required", ErrInvalidOption)
	case cfg.ReviewTimeout < 0:
		return nil, fmt.Errorf("%w: ReviewTimeout %s is negative", ErrInvalidOption, cfg.ReviewTimeout)
	case cfg.DedupeMax < 0:
		return nil, fmt.Errorf("%w: DedupeMax %d is negative; use 0 for the default of %d or a negative DedupeWindow to turn deduplication off",
			ErrInvalidOption, cfg.DedupeMax, DefaultDedupeMax)
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	if cfg.DefaultPersona == "" {
		cfg.DefaultPersona = DefaultPersona
	}
	if cfg.ReviewTimeout == 0 {
		cfg.ReviewTimeout = DefaultReviewTimeout
	}
	if cfg.DedupeWindow == 0 {
		cfg.DedupeWindow = DefaultDedupeWindow
	}
	if cfg.DedupeMax == 0 {
		cfg.DedupeMax = DefaultDedupeMax
	}
	cfg.Limits = cfg.Limits.withDefaults()
	e := &Engine{cfg: cfg}
	if cfg.DedupeWindow > 0 {
		e.rejections = newRejections(cfg.DedupeWindow, cfg.DedupeMax)
	}
	return e, nil
}

// Delivery is one proposal message as it came off the bus.
type Delivery struct {
	Subject string
	Data    []byte
	// MsgID is the Nats-Msg-Id header, used to recover the id of a proposal
	// whose payload cannot be decoded.
	MsgID string
	// Attempt is the delivery count, 1 on first delivery.
	Attempt int
	// StreamSeq is the message's sequence in the proposal stream. It names
	// the holder of the proposal's review claim, so that a redelivery of
	// the same message takes the claim over while another message carrying
	// the same proposal waits for its verdict. Zero when unknown: the
	// delivery then holds claims under a name of its own.
	StreamSeq uint64
	// Trail records this delivery's audit events.
	Trail AuditTrail
}

// Decide runs one delivery through the pipeline and returns its verdict.
//
// The verdict is stored (when it has an address) and its audit trail is
// sealed before Decide returns, so the caller may publish it and then
// acknowledge the message. A verdict with an empty ProposalID has no
// address and is only audited. An error means the audit trail or the store
// failed, or (wrapping ErrClaimed) another message carrying the same
// proposal holds its review and stored no verdict in time, or (wrapping
// ErrIDTaken) a different proposal's verdict took the id while this one
// was decided: nothing of this delivery was stored and the message must be
// redelivered.
//
// A verdict stored or awaited under the proposal's id is handed to the
// delivery only when it answers exactly the delivery's bytes (see
// handOver); any other content under that id is answered invalid.
//
// A proposal that goes to review is claimed first (VerdictStore.Claim), so
// that it is reviewed once however many messages carry it; a delivery that
// finds the claim held by another message waits for that review's verdict
// and replays it.
func (e *Engine) Decide(ctx context.Context, d Delivery) (*Verdict, error) {
	if d.Trail == nil {
		return nil, fmt.Errorf("%w: a delivery needs an audit trail", ErrInvalidOption)
	}
	return e.newDecision(d).decide(ctx)
}

func (e *Engine) newDecision(d Delivery) *decision {
	digest := sha256.Sum256(d.Data)
	return &decision{
		e: e, d: d, start: e.cfg.Clock.Now(), digest: hex.EncodeToString(digest[:]),
		revision: e.cfg.Policy.Revision(),
	}
}

// GiveUp answers a delivery that could not be decided within its delivery
// budget: an error verdict, audited and stored as far as the audit trail
// and the store still allow, so the proposer is not left waiting. When a
// verdict was stored earlier (and only its publication failed), that
// verdict is returned instead, or an invalid verdict when it belongs to a
// different proposal under the same id. It never approves. The review
// claim of the delivery's message, if it holds one, is released.
func (e *Engine) GiveUp(ctx context.Context, d Delivery, cause error) *Verdict {
	r := e.newDecision(d)
	r.tenant, r.id = RecoverAddress(d.Subject, d.Data, d.MsgID)
	_, r.action, _ = ParseProposalSubject(d.Subject)
	if r.id != "" && d.StreamSeq != 0 {
		// A holder that crashed mid-review left its claim behind.
		r.holder = streamHolder(d.StreamSeq)
		r.claimed = true
		defer r.releaseClaim(ctx)
	}
	if r.id != "" {
		if stored, err := e.cfg.Store.Get(ctx, r.tenant, r.id); err == nil {
			if d.Trail != nil {
				if v, err := r.handOver(ctx, stored, false); err == nil {
					return v
				}
			}
			// The trail failed: answer as handOver would, unaudited.
			if r.answers(stored) {
				return stored
			}
			return r.idReused()
		}
	}
	v := r.verdict(OutcomeError, StageValidation,
		fmt.Sprintf("gated could not record a decision after %d deliveries: %v", d.Attempt, cause))
	if d.Trail == nil {
		return v
	}
	stored, err := r.finish(ctx, v)
	switch {
	case err == nil:
		return stored
	case errors.Is(err, ErrIDTaken):
		return r.idReused()
	}
	return v
}

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

// claimReview takes the proposal's review claim before reviewers run. It
// returns false when this delivery must not review: r.failure is set (the
// store failed, or the claim's holder stored no verdict in time) or
// r.awaited holds the verdict the holder stored meanwhile.
func (r *decision) claimReview(ctx context.Context, chosen []candidate) bool {
	if r.holder == "" {
		r.holder = streamHolder(r.d.StreamSeq)
	}
	longest := time.Duration(0)
	for _, c := range chosen {
		timeout := c.persona.Timeout
		if timeout <= 0 {
			timeout = r.e.cfg.ReviewTimeout
		}
		longest = max(longest, timeout)
	}
	// Wall-clock time, like the review deadlines it covers: claims are
	// compared across gated processes.
	mine := Claim{Holder: r.holder, Until: time.Now().Add(longest + ClaimGrace).UTC(), Delivery: r.d.Attempt}
	held, err := r.e.cfg.Store.Claim(ctx, r.tenant, r.id, mine)
	switch {
	case err == nil:
		r.claimed, r.claimRev = true, held.Revision
		// The verdict may have been stored, and its claim released, since
		// this delivery looked it up.
		stored, err := r.e.cfg.Store.Get(ctx, r.tenant, r.id)
		switch {
		case err == nil:
			r.awaited = stored
			return false
		case !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrCorruptRecord):
			r.failure = fmt.Errorf("looking up verdict %s.%s: %w", r.tenant, r.id, err)
			return false
		}
		return true
	case !errors.Is(err, ErrClaimed):
		r.failure = fmt.Errorf("claiming the review of %s.%s: %w", r.tenant, r.id, err)
		return false
	}

	// Another message carrying this proposal is under review: its verdict
	// is this delivery's verdict too.
	wait := min(max(time.Until(held.Until), time.Second), MaxClaimWait)
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	started := time.Now()
	v, err := r.e.cfg.Store.Await(wctx, r.tenant, r.id)
	data := map[string]any{"holder": held.Holder, "until": held.Until, "waited_ms": ms(time.Since(started))}
	switch {
	case err == nil:
		data["outcome"] = v.Outcome
		r.recordBestEffort(ctx, EventReviewAwaited, data)
		r.awaited = v
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		data["error"] = "no verdict before the claim went stale"
		r.recordBestEffort(ctx, EventReviewAwaited, data)
		r.failure = fmt.Errorf("%w: %s.%s is reviewed by message %s, which stored no verdict within %s; retrying",
			ErrClaimed, r.tenant, r.id, held.Holder, wait)
	default:
		r.failure = fmt.Errorf("awaiting the verdict on %s.%s from message %s: %w", r.tenant, r.id, held.Holder, err)
	}
	return false
}

// releaseClaim drops the review claim this delivery holds, if any, when
// it leaves the proposal undecided. It is best effort: a claim left
// behind goes stale at its Until.
func (r *decision) releaseClaim(ctx context.Context) {
	if !r.claimed {
		return
	}
	r.claimed = false
	// The caller's context may be over (shutdown); the release is still
	// worth a short try.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = r.e.cfg.Store.Release(rctx, r.tenant, r.id, Claim{Holder: r.holder, Revision: r.claimRev})
}

// streamHolder names the holder of a review claim: the proposal message's
// stream sequence or, without one, a name no other delivery has.
func streamHolder(seq uint64) string {
	if seq == 0 {
		var b [12]byte
		_, _ = rand.Read(b[:])
		return "delivery:" + hex.EncodeToString(b[:])
	}
	return "seq:" + strconv.FormatUint(seq, 10)
}

// reviewOne runs one reviewer's review under its own id and deadline and
// reads the answer with the host's authority. Every review of a quorum
// runs through it, concurrently with the others.
func (r *decision) reviewOne(ctx context.Context, c candidate, n int, history []Verdict) reviewResult {
	persona := c.persona
	out := reviewResult{name: persona.Name}
	timeout := persona.Timeout
	if timeout <= 0 {
		timeout = r.e.cfg.ReviewTimeout
	}
	reviewID := newReviewID()
	// The deadline is wall-clock time: the injected Clock only stamps
	// verdicts and events.
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deadline, _ := rctx.Deadline()

	startedData := map[string]any{
		"review_id": reviewID, "persona": persona.Name, "plugin": persona.Plugin,
		"tools": c.pd.ReviewerTools, "deadline": deadline,
	}
	if n > 1 {
		startedData["quorum"] = n
	}
	r.recordBestEffort(ctx, EventReviewStarted, startedData)
	started := time.Now()
	res, err := c.reviewer.Review(rctx, ReviewRequest{
		ReviewID:       reviewID,
		Proposal:       r.p,
		ProposalJSON:   r.d.Data,
		Persona:        persona,
		Tools:          c.pd.ReviewerTools,
		DeniedTools:    c.pd.DeniedTools,
		SOP:            c.pd.SOP,
		History:        history,
		PolicyRevision: c.pd.Revision,
		Why:            c.pd.Review.Why,
		Deadline:       deadline,
		Run:            r.runContext(),
		Audit:          r.recordBestEffort,
	})
	latency := time.Since(started)
	if err != nil {
		out.outcome = OutcomeError
		switch {
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(rctx.Err(), context.DeadlineExceeded):
			out.outcome = OutcomeTimeout
		case errors.Is(err, ErrNoReviewer):
			out.outcome = OutcomeBlocked
		}
		r.recordBestEffort(ctx, EventReviewDone, map[string]any{
			"review_id": reviewID, "outcome": out.outcome, "error": err.Error(), "latency_ms": ms(latency),
		})
		out.why = fmt.Sprintf("review by persona %q failed: %v", persona.Name, err)
		out.failure = err.Error()
		if out.outcome == OutcomeTimeout {
			out.why = fmt.Sprintf("review by persona %q passed its %s deadline", persona.Name, timeout)
			out.failure = fmt.Sprintf("passed its %s deadline", timeout)
		}
		// A failed review is listed as a rejection that says what failed:
		// it never counts towards an approval.
		out.review = Review{
			Plugin: persona.Plugin, Persona: persona.Name, Decision: DecisionReject,
			Notes: "review failed: " + out.failure, LatencyMS: ms(latency),
		}
		return out
	}

	rev, approved, why := Judge(res, persona)
	rev.LatencyMS = ms(latency)
	out.outcome = OutcomeRejected
	if approved {
		out.outcome = OutcomeApproved
	}
	if r.run != nil {
		out.outcome, why = r.run.judgeRun(&rev, approved, why)
		if out.outcome == OutcomeError {
			out.failure = why
		}
	}
	done := map[string]any{
		"review_id": reviewID, "plugin": res.Plugin, "plugin_version": res.PluginVersion,
		"pid": res.PID, "decision": rev.Decision, "gates": rev.Gates,
		"missing_gates": rev.MissingGates, "latency_ms": rev.LatencyMS, "why": why,
	}
	if r.run != nil {
		done["outcome"], done["criteria"], done["missing_work"] = out.outcome, rev.Criteria, len(rev.MissingWork)
	}
	r.recordBestEffort(ctx, EventReviewDone, done)
	out.review, out.judged, out.why = rev, true, why
	return out
}

// Judge applies the host's decision authority to a reviewer's answer. It
// approves only when the text approves (ParseDecision), the structured
// decision agrees, the text's gate lines agree with the structured gates
// (CheckGateLines), and every gate the persona requires is reported as
// passed. The returned reason is one sentence for the verdict.
func Judge(res ReviewResult, persona *Persona) (Review, bool, string) {
	text := res.Text
	if len(text) > MaxDecisionTextBytes {
		text = strings.ToValidUTF8(text[:MaxDecisionTextBytes], "")
	}
	decision, parsed, overruled := readDecision(res.Text)
	rev := Review{
		Plugin: res.Plugin, PluginVersion: res.PluginVersion, Persona: persona.Name,
		Model: res.Model, DecisionText: text, Decision: decision, Gates: res.Gates,
		SOPID: res.SOPID, RollbackPath: res.RollbackPath, Notes: res.Notes,
		Criteria: res.Criteria, Comments: res.Comments, MissingWork: res.MissingWork,
		NextRoundGuidance: res.NextRoundGuidance, Warnings: res.Warnings, Confidence: res.Confidence,
		Turns: res.Turns, Tokens: res.Tokens,
	}
	who := fmt.Sprintf("reviewer %s (persona %s)", res.Plugin, persona.Name)
	if decision != DecisionApprove {
		// A text whose first line approves and a later line overrules is
		// named by that line: the reviewer's notes may say "approved".
		if note := firstSentence(res.Notes); note != "" && !overruled {
			return rev, false, fmt.Sprintf("%s rejected: %s", who, note)
		}
		return rev, false, fmt.Sprintf("%s did not approve: %s", who, parsed)
	}
	if res.Decision != DecisionApprove {
		rev.Decision = DecisionReject
		return rev, false, fmt.Sprintf("%s wrote an approval but reported decision %q; a disagreement is a rejection", who, res.Decision)
	}
	// A gate passes only if every report of it passed: a reviewer that
	// says both pass and fail has not said pass.
	passed := make(map[string]bool, len(res.Gates))
	for _, g := range res.Gates {
		prev, seen := passed[g.Name]
		passed[g.Name] = g.Passed && (!seen || prev)
	}
	for _, g := range persona.RequiredGates {
		if !passed[g] {
			rev.MissingGates = append(rev.MissingGates, g)
		}
	}
	if len(rev.MissingGates) > 0 {
		rev.Decision = DecisionReject
		return rev, false, fmt.Sprintf("%s approved without passing required gates: %s", who, strings.Join(rev.MissingGates, ", "))
	}
	if err := CheckGateLines(res.Text, res.Gates); err != nil {
		rev.Decision = DecisionReject
		return rev, false, fmt.Sprintf("%s approved, but its text and its gates disagree: %v; a disagreement is a rejection", who, err)
	}
	return rev, true, fmt.Sprintf("%s approved with all %d required gates passed", who, len(persona.RequiredGates))
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

// seal writes the trail's final event and waits for the whole trail.
func (r *decision) seal(ctx context.Context, ev AuditEvent) (uint64, error) {
	r.auditMu.Lock()
	seq, err := r.d.Trail.Seal(ctx, ev)
	r.auditMu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("sealing audit trail: %w", err)
	}
	return seq, nil
}

func (r *decision) event(name string, data any) AuditEvent {
	tenant := r.tenant
	if tenant == "" {
		tenant = UnknownTenant
	}
	common := proposalEventData{Action: r.action, Delivery: r.d.Attempt, PolicyEvalUS: r.evalUS}
	if r.p != nil && r.p.Operator != nil {
		common.Operator = r.p.Operator.ID
	}
	if name == EventVerdict {
		common.Action = "" // the verdict names its action itself
	}
	return AuditEvent{
		V: SchemaVersion, Event: name, Tenant: tenant, ProposalID: r.id,
		At: r.e.cfg.Clock.Now().UTC(), PolicyRevision: r.revision,
		Data: mergeJSON(mustJSON(common), mustJSON(data)),
	}
}

// proposalEventData is what every event of a proposal carries in its data.
type proposalEventData struct {
	Action string `json:"action,omitempty"`
	// Operator is the id of the human the agent acts for, once the
	// proposal is decoded.
	Operator string `json:"operator,omitempty"`
	// Delivery is the JetStream delivery count of the proposal message.
	Delivery int `json:"delivery,omitempty"`
	// PolicyEvalUS is how long the policy evaluation took, on every event
	// recorded after it.
	PolicyEvalUS int64 `json:"policy_eval_us,omitempty"`
}

// mergeJSON joins two JSON objects into one by splicing their members: the
// keys of base come first. It does not look for keys present in both, so
// callers keep them apart. When extra is not an object it is kept whole
// under "detail".
func mergeJSON(base, extra json.RawMessage) json.RawMessage {
	extra = bytes.TrimSpace(extra)
	if len(extra) == 0 || string(extra) == "null" {
		return base
	}
	if extra[0] != '{' {
		extra = mustJSON(map[string]json.RawMessage{"detail": extra})
	}
	if len(base) <= 2 { // "{}"
		return extra
	}
	inner := bytes.TrimSpace(extra[1 : len(extra)-1])
	if len(inner) == 0 {
		return base
	}
	out := make([]byte, 0, len(base)+len(extra))
	out = append(out, base[:len(base)-1]...)
	out = append(out, ',')
	out = append(out, inner...)
	return append(out, '}')
}

// recordReceived records the arrival of the delivery's bytes.
func (r *decision) recordReceived(ctx context.Context) error {
	if err := r.record(ctx, EventReceived, receivedData{Subject: r.d.Subject, Bytes: len(r.d.Data), SHA256: r.digest}); err != nil {
		return err
	}
	r.received = true
	return nil
}

// receivedData and policyDecidedData are the data of the two records every
// decided proposal has. Their members are in the order of their names, as
// the maps they replace were written.
type receivedData struct {
	Bytes   int    `json:"bytes"`
	SHA256  string `json:"sha256"`
	Subject string `json:"subject"`
}

type policyDecidedData struct {
	DeniedTools   []string   `json:"denied_tools"`
	Denies        []Deny     `json:"denies"`
	EvalUS        int64      `json:"eval_us"`
	Review        Route      `json:"review"`
	ReviewerTools []string   `json:"reviewer_tools"`
	Run           *RunPolicy `json:"run"`
	SOP           string     `json:"sop"`
}

func (r *decision) record(ctx context.Context, name string, data any) error {
	ev := r.event(name, data)
	r.auditMu.Lock()
	err := r.d.Trail.Record(ctx, ev)
	r.auditMu.Unlock()
	if err != nil {
		return fmt.Errorf("recording audit event %s: %w", name, err)
	}
	return nil
}

// recordBestEffort records an event whose failure will surface at Seal:
// an audit trail that lost an event refuses to seal, so the proposal is
// redelivered rather than acknowledged with a gap in its history.
func (r *decision) recordBestEffort(ctx context.Context, name string, data any) {
	_ = r.record(ctx, name, data)
}

func mustJSON(v any) json.RawMessage {
	switch v := v.(type) {
	case nil:
		return nil
	case json.RawMessage:
		return v // encoded by the engine already
	}
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"marshal_error": err.Error()})
	}
	return b
}

func denyReason(denies []Deny) string {
	parts := make([]string, 0, len(denies))
	for _, d := range denies {
		parts = append(parts, d.Rule+": "+d.Message)
	}
	return "policy denied: " + strings.Join(parts, "; ")
}

func sopID(s *SOP) string {
	if s == nil {
		return ""
	}
	return s.ID
}

func firstSentence(s string) string {
	s = firstNonBlankLine(s)
	if len(s) > 240 {
		s = s[:240] + "…"
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func newReviewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "rv_" + hex.EncodeToString(b[:])
}

// Routed says which persona a policy decision was made for.
type Routed struct {
	// Name and Persona are the persona of the last evaluation; Persona is
	// nil when no persona of that name is loaded.
	Name    string
	Persona *Persona
	// From is the persona evaluated first, when the policy routed the
	// review away from it.
	From string
}

// EvaluateRouted evaluates in with the persona called name. When the
// policy routes the review to another persona and reroute is true, it
// evaluates once more with that persona, so that the tool bag and the
// persona rules are those of the reviewer that runs; a policy that then
// routes elsewhere again is an error. The engine decides this way, and so
// does a dry run.
func EvaluateRouted(ctx context.Context, evaluate func(context.Context, PolicyInput) (PolicyDecision, error),
	personas Personas, in PolicyInput, name string, reroute bool) (PolicyDecision, Routed, error) {
	r := Routed{Name: name}
	r.Persona, _ = personas.Persona(name)
	in.Persona = r.Persona
	d, err := evaluate(ctx, in)
	if err != nil || !reroute || !d.Review.Required || d.Review.Persona == "" || d.Review.Persona == name {
		return d, r, err
	}
	r.From, r.Name = name, d.Review.Persona
	r.Persona, _ = personas.Persona(r.Name)
	in.Persona = r.Persona
	if d, err = evaluate(ctx, in); err != nil {
		return d, r, err
	}
	if d.Review.Persona != "" && d.Review.Persona != r.Name {
		return d, r, fmt.Errorf("policy routed to persona %q and then to %q; routing must settle on one persona", r.Name, d.Review.Persona)
	}
	return d, r, nil
}
