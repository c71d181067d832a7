package intake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/tracectx"
)

// The review service's names. Its subjects, wire.ReviewSubject and
// wire.ReviewSubjectPrefix + tenant, are in package wire: fleets share them.
const (
	// ServiceName is the nats micro service name: $SRV.PING.gated,
	// $SRV.INFO.gated and $SRV.STATS.gated discover it.
	ServiceName = "gated"
	// ReviewQueueGroup is the queue group of both endpoints: every gated
	// process serves them, and each request goes to one.
	ReviewQueueGroup = "gated"
)

// Endpoint names, as $SRV.INFO and $SRV.STATS report them.
const (
	ReviewEndpoint       = "review"
	TenantReviewEndpoint = "review_tenant"
)

// ServiceConfig configures the review service. The zero value means the
// defaults documented on each field.
type ServiceConfig struct {
	// Version is gated's version, reported by $SRV.INFO. micro wants
	// SemVer: a leading "v" is dropped, and a version that is still not
	// SemVer (such as "dev") is reported as 0.0.0-dev-<version>. The
	// metadata key gated_version always holds it as given.
	Version string
	// Wait bounds how long a request waits for its verdict; past it the
	// reply is a 504 error while the proposal stays queued and is decided
	// as usual. Default fleet.DefaultWait (90 s).
	Wait time.Duration
	// MaxConcurrent bounds requests waiting for verdicts at once; a request
	// beyond it is refused at once with a 503 error. Default 1024.
	MaxConcurrent int
	// MaxBytes is the largest request accepted; a larger one gets a 413
	// error. Default gated.DefaultMaxBytes (1 MiB), gated's own limit.
	MaxBytes int
	// Operators, when set, adds the endpoint "operator" on
	// gated.operator.<tenant>.<proposal_id> (subscribed as
	// gated.operator.*.*): signed operator decisions on held run
	// verdicts. Default nil: not served. Its requests share MaxConcurrent
	// with reviews; MaxBytes does not apply (operator.MaxMessageBytes does).
	Operators *operator.Endpoint
	// FlowClear, when set, adds the endpoint "flow_clear" on
	// gated.flowclear.<tenant> (subscribed as gated.flowclear.*):
	// operators' signed clearing of an agent's flow state. Default nil:
	// not served. Its requests share MaxConcurrent with reviews.
	FlowClear *operator.FlowClearer
}

func (c ServiceConfig) withDefaults() (ServiceConfig, error) {
	if c.Wait == 0 {
		c.Wait = fleet.DefaultWait
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = 1024
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = gated.DefaultMaxBytes
	}
	switch {
	case c.Wait < 0:
		return c, fmt.Errorf("%w: review wait %s is negative", bus.ErrInvalidConfig, c.Wait)
	case c.MaxConcurrent < 0:
		return c, fmt.Errorf("%w: max concurrent reviews %d is negative", bus.ErrInvalidConfig, c.MaxConcurrent)
	case c.MaxBytes < 0:
		return c, fmt.Errorf("%w: max bytes %d is negative", bus.ErrInvalidConfig, c.MaxBytes)
	}
	return c, nil
}

// ReviewStats is the data $SRV.STATS.gated carries for each endpoint, next
// to micro's own counters. micro counts a request when its handler
// returns, which is when the request is handed to its own goroutine, and
// its num_errors only covers the refusals made at once (400, 403, 413,
// 503); these counters follow every request to its reply.
type ReviewStats struct {
	// InFlight is the number of requests waiting for a verdict now, over
	// both endpoints; MaxConcurrent is the bound.
	InFlight      int64 `json:"in_flight"`
	MaxConcurrent int   `json:"max_concurrent"`
	// Verdicts counts the verdicts replied, by outcome.
	Verdicts map[gated.Outcome]int64 `json:"verdicts"`
	// Refused counts the error replies, by code.
	Refused map[string]int64 `json:"refused"`
}

