package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/grant"
	"github.com/gated/gated/internal/strictjson"
)

// Proposer is what a ToolGate needs to reach gated. *Client implements it;
// tests and runtimes with their own transport may bring another. Propose
// must return a nil error only for an approval (see Client.Propose).
type Proposer interface {
	Propose(ctx context.Context, p *gated.Proposal) (*gated.Verdict, error)
}

var _ Proposer = (*Client)(nil)

// Identity is who proposes through a ToolGate: the fleet's tenant, the agent
// and its session, and the human it acts for.
type Identity struct {
	// Tenant is the tenant token, [a-z0-9_-]{1,64}. Required.
	Tenant string
	// Agent names the proposing agent (requested_by.agent); gated uses it
	// to keep an agent from reviewing its own proposals and to tell its own
	// recent changes from other agents'. Required.
	Agent string
	// Session is the agent's session (requested_by.session). Optional.
	Session string
	// Operator is the human on whose behalf the agent acts. Optional.
	Operator *gated.Principal
	// Reviewer asks for a persona (proposal field reviewer) unless a
	// Change names its own. Optional; the policy's routes outrank it.
	Reviewer string
}

func (id Identity) validate() error {
	switch {
	case !gated.ValidTenant(id.Tenant):
		return fmt.Errorf("%w: identity tenant %q must match [a-z0-9_-]{1,64}", ErrInvalidConfig, id.Tenant)
	case strings.TrimSpace(id.Agent) == "":
		return fmt.Errorf("%w: identity needs an agent name", ErrInvalidConfig)
	case id.Operator != nil && strings.TrimSpace(id.Operator.ID) == "":
		return fmt.Errorf("%w: identity operator needs an id", ErrInvalidConfig)
	case id.Reviewer != "" && !gated.ValidTenant(id.Reviewer):
		return fmt.Errorf("%w: identity reviewer %q must be a persona name matching [a-z0-9_-]{1,64}", ErrInvalidConfig, id.Reviewer)
	}
	return nil
}

// ToolGateOption configures a ToolGate.
type ToolGateOption func(*gateOptions) error

type gateOptions struct {
	timeout time.Duration
	newID   func() string
	observe func(*gated.Proposal, *gated.Verdict)
	// grants verifies and uses the grant of every approval; nil only with
	// noGrants.
	grants   *Grants
	noGrants bool
}

// WithGrants has the ToolGate verify and use the grant of every approval
// with g before the tool runs. Default, for a *Client proposer: Grants on
// the client's connection. A ToolGate over another Proposer needs it (or
// WithoutGrantCheck).
func WithGrants(g *Grants) ToolGateOption {
	return func(o *gateOptions) error {
		if g == nil {
			return fmt.Errorf("%w: nil Grants", ErrInvalidConfig)
		}
		o.grants = g
		return nil
	}
}

// WithoutGrantCheck turns the grant check off: an approval lets the tool
// run without its grant being verified and used, so nothing stops the
// same approval from running a tool twice, or a forged verdict from
// running it. It exists for a Proposer that is not gated (tests) and for
// gated versions that issue no grants; never use it in production.
func WithoutGrantCheck() ToolGateOption {
	return func(o *gateOptions) error {
		o.noGrants = true
		return nil
	}
}

// WithReviewTimeout bounds how long a guarded call waits for its verdict
// when its context has no deadline. Default DefaultWait (90 s), longer
// than gated's default review deadline (60 s) so that a slow review ends
// in a timeout verdict rather than in ErrNoVerdict.
func WithReviewTimeout(d time.Duration) ToolGateOption {
	return func(o *gateOptions) error {
		if d <= 0 {
			return fmt.Errorf("%w: review timeout %s must be positive", ErrInvalidConfig, d)
		}
		o.timeout = d
		return nil
	}
}

