// Package engine is gated's own: the engine that decides one proposal
// with the public model of package gated.
//
// Engine decodes and validates a proposal, asks the policy, routes to a
// reviewer when the policy says so, and turns the result into a verdict.
// It fails closed: every path that is not an explicit, well-formed
// approval ends in an outcome other than approved. Config and the
// interfaces it takes, the policy input, the budget counters, Judge and
// the audit events are exported for gated's own packages and may change;
// the pipeline's machinery is unexported or under engine/internal.
//
// The package is pure. It reaches the outside world only through the
// interfaces it defines (Policy, Reviewer, VerdictStore, AuditTrail, Clock),
// so its tests run in microseconds and it never imports NATS or gRPC.
package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/internal/dedupe"
)

// DefaultReviewTimeout is how long a review may take unless the persona
// says otherwise.
const DefaultReviewTimeout = 60 * time.Second

// DefaultOperatorDeadline is how long a held action waits for an
// operator unless configured otherwise.
const DefaultOperatorDeadline = time.Hour

// DefaultPersona is the persona that reviews when neither the proposal nor
// the policy names one.
const DefaultPersona = "reviewer"

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
	Limits gated.Limits
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
	// Shadow, when set, is a candidate policy evaluated after the live
	// Policy on every proposal the live policy decides, with the same
	// input. It never changes a verdict: a difference (its evaluation
	// failing included) is recorded as a policy.shadow_differs event and
	// reported to OnShadow. A Shadow whose Revision is empty has no good
	// build and is not evaluated.
	Shadow Policy
	// OperatorDeadline is how long an action the policy holds for an
	// operator waits for a decision before it times out; a hold of the
	// policy may set a shorter one. Default DefaultOperatorDeadline;
	// negative is an error.
	OperatorDeadline time.Duration
	// Grants, when set, signs the grant every approved action verdict
	// carries; serve always sets it. Without it approvals carry none.
	Grants Granter
	// Budgets, when set, counts every proposal against its tenant's and
	// agent's limits, shows the counters to the policy (input.budget), and
	// refuses a proposal over a limit before any review starts. Nil: no
	// limits.
	Budgets Budgets
	// PolicyReadsBudget says whether the policy, or the shadow beside it,
	// can read input.budget now. When it says no, the engine does not read
	// the budget counters for the policy input (it still admits by them);
	// a policy that can after all refuses the input (ErrBudgetUnread), and
	// the engine reads them and evaluates again. Nil: the counters are
	// read for every proposal.
	PolicyReadsBudget func() bool
	// Sessions, when set, shows the policy the proposing agent's flow
	// state (input.session) when PolicyReadsSession says it can read it.
	// Nil: input.session is null.
	Sessions Sessions
	// PolicyReadsSession says whether the policy, or the shadow beside it,
	// can read input.session now; the flow state is read only when it
	// says yes (a policy that can after all refuses the input with
	// ErrSessionUnread, and the engine reads it and evaluates again). Nil:
	// the state is read for every proposal.
	PolicyReadsSession func() bool
	// OnShadow, when set, hears every comparison of the shadow with the
	// live decision, differing or not, for metrics. It must not block.
	OnShadow func(p *gated.Proposal, c gated.ShadowComparison)
	// Trace, when set, is told as each stage the engine runs itself
	// begins (TraceDecode), with the decision's context, and returns
	// what to call when the stage ends, with its error. The stages that
	// call out (store, policy, review, audit) are traced by the
	// implementations of those interfaces. Default nil: nothing is traced
	// and nothing is spent on it.
	Trace func(ctx context.Context, stage string) (end func(error))
}

// Stages the engine reports to Config.Trace.
const (
	// TraceDecode is the strict decoding and validation of a proposal.
	TraceDecode = "decode"
)

// noTrace ends a stage nobody traces.
func noTrace(error) {}

// trace begins the stage named stage for Config.Trace.
func (e *Engine) trace(ctx context.Context, stage string) func(error) {
	if e.cfg.Trace == nil {
		return noTrace
	}
	return e.cfg.Trace(ctx, stage)
}