// Service is gated's request/reply review endpoint, a nats micro service
// named "gated" with endpoints gated.review and gated.review.<tenant>
// (subscribed as gated.review.*). A request is a v1 proposal; the service
// publishes it on gated.proposals.<tenant>.<action> with its Nats-Msg-Id,
// exactly as a fleet would, waits for the verdict and replies with it. So
// a request is decided, stored, audited and replayed like any proposal,
// by whichever gated process takes it from the stream. With
// ServiceConfig.Operators it also serves signed operator decisions on
// gated.operator.<tenant>.<proposal_id> (see operator.Endpoint for its
// replies).
//
// Requests are served concurrently, up to ServiceConfig.MaxConcurrent.
// Error replies are micro errors (headers Nats-Service-Error-Code and
// Nats-Service-Error, empty body):
//
//	400  the proposal cannot be addressed: the description names the field
//	     (tenant, id, action), or the subject's tenant token is malformed
//	403  gated.review.<tenant> got a proposal of another tenant
//	409  the id was used by a different proposal of the same tenant
//	413  the request is larger than ServiceConfig.MaxBytes
//	500  the proposal could not be published
//	503  too many requests in flight, or the service is stopping
//	504  no verdict within ServiceConfig.Wait; the proposal is queued and
//	     will be decided: read it later with Client.Verdict
type Service struct {
	client *fleet.Client
	nc     *nats.Conn
	cfg    ServiceConfig
	log    *zap.Logger
	svc    micro.Service

	// ctx is cancelled when Stop's grace period is over: requests still
	// waiting get a 503.
	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{}

	mu       sync.Mutex // guards stopping and wg.Add against Stop's Wait
	stopping bool
	wg       sync.WaitGroup
	stopOnce sync.Once

	inFlight atomic.Int64
	counters map[string]*endpointCounters // by endpoint name; fixed after start
}

type endpointCounters struct {
	mu       sync.Mutex
	verdicts map[gated.Outcome]int64
	refused  map[string]int64
}

func (c *endpointCounters) verdict(o gated.Outcome) {
	c.mu.Lock()
	c.verdicts[o]++
	c.mu.Unlock()
}

func (c *endpointCounters) refuse(code string) {
	c.mu.Lock()
	c.refused[code]++
	c.mu.Unlock()
}