// WithProposalIDs replaces the generator of proposal ids for calls whose
// Change names none. Every id must be new: a reused id gets the earlier
// proposal's verdict or ErrIDReused. Default: a millisecond timestamp and
// 64 random bits.
func WithProposalIDs(next func() string) ToolGateOption {
	return func(o *gateOptions) error {
		if next == nil {
			return fmt.Errorf("%w: nil proposal id generator", ErrInvalidConfig)
		}
		o.newID = next
		return nil
	}
}

// WithVerdictObserver calls observe with every proposal the ToolGate sends
// and its verdict, approvals included, before the tool runs (or not). Use
// it to log or count verdicts; it must not block for long.
func WithVerdictObserver(observe func(*gated.Proposal, *gated.Verdict)) ToolGateOption {
	return func(o *gateOptions) error {
		o.observe = observe
		return nil
	}
}

// ToolGate puts gated in front of the tools of a Go agent runtime. Tools of
// class read run at once; write and destructive tools run only after
// gated approves a proposal describing the call. It is safe for
// concurrent use.
//
// The class of a tool is the runtime's claim, made in code when the tool
// is registered: gated never sees a read, so never let a model choose it.
//
// A ToolGate guards a fleet's own tools; it is not gated.GateResult, which is
// one check a reviewer reports on a proposal.
type ToolGate struct {
	proposer Proposer
	id       Identity
	opts     gateOptions
}

// NewToolGate builds a ToolGate that proposes through p (usually a
// *Client) as id. An unusable identity or option is an error wrapping
// ErrInvalidConfig.
func NewToolGate(p Proposer, id Identity, opts ...ToolGateOption) (*ToolGate, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: a ToolGate needs a Proposer such as *fleet.Client", ErrInvalidConfig)
	}
	if err := id.validate(); err != nil {
		return nil, err
	}
	o := gateOptions{timeout: DefaultWait, newID: newProposalID}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	switch {
	case o.noGrants:
		o.grants = nil
	case o.grants != nil:
	default:
		c, ok := p.(*Client)
		if !ok {
			return nil, fmt.Errorf("%w: a ToolGate over a Proposer other than *fleet.Client needs WithGrants to check the grant of each approval (or WithoutGrantCheck)", ErrInvalidConfig)
		}
		g, err := NewGrants(c.nc)
		if err != nil {
			return nil, err
		}
		g.js = c.js // the client's API prefix
		o.grants = g
	}
	if id.Operator != nil {
		op := *id.Operator
		op.Roles = append([]string(nil), op.Roles...)
		id.Operator = &op
	}
	return &ToolGate{proposer: p, id: id, opts: o}, nil
}

// Change describes one call of a mutating tool: what gated reviews.
type Change struct {
	// ID is the proposal id, an idempotency key: a call retried with the
	// same ID and the same content gets the stored verdict instead of a
	// second review. Default: a new id per call.
	ID string
	// Target is what the call acts on, e.g. {"host": "web-7", "service":
	// "nginx", "tags": ["production"]}. gated refuses parallel changes to
	// the same target.
	Target map[string]any
	// Reason is why the agent wants to act (at most 8 KiB).
	Reason string
	// BlastRadius is single_device, cluster or tenant_wide. Required.
	BlastRadius gated.BlastRadius
	// IncidentID links the change to an incident. Optional.
	IncidentID string
	// ContextSummary is what the agent knows that a reviewer should too
	// (at most 64 KiB). Optional.
	ContextSummary string
	// Flags are the proposal's flags; the default policy refuses
	// skip_review and force_approve outright.
	Flags gated.Flags
	// Reviewer asks for a persona for this call, over Identity.Reviewer.
	Reviewer string
	// Arguments are the call's arguments as the tool receives them, for
	// the policy and the reviewer to read beside the target; the grant
	// binds them. Guard sets them from the call. A runtime that calls
	// Authorize itself must run the call with exactly these. No two
	// member names may be equal under case folding.
	Arguments map[string]any
}

