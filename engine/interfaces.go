package engine

import (
	"context"
	"time"

	"github.com/gated/gated"
)

// Policy evaluates the deterministic rules. Implementations are safe for
// concurrent use; the policies package provides the Rego one.
type Policy interface {
	// Evaluate decides one proposal. An error means the policy could not
	// decide; the engine turns it into an error verdict, never an approval.
	Evaluate(ctx context.Context, in PolicyInput) (PolicyDecision, error)
	// Revision identifies the policy that Evaluate would use now. Audit
	// events recorded before the policy runs carry it.
	Revision() string
}

// PolicyInput is the document the policy sees as input.
type PolicyInput struct {
	Proposal *gated.Proposal
	// Persona is the candidate reviewer, nil when none is known.
	Persona *Persona
	// History holds recent verdicts on the same tenant and target.
	History []gated.Verdict
	// RunRecord is gated's record of the earlier rounds of a run
	// proposal's run, nil when there is none.
	RunRecord *gated.RunRecord
	// Budget is the proposal's tenant's and agent's budget counters; nil
	// when no budgets are kept (the policy then sees zeros).
	Budget *gated.BudgetState
	// BudgetUnread says the engine did not read the budget counters,
	// because the policy could not read them (Config.PolicyReadsBudget):
	// Budget is nil. A policy that can read input.budget refuses such an
	// input with ErrBudgetUnread instead of seeing Budget's zeros.
	BudgetUnread bool
	// Session is the proposing agent's flow state (input.session); nil
	// when none is kept or it was not read.
	Session *gated.SessionState
	// SessionUnread says the engine did not read the flow state, because
	// neither the policy nor the shadow could read it
	// (Config.PolicyReadsSession). A policy that can read input.session
	// refuses such an input with ErrSessionUnread.
	SessionUnread bool
	Now           time.Time
}

// PolicyDecision is the policy's answer, data.gated.decision.
type PolicyDecision struct {
	Denies        []gated.Deny
	Review        gated.Route
	ReviewerTools []string
	DeniedTools   []string
	// SOP is the catalog entry that covers the proposal's action, if any.
	SOP *gated.SOP
	// Skipped is true when configuration, not the class, waived review.
	Skipped bool
	// Run is the decision's run section; the policy must give one for a
	// proposal of kind run.
	Run *gated.RunPolicy
	// Holds are the policy's reasons to hold an action for an operator
	// (decision.hold): when there is one and nothing denies, the action
	// goes to a person instead of a reviewer. Never set for a run.
	Holds []gated.Hold
	// Revision identifies the policy modules and data that decided.
	Revision string
	// Eval is how long the evaluation took.
	Eval time.Duration
}

// Persona is a reviewer's configuration as the engine needs it. The
// personas package parses it from markdown with frontmatter.
type Persona struct {
	Name             string        `json:"name"`
	Description      string        `json:"description,omitempty"`
	WhenToUse        string        `json:"when_to_use,omitempty"`
	Model            string        `json:"model,omitempty"`
	MaxTurns         int           `json:"max_turns,omitempty"`
	PermissionMode   string        `json:"permission_mode,omitempty"`
	Background       bool          `json:"background,omitempty"`
	Tools            []string      `json:"tools,omitempty"`
	DisallowedTools  []string      `json:"disallowed_tools,omitempty"`
	CriticalReminder string        `json:"critical_reminder,omitempty"`
	RequiredGates    []string      `json:"required_gates,omitempty"`
	Plugin           string        `json:"plugin,omitempty"`
	Timeout          time.Duration `json:"-"`
	// Prompt is the persona body: the reviewer's system prompt.
	Prompt string `json:"-"`
	// Revision identifies the persona as loaded: the personas package
	// sets it to a digest of the persona file. review.started records it,
	// so a replay can tell whether the same persona would review again.
	Revision string `json:"-"`
}