// StartService starts the review service on nc. nc needs to publish
// proposals and replies and read verdicts, like gated itself. Note that
// micro installs nc's closed and error handlers: set yours before.
func StartService(nc *nats.Conn, cfg ServiceConfig, log *zap.Logger) (*Service, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	client, err := fleet.NewClient(nc, fleet.WithDefaultWait(cfg.Wait))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{
		client: client, nc: nc, cfg: cfg, log: log,
		ctx: ctx, cancel: cancel, sem: make(chan struct{}, cfg.MaxConcurrent),
		counters: map[string]*endpointCounters{},
	}
	for _, name := range []string{ReviewEndpoint, TenantReviewEndpoint, operator.EndpointName, operator.FlowClearEndpointName} {
		s.counters[name] = &endpointCounters{verdicts: map[gated.Outcome]int64{}, refused: map[string]int64{}}
	}
	version, raw := serviceVersion(cfg.Version)
	svc, err := micro.AddService(nc, micro.Config{
		Name:    ServiceName,
		Version: version,
		Description: "gated policy gate: request = a v1 proposal (JSON), reply = its verdict (JSON), " +
			"decided through the durable path of " + wire.ProposalSubjectPrefix + "<tenant>.<action>. " +
			wire.ReviewSubjectPrefix + "<tenant> refuses proposals of other tenants; " + wire.ReviewSubject + " takes any tenant " +
			"and is for single-tenant or trusted deployments. " + wire.OperatorSubjectPrefix + "<tenant>.<proposal_id>, when served, " +
			"takes signed operator decisions on run verdicts held for manual criteria.",
		Metadata: map[string]string{
			"gated_version":    raw,
			"wire_schema":      strconv.Itoa(gated.SchemaVersion),
			"proposals":        wire.ProposalSubjectPrefix + "<tenant>.<action>",
			"verdicts":         wire.VerdictSubjectPrefix + "<tenant>.<id>",
			"review_wait":      cfg.Wait.String(),
			"max_concurrent":   strconv.Itoa(cfg.MaxConcurrent),
			"max_request_size": strconv.Itoa(cfg.MaxBytes),
		},
		QueueGroup:   ReviewQueueGroup,
		StatsHandler: s.endpointStats,
		ErrorHandler: func(_ micro.Service, err *micro.NATSError) {
			log.Warn("review service", zap.String("subject", err.Subject), zap.String("error", err.Description))
		},
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("adding micro service %s: %w", ServiceName, err)
	}
	s.svc = svc
	endpoints := []struct {
		name, subject, tenant string
		perTenant             bool
	}{
		{ReviewEndpoint, wire.ReviewSubject, "the proposal's own (single-tenant or trusted deployments)", false},
		{TenantReviewEndpoint, wire.ReviewSubjectPrefix + "*", "the subject's last token; the proposal must name the same", true},
	}
	for _, ep := range endpoints {
		err := svc.AddEndpoint(ep.name, s.handler(ep.name, ep.perTenant),
			micro.WithEndpointSubject(ep.subject),
			micro.WithEndpointMetadata(map[string]string{
				"request":  "v1 proposal JSON",
				"response": "v1 verdict JSON, or a micro error (400, 403, 409, 413, 500, 503, 504)",
				"tenant":   ep.tenant,
			}))
		if err != nil {
			_ = svc.Stop()
			cancel()
			return nil, fmt.Errorf("adding endpoint %s on %s: %w", ep.name, ep.subject, err)
		}
	}
	if cfg.Operators != nil {
		err := svc.AddEndpoint(operator.EndpointName, s.operatorHandler(operator.EndpointName, s.decide(cfg.Operators)),
			micro.WithEndpointSubject(wire.OperatorSubjectPrefix+"*.*"),
			micro.WithEndpointMetadata(map[string]string{
				"request": "signed operator decision JSON (docs/OPERATORS.md), headers " +
					wire.OperatorKeyHeader + " and " + wire.OperatorSigHeader,
				"response": "v1 verdict JSON, or a micro error (400, 401, 403, 404, 409, 503)",
				"tenant":   "the subject's <tenant> token; the message must name the same",
			}))
		if err != nil {
			_ = svc.Stop()
			cancel()
			return nil, fmt.Errorf("adding endpoint %s: %w", operator.EndpointName, err)
		}
	}
	if cfg.FlowClear != nil {
		err := svc.AddEndpoint(operator.FlowClearEndpointName, s.operatorHandler(operator.FlowClearEndpointName, s.clearFlows(cfg.FlowClear)),
			micro.WithEndpointSubject(wire.FlowClearSubjectPrefix+"*"),
			micro.WithEndpointMetadata(map[string]string{
				"request": "signed flow clear JSON (docs/OPERATORS.md), headers " +
					wire.OperatorKeyHeader + " and " + wire.OperatorSigHeader,
				"response": "what was cleared (JSON), or a micro error (400, 401, 403, 404, 409, 503)",
				"tenant":   "the subject's <tenant> token; the message must name the same",
			}))
		if err != nil {
			_ = svc.Stop()
			cancel()
			return nil, fmt.Errorf("adding endpoint %s: %w", operator.FlowClearEndpointName, err)
		}
	}
	// Once StartService returns, the server routes requests here.
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		_ = svc.Stop()
		cancel()
		return nil, fmt.Errorf("subscribing the review service: %w", err)
	}
	return s, nil
}

// Info is what $SRV.INFO.gated reports for this instance.
func (s *Service) Info() micro.Info { return s.svc.Info() }