// ToolSpec declares a tool to a ToolGate: its action token, its class, and
// how a call's arguments become the Change gated reviews.
type ToolSpec[A any] struct {
	// Action is the tool's name on the wire, [A-Za-z0-9_-]{1,128}, e.g.
	// host_restart_service. Required.
	Action string
	// Class is read, write or destructive. Required. A read tool runs
	// without a proposal.
	Class gated.Class
	// Describe turns a call's arguments into the Change to review.
	// Required for write and destructive tools; unused for read.
	Describe func(args A) Change
}

// Validate reports whether the spec is usable; Guard checks it too, and a
// guarded tool with an unusable spec never runs.
func (s ToolSpec[A]) Validate() error {
	if !gated.ValidAction(s.Action) {
		return fmt.Errorf("%w: action %q must match [A-Za-z0-9_-]{1,128}", ErrInvalidToolSpec, s.Action)
	}
	switch s.Class {
	case gated.ClassRead:
	case gated.ClassWrite, gated.ClassDestructive:
		if s.Describe == nil {
			return fmt.Errorf("%w: %s tool %s needs Describe to say what a call changes", ErrInvalidToolSpec, s.Class, s.Action)
		}
	default:
		return fmt.Errorf("%w: tool %s has class %q; want read, write or destructive", ErrInvalidToolSpec, s.Action, s.Class)
	}
	return nil
}

// Guard wraps fn, a tool of the given spec, so that it runs only when
// gated allows it:
//
//   - read: fn runs at once; nothing is proposed.
//   - write, destructive: args are encoded once as JSON (they must encode
//     as an object, with no two member names equal under case folding),
//     and a proposal built from the ToolGate's identity and
//     spec.Describe(args) is sent, carrying those arguments. fn and
//     Describe get the arguments decoded from exactly those bytes, never
//     the caller's value: what runs is what was reviewed, whatever the
//     caller does to its maps and pointers meanwhile, and fields that do
//     not encode (unexported, json:"-") are zero. fn runs once, only if the verdict
//     is an approval whose grant verifies against the proposal and is
//     used with gated (see WithGrants; a refused grant is an error
//     matching ErrGrantRefused, and a refusal of the ToolGate's own is
//     reported to gated), and started is reported to gated. When fn
//     returns, its end is reported: succeeded, or failed with its error's
//     text (see Finish).
//
// Otherwise the wrapped function returns R's zero value and an error
// without running fn: a *VerdictError for a verdict that is not an
// approval (errors.Is matches ErrReviewRejected, ErrReviewBlocked,
// ErrReviewError, ErrReviewTimeout, ErrProposalInvalid, ErrNotApproved;
// errors.As gives the verdict and its reason), ErrNoVerdict when the
// review outlives the context (or the ToolGate's review timeout when the
// context has no deadline), ErrInvalidToolSpec, or a transport error.
// The context passed to fn is the caller's.
func Guard[A, R any](g *ToolGate, spec ToolSpec[A], fn func(context.Context, A) (R, error)) func(context.Context, A) (R, error) {
	invalid := spec.Validate()
	switch {
	case invalid != nil:
	case g == nil:
		invalid = fmt.Errorf("%w: tool %s guarded by a nil ToolGate", ErrInvalidToolSpec, spec.Action)
	case fn == nil:
		invalid = fmt.Errorf("%w: tool %s has no function", ErrInvalidToolSpec, spec.Action)
	}
	return func(ctx context.Context, args A) (R, error) {
		var zero R
		if invalid != nil {
			return zero, invalid
		}
		if spec.Class == gated.ClassRead {
			return fn(ctx, args)
		}
		reviewed, arguments, err := snapshot(spec.Action, args)
		if err != nil {
			return zero, err
		}
		change := spec.Describe(reviewed)
		change.Arguments = arguments
		v, err := g.Authorize(ctx, spec.Action, spec.Class, change)
		if err != nil {
			return zero, err
		}
		r, runErr := fn(ctx, reviewed)
		// The tool ran: its result stands whether or not the report
		// reaches gated.
		_ = g.Finish(ctx, v, runErr)
		return r, runErr
	}
}