// Personas looks reviewer personas up by name.
type Personas interface {
	// Persona returns the named persona, or false when there is none.
	Persona(name string) (*Persona, bool)
}

// PersonaLister is an optional interface of Personas: it lists every
// loaded persona, so that a quorum can be filled from personas the policy
// did not name. Without it only the routed persona and Route.Personas are
// candidates.
type PersonaLister interface {
	// Names returns the names of the loaded personas.
	Names() []string
}

// Router finds the reviewer that serves a persona.
type Router interface {
	// Route returns the reviewer for the persona, or an error wrapping
	// ErrNoReviewer when none can take the review.
	Route(p *Persona) (Reviewer, error)
}

// Reviewer runs one review out of process.
type Reviewer interface {
	// Review judges one proposal. It must return when ctx is done; an error
	// is never an approval. Errors wrapping ErrNoReviewer block the
	// proposal; context deadline errors time it out; others are errors.
	// An error's text goes to the audit record only, never to the verdict:
	// a *ReviewError says how the review failed, in words the verdict may
	// use.
	Review(ctx context.Context, req ReviewRequest) (ReviewResult, error)
}

// Turn is a delivery's share of the process that decides it. The bus
// worker lets each tenant decide only a few proposals at once, so that a
// tenant flooding gated takes no more of its CPU than that; a proposal
// whose reviews wait on a reviewer uses no CPU meanwhile, and gives its
// turn to its tenant's next proposal until they answer.
type Turn interface {
	// Release gives the turn up while the decision waits on something
	// other than this process. It does not block; releasing a turn not
	// held does nothing.
	Release()
	// Retake takes a turn back before the decision goes on, ahead of the
	// tenant's proposals that have not begun. It returns ctx's error when
	// ctx ends first, and nil at once when the turn is held.
	Retake(ctx context.Context) error
}

// ReviewRequest is what the host sends a reviewer.
type ReviewRequest struct {
	ReviewID     string
	Proposal     *gated.Proposal
	ProposalJSON []byte
	Persona      *Persona
	// Tools is the effective tool bag after the policy's denials.
	Tools []string
	// DeniedTools are the persona's tools the policy removed.
	DeniedTools []string
	SOP         *gated.SOP
	History     []gated.Verdict
	// PolicyRevision and Why say which policy routed the review and why.
	PolicyRevision string
	Why            string
	Deadline       time.Time
	// Run is set for the review of a kind run proposal.
	Run *gated.RunContext
	// Audit records an event on the proposal's audit trail (tool calls the
	// reviewer made through the host). It may be nil. Events recorded
	// after Review returns are lost; a failed record fails the trail's
	// seal, so the proposal is redelivered rather than decided with a gap.
	Audit func(ctx context.Context, event string, data any)
}

// ReviewResult is a reviewer's answer before the host judges it.
type ReviewResult struct {
	// Plugin is the name gated's configuration gives the reviewer, never
	// what the reviewer calls itself: the verdict's reason and reviews
	// name the reviewer by it.
	Plugin string
	// PluginVersion and Model are what the reviewer reports about itself.
	// Judge keeps one short line of each, at most 128 bytes.
	PluginVersion string
	// PID is the reviewer's process id, for the audit trail.
	PID   int
	Model string
	// Text is the reviewer's full answer; its first line must be the
	// decision line.
	Text string
	// Decision is the reviewer's structured claim. It must agree with Text.
	Decision          gated.ReviewDecision
	Gates             []gated.GateResult
	SOPID             string
	RollbackPath      string
	Notes             string
	Criteria          []gated.CriterionEval
	Comments          []gated.Comment
	MissingWork       []string
	NextRoundGuidance string
	Warnings          []string
	Confidence        float64
	Turns             int
	Tokens            gated.Tokens
}

