package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/tracectx"
)

// CheckVerdict returns nil when v approves its proposal (outcome approved
// and approved true), else a *VerdictError. A nil verdict is not an
// approval either.
func CheckVerdict(v *gated.Verdict) error {
	if v == nil {
		return fmt.Errorf("%w: no verdict", ErrNotApproved)
	}
	if v.Outcome == gated.OutcomeApproved && v.Approved {
		return nil
	}
	return &VerdictError{Verdict: v}
}

// DefaultWait is how long the client waits for a verdict when the context
// has no deadline.
const DefaultWait = 90 * time.Second

// ClientOption configures a Client.
type ClientOption func(*clientOptions) error

type clientOptions struct {
	wait      time.Duration
	apiPrefix string
}

// WithDefaultWait sets how long a call waits for its verdict when its
// context has no deadline. Default DefaultWait (90 s). A context deadline
// always wins.
func WithDefaultWait(d time.Duration) ClientOption {
	return func(o *clientOptions) error {
		if d <= 0 {
			return fmt.Errorf("%w: default wait %s must be positive", ErrInvalidConfig, d)
		}
		o.wait = d
		return nil
	}
}

// WithAPIPrefix sets the JetStream API prefix used for verdict look-ups,
// for accounts that import JetStream from another account or domain.
// Default "$JS.API".
func WithAPIPrefix(prefix string) ClientOption {
	return func(o *clientOptions) error {
		prefix = strings.TrimSuffix(prefix, ".")
		if prefix == "" || strings.ContainsAny(prefix, " *>") {
			return fmt.Errorf("%w: JetStream API prefix %q", ErrInvalidConfig, prefix)
		}
		o.apiPrefix = prefix
		return nil
	}
}

// Client is the fleet side: it publishes proposals and waits for their
// verdicts, and orchestrators follow the continuations and escalations of
// their runs with it. It is safe for concurrent use.
//
// A tenant's NATS user needs no account-wide JetStream rights to use it.
// With the connection's inbox prefix written INBOX (default "_INBOX"; set
// one per tenant with nats.CustomInboxPrefix) and TENANT its tenant token,
// the subjects it touches are:
//
//	publish   gated.proposals.TENANT.*            Propose, ProposeRaw
//	subscribe gated.verdicts.TENANT.*             Propose, ProposeRaw (the verdict)
//	subscribe gated.status.TENANT.*               Watch, and WithStatus
//	subscribe INBOX.>                             every call (the JetStream publish
//	                                              acknowledgement, the look-up and
//	                                              the review service's reply)
//	publish   $JS.API.DIRECT.GET.KV_GATED_VERDICTS.$KV.GATED_VERDICTS.TENANT.*
//	                                              Verdict, and Propose/ProposeRaw
//	                                              when a proposal is a duplicate
//	publish   gated.review.TENANT                 RequestReview only
//	publish   $JS.API.CONSUMER.CREATE.GATED_RUNS.*.gated.continuations.TENANT.*
//	                                              Continuations only
//	publish   $JS.API.CONSUMER.CREATE.GATED_RUNS.*.gated.escalations.TENANT
//	                                              Escalations only
//	publish   $JS.API.CONSUMER.MSG.NEXT.GATED_RUNS.*
//	                                              Continuations, Escalations
//
// Continuations and Escalations need the JetStream consumer API of
// gated's account: a consumer-create request may name any deliver
// subject, so tenants in accounts of their own do not get it, and follow
// their runs through the stream import of their follow-up subjects
// instead (docs/NATS.md). The other calls work unchanged in a tenant
// account that imports the subjects above from gated's.
//
// Every request the client makes is answered on the connection's own
// inbox, so confining a tenant to INBOX.> with a prefix of its own keeps
// other tenants' replies away from it.
type Client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	opts clientOptions
}

// NewClient wraps a connection. It makes no request: a tenant without
// JetStream API rights can build one. Options that fail validation return
// an error wrapping ErrInvalidConfig.
func NewClient(nc *nats.Conn, opts ...ClientOption) (*Client, error) {
	o := clientOptions{wait: DefaultWait, apiPrefix: jetstream.DefaultAPIPrefix}
	o.apiPrefix = strings.TrimSuffix(o.apiPrefix, ".")
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	js, err := jetstream.NewWithAPIPrefix(nc, o.apiPrefix)
	if err != nil {
		return nil, err
	}
	return &Client{nc: nc, js: js, opts: o}, nil
}