// Stats is what $SRV.STATS.gated reports for this instance.
func (s *Service) Stats() micro.Stats { return s.svc.Stats() }

// Stop stops taking requests (they go to other gated processes, or get
// no responders), waits up to grace for the requests in flight to get
// their verdicts, then answers the rest with a 503: their proposals are
// queued and will be decided. It returns when every request has had its
// reply. Stop is idempotent and safe on a nil *Service.
func (s *Service) Stop(grace time.Duration) {
	if s == nil {
		return
	}
	s.stopOnce.Do(func() {
		if err := s.svc.Stop(); err != nil {
			s.log.Warn("stopping the review service", zap.Error(err))
		}
		s.mu.Lock()
		s.stopping = true
		s.mu.Unlock()
		done := make(chan struct{})
		go func() { s.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(grace):
			if n := s.inFlight.Load(); n > 0 {
				s.log.Warn("review service: grace period over; answering the requests still waiting with 503", zap.Int64("in_flight", n))
			}
			s.cancel()
			<-done
		}
		s.cancel()
	})
}

func (s *Service) endpointStats(ep *micro.Endpoint) any {
	c := s.counters[ep.Name]
	if c == nil {
		return nil
	}
	st := ReviewStats{InFlight: s.inFlight.Load(), MaxConcurrent: s.cfg.MaxConcurrent,
		Verdicts: map[gated.Outcome]int64{}, Refused: map[string]int64{}}
	c.mu.Lock()
	for k, v := range c.verdicts {
		st.Verdicts[k] = v
	}
	for k, v := range c.refused {
		st.Refused[k] = v
	}
	c.mu.Unlock()
	return st
}

// handler checks a request at once, on micro's delivery goroutine, and
// hands the wait for its verdict to a goroutine of its own: micro runs an
// endpoint's handler for one request at a time.
func (s *Service) handler(name string, perTenant bool) micro.HandlerFunc {
	counters := s.counters[name]
	return func(req micro.Request) {
		refuse := func(code, format string, args ...any) {
			counters.refuse(code)
			if err := req.Error(code, fmt.Sprintf(format, args...), nil); err != nil {
				s.log.Debug("replying to a review request", zap.String("subject", req.Subject()), zap.Error(err))
			}
		}
		if req.Reply() == "" {
			counters.refuse("no_reply")
			return // nobody waits for an answer; fleets publish on gated.proposals
		}
		if !safeReplySubject(req.Reply()) {
			// Replying would publish with gated's own rights on a subject
			// the requester chose: another tenant's verdicts, the audit
			// stream, the proposal stream. Nobody gets an answer.
			counters.refuse("bad_reply")
			s.log.Warn("review request with a reply subject gated does not answer on",
				zap.String("subject", req.Subject()), zap.String("reply", req.Reply()))
			return
		}
		data := req.Data()
		if len(data) > s.cfg.MaxBytes {
			refuse("413", "proposal is %d bytes, larger than the %d byte limit", len(data), s.cfg.MaxBytes)
			return
		}
		a, err := fleet.AddressOf(data)
		if err != nil {
			refuse("400", "%v", err)
			return
		}
		if perTenant {
			tenant := strings.TrimPrefix(req.Subject(), wire.ReviewSubjectPrefix)
			if !gated.ValidTenant(tenant) || tenant == gated.UnknownTenant {
				refuse("400", "subject %s: tenant token %q must match [a-z0-9_-]{1,64}", req.Subject(), tenant)
				return
			}
			if tenant != a.Tenant {
				refuse("403", "proposal of tenant %q sent to %s, the endpoint of tenant %q", a.Tenant, req.Subject(), tenant)
				return
			}
		}
		select {
		case s.sem <- struct{}{}:
		default:
			refuse("503", "overloaded: %d reviews are waiting for verdicts; retry with backoff, or publish on %s%s.%s",
				s.cfg.MaxConcurrent, wire.ProposalSubjectPrefix, a.Tenant, a.Action)
			return
		}
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			<-s.sem
			refuse("503", "gated is stopping; retry, another gated may take the request")
			return
		}
		s.wg.Add(1)
		s.mu.Unlock()
		s.inFlight.Add(1)
		reply := req.Reply()
		// The requester's trace context, if any, goes on with the
		// proposal: gated's spans are children of the requester's.
		parent := tracectx.Extract(s.ctx, nats.Header(req.Headers()))
		go func() {
			defer func() {
				s.inFlight.Add(-1)
				<-s.sem
				s.wg.Done()
			}()
			s.review(parent, counters, a, data, reply)
		}()
	}
}