// Engine runs the pipeline. It is safe for concurrent use.
type Engine struct {
	cfg Config
	// rejections is nil when deduplication is off.
	rejections *dedupe.Window
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
	case cfg.OperatorDeadline < 0:
		return nil, fmt.Errorf("%w: OperatorDeadline %s is negative", ErrInvalidOption, cfg.OperatorDeadline)
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
	if cfg.OperatorDeadline == 0 {
		cfg.OperatorDeadline = DefaultOperatorDeadline
	}
	if cfg.DedupeWindow == 0 {
		cfg.DedupeWindow = DefaultDedupeWindow
	}
	if cfg.DedupeMax == 0 {
		cfg.DedupeMax = DefaultDedupeMax
	}
	cfg.Limits = cfg.Limits.WithDefaults()
	e := &Engine{cfg: cfg}
	if cfg.DedupeWindow > 0 {
		e.rejections = dedupe.New(cfg.DedupeWindow, cfg.DedupeMax)
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
	// Attempt is the delivery count, 1 on first delivery. A first
	// delivery is decided without looking up a stored verdict first; any
	// other count (0: unknown) looks it up.
	Attempt int
	// StreamSeq is the message's sequence in the proposal stream. It names
	// the holder of the proposal's review claim, so that a redelivery of
	// the same message takes the claim over while another message carrying
	// the same proposal waits for its verdict. Zero when unknown: the
	// delivery then holds claims under a name of its own.
	StreamSeq uint64
	// Trail records this delivery's audit events.
	Trail AuditTrail
	// Retrail, when set, opens a further trail for the delivery's
	// proposal: a delivery whose sealed decision lost to a verdict stored
	// first records that there and is answered at once. Nil: such a
	// delivery is answered with the stored verdict of the same bytes, or
	// fails with ErrIDTaken and its redelivery is answered invalid.
	Retrail func() AuditTrail
	// Turn, when set, is the delivery's turn among its tenant's proposals
	// being decided: the engine gives it up while the reviews wait on
	// their reviewers and takes it back before it goes on. Nil: the
	// delivery holds nothing to give up.
	Turn Turn
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
// A proposal that goes to review is claimed first (see ReviewClaims), so
// that it is reviewed once however many messages carry it; a delivery that
// finds the claim held by another message waits for that review's verdict
// and replays it.
func (e *Engine) Decide(ctx context.Context, d Delivery) (*gated.Verdict, error) {
	if d.Trail == nil {
		return nil, fmt.Errorf("%w: a delivery needs an audit trail", ErrInvalidOption)
	}
	return e.newDecision(d).decide(ctx)
}

func (e *Engine) newDecision(d Delivery) *pass {
	digest := sha256.Sum256(d.Data)
	r := &pass{e: e, d: d, start: e.cfg.Clock.Now(), digest: hex.EncodeToString(digest[:])}
	// The policy revision is read once: events recorded before the policy
	// decides, and the dedupe look-up, name the same one.
	r.revision, r.delivery = e.cfg.Policy.Revision(), d.Attempt
	r.log = auditLog{trail: d.Trail, clock: e.cfg.Clock, head: &r.eventHead}
	return r
}

// GiveUp answers a delivery that could not be decided within its delivery
// budget: an error verdict, audited and stored as far as the audit trail
// and the store still allow, so the proposer is not left waiting. When a
// verdict was stored earlier (and only its publication failed), that
// verdict is returned instead, or an invalid verdict when it belongs to a
// different proposal under the same id. It never approves. The review
// claim of the delivery's message, if it holds one, is released when no
// verdict is stored under the proposal's key.
func (e *Engine) GiveUp(ctx context.Context, d Delivery, cause error) *gated.Verdict {
	r := e.newDecision(d)
	r.tenant, r.id = recoverAddress(d.Subject, d.Data, d.MsgID)
	_, r.action, _ = parseProposalSubject(d.Subject)
	// A verdict under the proposal's key keeps the claim, as decide's
	// does, so that a copy that finds no claim need not look a verdict up
	// (reviewClaim.take).
	kept := false
	if r.id != "" && d.StreamSeq != 0 {
		// A holder that crashed mid-review left its claim behind.
		r.claim = r.newClaim()
		r.claim.held = true
		defer func() {
			if !kept {
				r.claim.release(ctx)
			}
		}()
	}
	if r.id != "" {
		if stored, err := e.cfg.Store.Get(ctx, r.tenant, r.id); err == nil {
			kept = true
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
	v := r.verdict(gated.OutcomeError, gated.StageValidation,
		fmt.Sprintf("gated could not record a decision after %d deliveries: %v", d.Attempt, cause))
	if d.Trail == nil {
		return v
	}
	stored, err := r.finish(ctx, v)
	switch {
	case err == nil:
		kept = true
		return stored
	case errors.Is(err, gated.ErrIDTaken):
		kept = true
		return r.idReused()
	}
	return v
}