// snapshot encodes a call's arguments once and returns what the tool runs
// with, decoded from those bytes, and what the proposal carries, read
// from the same bytes. Errors wrap ErrInvalidToolSpec.
func snapshot[A any](action string, args A) (reviewed A, arguments map[string]any, err error) {
	data, err := json.Marshal(args)
	if err != nil {
		return reviewed, nil, fmt.Errorf("%w: the arguments of %s are not JSON a reviewer can read: %v", ErrInvalidToolSpec, action, err)
	}
	v, err := strictjson.ReadValue(data, strictjson.ValueOptions{})
	if err != nil {
		return reviewed, nil, fmt.Errorf("%w: the arguments of %s: %v", ErrInvalidToolSpec, action, err)
	}
	arguments, ok := v.(map[string]any)
	if !ok {
		return reviewed, nil, fmt.Errorf("%w: the arguments of %s must encode as a JSON object; they encode as %.40s", ErrInvalidToolSpec, action, data)
	}
	if err := strictjson.CheckFolded(arguments); err != nil {
		return reviewed, nil, fmt.Errorf("%w: the arguments of %s: %v", ErrInvalidToolSpec, action, err)
	}
	if err := json.Unmarshal(data, &reviewed); err != nil {
		return reviewed, nil, fmt.Errorf("%w: the arguments of %s do not decode as they encode: %v", ErrInvalidToolSpec, action, err)
	}
	return reviewed, arguments, nil
}

// reportWait bounds an outcome report the ToolGate sends on its own (an
// end, a refusal): it outlives the caller's context, briefly, so that a
// cancelled call is still reported.
const reportWait = 5 * time.Second

// Finish reports the end of a call Authorize allowed: succeeded when
// runErr is nil, else failed with runErr's text. Guard calls it after the
// tool; a runtime that calls Authorize calls it after running the call.
// It does nothing for a read (v nil) or without the grant check. The
// report outlives ctx's cancellation by up to 5 s.
func (g *ToolGate) Finish(ctx context.Context, v *gated.Verdict, runErr error) error {
	if v == nil || g.opts.grants == nil || v.Grant == "" {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportWait)
	defer cancel()
	gid, err := g.opts.grants.gidOf(rctx, v.Grant)
	if err != nil {
		return fmt.Errorf("reporting the outcome of %s.%s: %w", v.Tenant, v.ProposalID, err)
	}
	status, text := gated.ExecutionSucceeded, ""
	if runErr != nil {
		status, text = gated.ExecutionFailed, runErr.Error()
	}
	return g.opts.grants.Report(rctx, v.Tenant, v.ProposalID, gid, status, text)
}

// Authorize asks gated whether a call of action, of class, may make
// change, for runtimes that dispatch tools dynamically rather than
// through Guard. It returns a nil error only when the call may run: at
// once for class read (with a nil verdict: nothing is proposed), else
// when gated approved (with the verdict), the grant was used and started
// was reported. Run the call then, and report its end with Finish. Errors
// are those of Guard, and a failure to report started (the call must not
// run: gated would not know it did).
func (g *ToolGate) Authorize(ctx context.Context, action string, class gated.Class, change Change) (*gated.Verdict, error) {
	switch class {
	case gated.ClassRead:
		return nil, nil
	case gated.ClassWrite, gated.ClassDestructive:
	default:
		return nil, fmt.Errorf("%w: tool %s has class %q; want read, write or destructive", ErrInvalidToolSpec, action, class)
	}
	p := g.proposal(action, class, change)
	rctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, g.opts.timeout)
		defer cancel()
	}
	v, err := g.proposer.Propose(rctx, p)
	if v != nil && g.opts.observe != nil {
		g.opts.observe(p, v)
	}
	if err != nil {
		return v, err
	}
	// Trust nothing but an approval of exactly this proposal, whatever
	// the Proposer says.
	if err := CheckVerdict(v); err != nil {
		return v, err
	}
	if v.Tenant != p.Tenant || v.ProposalID != p.ID || v.Action != p.Action {
		return v, fmt.Errorf("%w: the approval names %s.%s (%s), not proposal %s.%s (%s)",
			ErrNotApproved, v.Tenant, v.ProposalID, v.Action, p.Tenant, p.ID, p.Action)
	}
	if err := ctx.Err(); err != nil {
		return v, fmt.Errorf("approved, but the call was cancelled before %s ran: %w", action, err)
	}
	if err := g.checkGrant(ctx, p, v); err != nil {
		return v, err
	}
	return v, nil
}