// review publishes the proposal, waits for its verdict and replies. The
// reply is published directly rather than through micro.Request, which is
// not meant to be used once its handler has returned. parent is the
// service's context with the requester's trace context, if it sent one.
func (s *Service) review(parent context.Context, counters *endpointCounters, a fleet.Address, data []byte, reply string) {
	ctx, cancel := context.WithTimeout(parent, s.cfg.Wait)
	defer cancel()
	v, err := s.client.ProposeRaw(ctx, data)
	msg := &nats.Msg{Subject: reply}
	switch {
	case err == nil:
		body, merr := json.Marshal(v)
		if merr != nil {
			s.errorReply(msg, counters, "500", fmt.Sprintf("encoding the verdict of %s: %v", a.Key(), merr))
			break
		}
		counters.verdict(v.Outcome)
		msg.Data = body
	case s.ctx.Err() != nil:
		s.errorReply(msg, counters, "503", fmt.Sprintf("gated is stopping; proposal %s is queued and will be decided: "+
			"read its verdict on %s or with `gated verdict get %s %s`", a.Key(), wire.VerdictSubject(a.Tenant, a.ID), a.Tenant, a.ID))
	case errors.Is(err, fleet.ErrIDReused):
		s.errorReply(msg, counters, "409", fmt.Sprintf("id %s is already used by a different proposal of tenant %s; it was not decided: choose a new id", a.ID, a.Tenant))
	case errors.Is(err, fleet.ErrNoVerdict):
		s.errorReply(msg, counters, "504", fmt.Sprintf("no verdict for %s within %s; the proposal is queued and will be decided: "+
			"read its verdict on %s or with `gated verdict get %s %s`", a.Key(), s.cfg.Wait, wire.VerdictSubject(a.Tenant, a.ID), a.Tenant, a.ID))
	default:
		s.errorReply(msg, counters, "500", fmt.Sprintf("proposal %s: %v", a.Key(), err))
	}
	if err := s.nc.PublishMsg(msg); err != nil {
		s.log.Warn("replying to a review request", zap.String("key", a.Key()), zap.Error(err))
	}
}

// operatorHandler checks an operator request's envelope at once and
// hands the decision to a goroutine of its own, like handler.
func (s *Service) operatorHandler(name string, serve operatorServe) micro.HandlerFunc {
	counters := s.counters[name]
	return func(req micro.Request) {
		if req.Reply() == "" {
			counters.refuse("no_reply")
			return // an operator decision is only taken with somebody to tell
		}
		if !safeReplySubject(req.Reply()) {
			counters.refuse("bad_reply")
			s.log.Warn("operator request with a reply subject gated does not answer on",
				zap.String("subject", req.Subject()), zap.String("reply", req.Reply()))
			return
		}
		refuse := func(code, desc string) {
			counters.refuse(code)
			if err := req.Error(code, headerSafe(desc), nil); err != nil {
				s.log.Debug("replying to an operator request", zap.String("subject", req.Subject()), zap.Error(err))
			}
		}
		select {
		case s.sem <- struct{}{}:
		default:
			refuse("503", fmt.Sprintf("overloaded: %d requests are in flight; nothing was decided: retry with backoff", s.cfg.MaxConcurrent))
			return
		}
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			<-s.sem
			refuse("503", "gated is stopping; nothing was decided: retry, another gated may take the request")
			return
		}
		s.wg.Add(1)
		s.mu.Unlock()
		s.inFlight.Add(1)
		subject, reply, hdr := req.Subject(), req.Reply(), nats.Header(req.Headers())
		data := req.Data()
		go func() {
			defer func() {
				s.inFlight.Add(-1)
				<-s.sem
				s.wg.Done()
			}()
			msg := &nats.Msg{Subject: reply}
			body, outcome, r := serve(subject, hdr, data)
			if r == nil {
				if outcome != "" {
					counters.verdict(outcome)
				}
				msg.Data = body
			}
			if r != nil {
				s.errorReply(msg, counters, strconv.Itoa(r.Code), headerSafe(r.Description()))
			}
			if err := s.nc.PublishMsg(msg); err != nil {
				s.log.Warn("replying to an operator request", zap.String("subject", subject), zap.Error(err))
			}
		}()
	}
}