// VerdictStore is everything an Engine keeps in its store: verdicts for
// idempotent replay, target histories, run records and review claims. It
// is cut into the small interfaces below, one per question a part of the
// engine asks, as io.ReadWriter is cut into io.Reader and io.Writer.
// Implementations are safe for concurrent use; package bus/store has the
// JetStream one.
type VerdictStore interface {
	VerdictReader
	VerdictWriter
	VerdictReplacer
	TargetHistory
	RunRecords
	ReviewClaims
}

// VerdictReader looks verdicts up.
type VerdictReader interface {
	// Get returns the verdict stored for tenant and id, or ErrNotFound.
	// An entry that is not a verdict for tenant and id is an error
	// wrapping ErrCorruptRecord.
	Get(ctx context.Context, tenant, id string) (*gated.Verdict, error)
}

// VerdictWriter stores the first verdict of a proposal.
type VerdictWriter interface {
	// Create stores v under its tenant and proposal id unless a verdict is
	// already there, in which case it returns the stored one and ErrExists.
	// An entry under the key that is not a verdict for it
	// (ErrCorruptRecord) is replaced.
	// A run verdict that continues, escalates or approves adds its round
	// to the run's record (see RunRecords). An approved verdict with a
	// TargetKey has joined its target's history before it is created
	// (TargetHistory.Join): Create does not add it there.
	Create(ctx context.Context, v *gated.Verdict) (*gated.Verdict, error)
}

// VerdictReplacer replaces a held verdict with an operator's decision.
type VerdictReplacer interface {
	// Replace swaps the stored verdict prev for next, under the same
	// tenant and proposal id, only while prev is what is stored (compared
	// by audit sequence). It returns the verdict stored and ErrExists when
	// something else replaced prev first. It keeps the run record as
	// Create does, and like Create it does not add an approval to its
	// target's history: the engine joins it there first.
	Replace(ctx context.Context, prev, next *gated.Verdict) (*gated.Verdict, error)
}

// TargetHistory reads what the policy sees as a proposal's history, and
// adds approvals to it.
//
// An approval joins its target's history by compare-and-set against the
// history the policy decided on, before its verdict is stored: of two
// proposals on one target decided at once, the second to join finds the
// history changed, and the policy decides again on the history as it now
// stands. A crash after the join and before the verdict is stored leaves
// the approval in the history, so the target stays closed for the
// policy's window: the safe side.
type TargetHistory interface {
	// Recent returns the recent approved verdicts on one tenant's target,
	// newest last, and the revision they were read at; an empty history is
	// not an error.
	Recent(ctx context.Context, tenant, targetKey string) (History, error)
	// Join adds v, an approved verdict with a TargetKey, to its target's
	// history, only while the history is still h (compared by revision),
	// as Recent or an earlier Join returned it. When the history changed
	// since h, it writes nothing and returns the history as it stands and
	// an error wrapping ErrTargetChanged. An entry of v's own proposal
	// already in the history (left by a decision that crashed before its
	// verdict was stored) is replaced, not repeated.
	Join(ctx context.Context, v *gated.Verdict, h History) (History, error)
}

// History is a target's recent approvals as the store read them.
type History struct {
	// Verdicts are the approvals, newest last.
	Verdicts []gated.Verdict
	// Revision is the store's revision of the history; 0 when the target
	// has none.
	Revision uint64
}

// RunRecords reads gated's record of the rounds of a run.
type RunRecords interface {
	// RunRecord returns gated's record of a run, or nil and no error when
	// there is none. Create keeps it: a run verdict that continues,
	// escalates or approves adds its round, unless another proposal of the
	// same run already decided that round.
	RunRecord(ctx context.Context, tenant, runID string) (*gated.RunRecord, error)
}