// checkGrant verifies the grant of v, the approval of p, against p and
// uses it: after this the call may run, once.
func (g *ToolGate) checkGrant(ctx context.Context, p *gated.Proposal, v *gated.Verdict) error {
	if g.opts.grants == nil {
		return nil
	}
	if v.Grant == "" {
		err := &grant.Error{Member: "grant", Reason: "is missing from the approval: gated issues none, or the verdict is not gated's"}
		g.reportRefusal(ctx, p, "", err)
		return fmt.Errorf("approved, but %w", err)
	}
	want, err := expectOf(p)
	if err != nil {
		return err
	}
	by := g.id.Agent
	if g.id.Session != "" {
		by += "/" + g.id.Session
	}
	c, err := g.opts.grants.Verify(ctx, v.Grant, want)
	if err != nil {
		if errors.Is(err, ErrGrantRefused) {
			// Refused here, not by gated: tell gated, which audits it.
			g.reportRefusal(ctx, p, "", err)
		}
		return fmt.Errorf("approved, but %s does not run: %w", p.Action, err)
	}
	// A use gated refuses is audited by gated itself.
	if err := g.opts.grants.Use(ctx, c.Tenant, v.Grant, by); err != nil {
		return fmt.Errorf("approved, but %s does not run: %w", p.Action, err)
	}
	if err := g.opts.grants.Report(ctx, c.Tenant, c.ProposalID, c.GID, gated.ExecutionStarted, ""); err != nil {
		return fmt.Errorf("approved and the grant used, but %s does not run: %w", p.Action, err)
	}
	return nil
}

// reportRefusal tells gated the ToolGate refused p's grant, and why. The
// refusal stands whether or not the report gets through.
func (g *ToolGate) reportRefusal(ctx context.Context, p *gated.Proposal, gid string, why error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportWait)
	defer cancel()
	_ = g.opts.grants.Report(rctx, p.Tenant, p.ID, gid, gated.ExecutionRefused, why.Error())
}

// proposal builds the proposal of one call.
func (g *ToolGate) proposal(action string, class gated.Class, c Change) *gated.Proposal {
	id := c.ID
	if id == "" {
		id = g.opts.newID()
	}
	reviewer := c.Reviewer
	if reviewer == "" {
		reviewer = g.id.Reviewer
	}
	p := &gated.Proposal{
		V:              gated.SchemaVersion,
		ID:             id,
		Tenant:         g.id.Tenant,
		Kind:           gated.KindAction,
		Action:         action,
		Class:          class,
		Target:         c.Target,
		Arguments:      c.Arguments,
		Reason:         c.Reason,
		BlastRadius:    c.BlastRadius,
		RequestedBy:    &gated.RequestedBy{Agent: g.id.Agent, Session: g.id.Session},
		IncidentID:     c.IncidentID,
		ContextSummary: c.ContextSummary,
		Flags:          c.Flags,
		Reviewer:       reviewer,
	}
	if g.id.Operator != nil {
		op := *g.id.Operator
		p.Operator = &op
	}
	return p
}

// newProposalID returns a fresh id: a millisecond timestamp in base 36
// (ids sort by time) and 64 random bits.
func newProposalID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return strconv.FormatInt(time.Now().UnixMilli(), 36) + "-" + hex.EncodeToString(b[:])
}