// ProposeOption configures one Propose or ProposeRaw call.
type ProposeOption func(*proposeOptions)

type proposeOptions struct {
	status func(StatusUpdate)
}

// WithStatus calls fn with each status event of the proposal (see Watch)
// while the call waits for its verdict, from the call's own goroutine: the
// status subject is subscribed before the proposal is published, and the
// events that arrived before the verdict are all handed to fn before the
// call returns. fn must not block for long. The verdict the call returns
// is still the only answer; a status is progress.
func WithStatus(fn func(StatusUpdate)) ProposeOption {
	return func(o *proposeOptions) { o.status = fn }
}

// Address is what a proposal must carry to be published: its tenant, id
// and action tokens.
type Address struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	Action string `json:"action"`
}

// AddressOf reads the address of a raw proposal. It checks only what
// publishing needs; gated validates the rest and answers invalid.
func AddressOf(data []byte) (Address, error) {
	var a Address
	if err := json.Unmarshal(data, &a); err != nil {
		return a, fmt.Errorf("%w: %v", ErrBadProposal, err)
	}
	return a, a.check()
}

func (a Address) check() error {
	switch {
	case !gated.ValidTenant(a.Tenant):
		return fmt.Errorf("%w: tenant %q must match [a-z0-9_-]{1,64}", ErrBadProposal, a.Tenant)
	case !gated.ValidID(a.ID):
		return fmt.Errorf("%w: id %q must match [A-Za-z0-9_-]{1,128}", ErrBadProposal, a.ID)
	case !gated.ValidAction(a.Action):
		return fmt.Errorf("%w: action %q must match [A-Za-z0-9_-]{1,128}", ErrBadProposal, a.Action)
	}
	return nil
}

// Key is the proposal's Nats-Msg-Id and its verdict's key in the verdict
// bucket: <tenant>.<id>.
func (a Address) Key() string { return a.Tenant + "." + a.ID }

// Propose publishes p and waits for its verdict until ctx ends (or the
// client's default wait when ctx has no deadline). It fails closed: the
// error is nil only for an approval. Any other verdict comes back with a
// *VerdictError (which carries it too); the verdict is returned alongside.
//
// p is sent as its JSON encoding, with v set to the schema version when
// it is zero; the same proposal always encodes to the same bytes, so
// proposing it again is idempotent. When ctx carries an OpenTelemetry
// span, its W3C trace context goes with the proposal (headers traceparent
// and tracestate), and gated's spans for it are its children. Errors: ErrBadProposal (tenant, id or
// action is not a valid token), ErrNoVerdict, ErrIDReused, a *VerdictError,
// or a NATS error.
func (c *Client) Propose(ctx context.Context, p *gated.Proposal) (*gated.Verdict, error) {
	return c.ProposeWith(ctx, p)
}

// ProposeWith is Propose with options, such as WithStatus to follow the
// proposal's progress while it waits.
func (c *Client) ProposeWith(ctx context.Context, p *gated.Proposal, opts ...ProposeOption) (*gated.Verdict, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil proposal", ErrBadProposal)
	}
	sent := *p
	if sent.V == 0 {
		sent.V = gated.SchemaVersion
	}
	a := Address{Tenant: sent.Tenant, ID: sent.ID, Action: sent.Action}
	if err := a.check(); err != nil {
		return nil, err
	}
	data, err := json.Marshal(&sent)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding proposal %s: %v", ErrBadProposal, a.Key(), err)
	}
	v, err := c.propose(ctx, a, data, opts)
	if err != nil {
		return nil, err
	}
	return v, CheckVerdict(v)
}