// ReviewClaims is the store's side of the review claim protocol, which
// has a proposal reviewed once however many messages carry it (a
// JetStream redelivery, or a fleet that published it twice). The engine
// drives it in one place: a delivery takes the claim before its reviewers
// run, or waits for the verdict of the message that holds it.
type ReviewClaims interface {
	// Claim takes the review claim on tenant and id for c.Holder. It
	// succeeds when no claim is held, when c supersedes it (a redelivery
	// of the same message takes over from its earlier delivery, see
	// Claim.Supersedes), or when the claim held is stale: past its Until by the
	// store's clock; it then returns c with the Revision it was written
	// at. Otherwise it returns the claim held and an error wrapping
	// ErrClaimed. The claim must not share a key with a verdict or
	// a target history.
	Claim(ctx context.Context, tenant, id string, c Claim) (Claim, error)
	// Release drops the claim c on tenant and id, as Claim returned it,
	// once the verdict is stored (or the review failed). A claim held by
	// another holder, or taken over since c, or none, is left as it is
	// and is not an error. A c whose Revision is 0 names its holder only.
	Release(ctx context.Context, tenant, id string, c Claim) error
	// Await waits until a verdict is stored for tenant and id and returns
	// it, a verdict stored before the call included. It returns ctx's error
	// when ctx ends first.
	Await(ctx context.Context, tenant, id string) (*gated.Verdict, error)
}

// Claim is the right to review one proposal, held by one proposal
// message. Only proposals that go to review are claimed.
type Claim struct {
	// Holder names the message whose delivery holds the claim: "seq:" and
	// its sequence in the proposal stream, so that a redelivery of the
	// same message takes the claim over. A delivery with no stream
	// sequence holds a claim under a name of its own.
	Holder string `json:"holder"`
	// Until is when the claim goes stale: the wall-clock deadline of the
	// holder's reviews plus a grace of 30 seconds. A delivery that finds a
	// stale claim takes it over; one that finds a live claim waits for the
	// holder's verdict instead of reviewing.
	Until time.Time `json:"until"`
	// Delivery is the holder's JetStream delivery count. A redelivery of
	// the holding message (a higher count) takes the claim over; a copy of
	// it delivered earlier and handled late (a lower count: it waited in a
	// buffer past the ack wait) does not, and waits for the verdict.
	Delivery int `json:"delivery,omitempty"`
	// Revision is the store's revision of the claim as Claim wrote it, so
	// that Release can drop that claim and no later one without reading it
	// first; 0 when not known. It is not part of the stored claim.
	Revision uint64 `json:"-"`
	// Replaced is set by Claim when the claim it took replaced one stored
	// before (stale, a redelivery's own, or not gated's): that claim's
	// holder may have stored a verdict, so the taker looks it up. A claim
	// created where none was needs no look-up: a verdict stored by a
	// review keeps its claim. It is not part of the stored claim.
	Replaced bool `json:"-"`
}

// Supersedes tells whether claim c may replace held, a claim that is not
// stale: only a later delivery of the same message may.
func (c Claim) Supersedes(held Claim) bool {
	return c.Holder == held.Holder && c.Delivery >= held.Delivery
}

// AuditTrail records the steps of one proposal. Record may store
// asynchronously, and may hold events back to store several in one
// record; Flush starts storing what it holds; Seal records the last event
// and returns only once every event recorded on the trail is durably
// stored. A sealed trail takes no more events: Record, Flush and Seal
// fail with ErrTrailSealed.
type AuditTrail interface {
	// Record appends an event. An error means the event may be lost; a
	// trail that lost an event must also fail Seal, so the proposal is
	// redelivered instead of acknowledged with a gap in its history.
	Record(ctx context.Context, ev gated.AuditEvent) error
	// Flush starts storing the events recorded so far, without waiting
	// for them to be stored. The engine calls it before a step that may
	// take long (a wait for another delivery's review), so that the
	// stream shows the proposal's progress meanwhile. An error is as
	// Record's.
	Flush(ctx context.Context) error
	// Seal appends the final event, waits for every earlier one, and
	// returns the stream sequence of the final event.
	Seal(ctx context.Context, ev gated.AuditEvent) (uint64, error)
}

// Clock tells the time. Tests supply a fixed one.
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