// operatorServe answers one operator request: the reply's body and the
// verdict's outcome to count (none for a flow clear), or the refusal.
type operatorServe func(subject string, hdr nats.Header, data []byte) ([]byte, gated.Outcome, *operator.Refusal)

// decide serves the operator decisions of ep.
func (s *Service) decide(ep *operator.Endpoint) operatorServe {
	return func(subject string, hdr nats.Header, data []byte) ([]byte, gated.Outcome, *operator.Refusal) {
		v, r := ep.Decide(s.ctx, s.client.Verdict, subject, hdr, data)
		if r != nil {
			return nil, "", r
		}
		body, err := json.Marshal(v)
		if err != nil {
			return nil, "", &operator.Refusal{Code: 503, Reason: fmt.Sprintf("the decision is stored, but its verdict could not be encoded: %v", err)}
		}
		return body, v.Outcome, nil
	}
}

// clearFlows serves the flow clears of c.
func (s *Service) clearFlows(c *operator.FlowClearer) operatorServe {
	return func(subject string, hdr nats.Header, data []byte) ([]byte, gated.Outcome, *operator.Refusal) {
		cleared, r := c.Clear(s.ctx, subject, hdr, data)
		if r != nil {
			return nil, "", r
		}
		body, err := json.Marshal(cleared)
		if err != nil {
			return nil, "", &operator.Refusal{Code: 503, Reason: fmt.Sprintf("the state is cleared, but the reply could not be encoded: %v", err)}
		}
		return body, "", nil
	}
}

// headerSafe keeps a description on one header line.
func headerSafe(desc string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(desc)
}

func (s *Service) errorReply(msg *nats.Msg, counters *endpointCounters, code, desc string) {
	counters.refuse(code)
	msg.Header = nats.Header{micro.ErrorCodeHeader: {code}, micro.ErrorHeader: {desc}}
}

// semVer is the SemVer 2.0.0 grammar that micro requires of a version.
var semVer = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)` +
	`(-(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(\.(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?` +
	`(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// serviceVersion returns a SemVer form of version for micro, and the
// version as given (or "dev") for the metadata.
func serviceVersion(version string) (semver, raw string) {
	raw = version
	if raw == "" {
		raw = "dev"
	}
	if v := strings.TrimPrefix(raw, "v"); semVer.MatchString(v) {
		return v, raw
	}
	clean := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' {
			return r
		}
		return '-'
	}, raw)
	if clean == "dev" {
		return "0.0.0-dev", raw
	}
	return "0.0.0-dev-" + clean, raw
}

// safeReplySubject tells whether gated may publish a review's answer on
// reply, a subject the requester chose. gated's own subjects and the
// server's API subjects are refused: gated can publish there, the
// requester may not, and a reply must not become a way around that.
func safeReplySubject(reply string) bool {
	if strings.HasPrefix(reply, wire.Root) || strings.HasPrefix(reply, "$") {
		return false
	}
	return !strings.ContainsAny(reply, "*> \t\r\n")
}