// ProposeRaw publishes a raw proposal and waits for its verdict until ctx
// ends (or the client's default wait when ctx has no deadline). Unlike
// Propose it returns every verdict with a nil error, whatever its outcome:
// it is for tools that show the verdict, such as `gated propose`; call
// CheckVerdict before acting on it.
//
// It subscribes to the verdict subject before publishing, and when the
// stream reports the proposal as a duplicate of one already sent, it reads
// the stored verdict instead of waiting for a new one. Errors:
// ErrBadProposal, ErrNoVerdict, ErrIDReused, or a NATS error.
func (c *Client) ProposeRaw(ctx context.Context, data []byte, opts ...ProposeOption) (*gated.Verdict, error) {
	a, err := AddressOf(data)
	if err != nil {
		return nil, err
	}
	return c.propose(ctx, a, data, opts)
}

func (c *Client) withWait(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.opts.wait)
}

func (c *Client) propose(ctx context.Context, a Address, data []byte, opts []ProposeOption) (*gated.Verdict, error) {
	var po proposeOptions
	for _, o := range opts {
		o(&po)
	}
	ctx, cancel := c.withWait(ctx)
	defer cancel()
	ch := make(chan *nats.Msg, 16)
	sub, err := c.nc.ChanSubscribe(wire.VerdictSubject(a.Tenant, a.ID), ch)
	if err != nil {
		return nil, fmt.Errorf("subscribing to verdicts: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// With a status callback, the status subject is subscribed on the same
	// connection before the proposal goes out: the server delivers gated's
	// decided status before its verdict, so the statuses waiting when the
	// verdict comes are all handed over before Propose returns.
	var statuses chan *nats.Msg
	if po.status != nil {
		statuses = make(chan *nats.Msg, watchBuffer)
		ssub, err := c.nc.ChanSubscribe(wire.StatusSubject(a.Tenant, a.ID), statuses)
		if err != nil {
			return nil, fmt.Errorf("subscribing to the status of %s: %w", a.Key(), err)
		}
		defer func() { _ = ssub.Unsubscribe() }()
	}
	status := func(m *nats.Msg) { po.status(statusUpdate(a.Tenant, a.ID, m.Data)) }
	drain := func() {
		for {
			select {
			case m := <-statuses:
				status(m)
			default:
				return
			}
		}
	}
	// The subscription must be in place on the server before the proposal
	// can be decided, or a fast verdict is missed.
	if err := c.nc.FlushWithContext(ctx); err != nil {
		return nil, fmt.Errorf("subscribing to verdicts: %w", err)
	}

	msg := nats.NewMsg(wire.ProposalSubject(a.Tenant, a.Action))
	msg.Data = data
	msg.Header.Set(jetstream.MsgIDHeader, a.Key())
	if po.status != nil {
		// gated publishes the statuses of a proposal whose proposer says
		// it follows them, on any server.
		msg.Header.Set(wire.StatusHeader, "1")
	}
	// The span of ctx, if any, is the parent of gated's spans for this
	// proposal (W3C traceparent and tracestate headers).
	tracectx.Inject(ctx, msg.Header)
	digest := proposalDigest(data)
	ack, err := c.js.PublishMsg(ctx, msg)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: proposal %s not acknowledged: %v", ErrNoVerdict, a.Key(), err)
		}
		return nil, fmt.Errorf("publishing proposal %s: %w", a.Key(), err)
	}
	if ack.Duplicate {
		if v, err := c.storedVerdict(ctx, a); err == nil {
			drain()
			return answer(a, digest, v)
		}
	}
	// A duplicate's verdict may have been published before this client
	// subscribed, and a verdict message can be lost; poll the bucket now
	// and then as well.
	poll := time.NewTicker(2 * time.Second)
	defer poll.Stop()
	for {
		select {
		case m := <-ch:
			// Anything else that lands on the verdict subject is skipped,
			// not taken as a failure: another client can have a JetStream
			// acknowledgement or a reply sent there, and must not be able
			// to make this proposal's wait fail.
			v, ok := verdictMessage(a, m.Data)
			if !ok {
				continue
			}
			drain()
			return c.confirm(ctx, a, digest, v)
		case m := <-statuses:
			status(m)
		case <-poll.C:
			// The verdict message is core NATS: it is lost when it is
			// published while this connection reconnects, or crowded out
			// of the subscription's buffer. The stored verdict is not.
			if v, err := c.storedVerdict(ctx, a); err == nil {
				drain()
				return answer(a, digest, v)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: proposal %s: %v", ErrNoVerdict, a.Key(), ctx.Err())
		}
	}
}

func proposalDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// answer accepts only a verdict for exactly these bytes: an earlier
// proposal's verdict under the same id, or a message that merely claims to
// be a verdict, is not this proposal's answer.
func answer(a Address, digest string, v *gated.Verdict) (*gated.Verdict, error) {
	if v.Tenant != a.Tenant || v.ProposalID != a.ID {
		return nil, fmt.Errorf("verdict names %s.%s, want %s", v.Tenant, v.ProposalID, a.Key())
	}
	if v.ProposalSHA256 != digest {
		if v.ProposalSHA256 == "" {
			return nil, fmt.Errorf("verdict of %s names no proposal digest: gated always sets one, so it is not gated's", a.Key())
		}
		return nil, fmt.Errorf("%w: %s", ErrIDReused, a.Key())
	}
	return v, nil
}

// storedVerdict reads the stored verdict of a, briefly: a look-up that
// goes unanswered must not keep a wait from the verdict subject.
func (c *Client) storedVerdict(ctx context.Context, a Address) (*gated.Verdict, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.Verdict(ctx, a.Tenant, a.ID)
}

// confirm accepts a verdict that arrived as a message. Messages are not
// authenticated: whoever may publish on the verdict subject, or answer on
// the review service's subject, can send one. A refusal is taken as it
// comes (it can only stop an action), but an approval counts only once the
// stored verdict, which only gated can write, confirms it: that costs one
// direct get per approval, and a look-up that fails is not an approval.
func (c *Client) confirm(ctx context.Context, a Address, digest string, v *gated.Verdict) (*gated.Verdict, error) {
	return confirmApproval(a, digest, v, func() (*gated.Verdict, error) { return c.storedVerdict(ctx, a) })
}

// confirmApproval is confirm with the stored verdict's look-up passed in:
// the whole of the client's judgement of a verdict message, which the
// shared test vectors hold every client to.
func confirmApproval(a Address, digest string, v *gated.Verdict, stored func() (*gated.Verdict, error)) (*gated.Verdict, error) {
	v, err := answer(a, digest, v)
	if err != nil || !v.Approved {
		return v, err // not an approval, whatever its outcome says (CheckVerdict)
	}
	s, err := stored()
	if err != nil {
		return nil, fmt.Errorf("confirming the approval of %s with its stored verdict: %w", a.Key(), err)
	}
	return answer(a, digest, s)
}

// verdictMessage reads a message on a's verdict subject. Anything that is
// not a verdict naming a's tenant and id is not an answer (ok false) and
// is skipped, not taken as a failure.
func verdictMessage(a Address, data []byte) (v *gated.Verdict, ok bool) {
	v = new(gated.Verdict)
	if err := json.Unmarshal(data, v); err != nil || v.Tenant != a.Tenant || v.ProposalID != a.ID {
		return nil, false
	}
	return v, true
}

// VerdictLookupSubject is the JetStream direct-get subject that reads the
// stored verdict of tenant and id: the only look-up right a tenant needs.
func VerdictLookupSubject(apiPrefix, tenant, id string) string {
	return apiPrefix + ".DIRECT.GET.KV_" + wire.VerdictBucket + ".$KV." + wire.VerdictBucket + "." + tenant + "." + id
}

// Verdict looks up a stored verdict with one JetStream direct get of its
// key, so it needs no right beyond reading that key. It returns
// gated.ErrNotFound when none is stored (never decided, or past the
// bucket's TTL), ErrBadProposal when tenant or id is not a valid token.
func (c *Client) Verdict(ctx context.Context, tenant, id string) (*gated.Verdict, error) {
	if !gated.ValidTenant(tenant) {
		return nil, fmt.Errorf("%w: tenant %q must match [a-z0-9_-]{1,64}", ErrBadProposal, tenant)
	}
	if !gated.ValidID(id) {
		return nil, fmt.Errorf("%w: id %q must match [A-Za-z0-9_-]{1,128}", ErrBadProposal, id)
	}
	ctx, cancel := c.withWait(ctx)
	defer cancel()
	subject := VerdictLookupSubject(c.opts.apiPrefix, tenant, id)
	m, err := c.nc.RequestWithContext(ctx, subject, nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("reading verdict %s.%s: nothing answers %s: is gated's bucket %s set up, and may this user read it?", tenant, id, subject, wire.VerdictBucket)
	}
	if err != nil {
		return nil, fmt.Errorf("reading verdict %s.%s: %w", tenant, id, err)
	}
	return decodeStoredVerdict(tenant, id, m)
}

// decodeStoredVerdict reads a direct-get reply: a 404 status or a KV
// delete marker is "not found".
func decodeStoredVerdict(tenant, id string, m *nats.Msg) (*gated.Verdict, error) {
	if len(m.Data) == 0 {
		switch status := m.Header.Get("Status"); status {
		case "404":
			return nil, gated.ErrNotFound
		case "":
		default:
			return nil, fmt.Errorf("reading verdict %s.%s: JetStream answered %s %s", tenant, id, status, m.Header.Get("Description"))
		}
	}
	switch m.Header.Get("KV-Operation") {
	case "DEL", "PURGE":
		return nil, gated.ErrNotFound
	}
	if subj := m.Header.Get(jetstream.SubjectHeader); subj != "" && subj != "$KV."+wire.VerdictBucket+"."+tenant+"."+id {
		return nil, fmt.Errorf("reading verdict %s.%s: JetStream returned the entry of %s", tenant, id, subj)
	}
	var v gated.Verdict
	if err := json.Unmarshal(m.Data, &v); err != nil {
		return nil, fmt.Errorf("decoding stored verdict %s.%s: %w", tenant, id, err)
	}
	if v.Tenant != tenant || v.ProposalID != id {
		return nil, fmt.Errorf("stored verdict under %s.%s names %s.%s", tenant, id, v.Tenant, v.ProposalID)
	}
	return &v, nil
}

// RequestReview sends a raw proposal to gated's review service on
// gated.review.<tenant> and returns the verdict of the reply, whatever its
// outcome (like ProposeRaw). The service publishes the proposal on the
// same durable path as ProposeRaw. Errors: ErrBadProposal, a *ServiceError
// (which matches ErrServiceUnavailable, ErrNoVerdict, ErrTenantMismatch,
// ErrIDReused, ErrBadProposal by its code), ErrServiceUnavailable when no
// gated serves the endpoint, ErrNoVerdict when ctx ends first.
func (c *Client) RequestReview(ctx context.Context, data []byte) (*gated.Verdict, error) {
	a, err := AddressOf(data)
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.withWait(ctx)
	defer cancel()
	req := nats.NewMsg(wire.ReviewSubjectPrefix + a.Tenant)
	req.Data = data
	tracectx.Inject(ctx, req.Header) // the service passes it on with the proposal
	m, err := c.nc.RequestMsgWithContext(ctx, req)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w: nothing serves %s%s (is gated serve running with --review-service?)", ErrServiceUnavailable, wire.ReviewSubjectPrefix, a.Tenant)
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("%w: proposal %s: %v", ErrNoVerdict, a.Key(), err)
	case err != nil:
		return nil, fmt.Errorf("requesting review of %s: %w", a.Key(), err)
	}
	v, err := decodeReviewReply(m.Header, m.Data)
	if err != nil {
		return nil, err
	}
	return c.confirm(ctx, a, proposalDigest(data), v)
}

// decodeReviewReply reads a reply of the review service: a micro error
// (headers Nats-Service-Error-Code and Nats-Service-Error) becomes a
// *ServiceError, anything else must be a verdict.
func decodeReviewReply(h nats.Header, data []byte) (*gated.Verdict, error) {
	if code := h.Get(micro.ErrorCodeHeader); code != "" {
		n, err := strconv.Atoi(code)
		if err != nil || n < 100 || n > 999 {
			n = 500
		}
		desc := h.Get(micro.ErrorHeader)
		if desc == "" {
			desc = "no description"
		}
		return nil, &ServiceError{Code: n, Description: desc}
	}
	var v gated.Verdict
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("decoding the review service's reply: %w", err)
	}
	if v.ProposalID == "" || v.Tenant == "" || v.Outcome == "" {
		return nil, errors.New("decoding the review service's reply: not a verdict (no proposal_id, tenant or outcome)")
	}
	return &v, nil
}
