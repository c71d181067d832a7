// Package bus is what every role of gated on NATS stands on: the streams,
// the buckets and the durable consumers (Setup), the embedded server, the
// data directory and the errors they share. Package intake takes requests
// off the bus and answers them, package grants serves signed grants, and
// the audit trail is package audit. Fleets use package fleet instead,
// which does not compile any of it.
package bus

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// Subjects and names of the v1 wire contract that only gated uses; those
// fleets share with gated are in package wire.
const (
	ProposalsStream = "GATED_PROPOSALS"
	ConsumerName    = "gated"
)

// MinAckWait is the shortest AckWait accepted: a worker sends in-progress
// acks every third of it, and each must reach JetStream in time.
const MinAckWait = time.Second

// Config holds stream, bucket and consumer settings. The zero value means
// the defaults documented on each field.
type Config struct {
	// Replicas of every stream and the bucket. Default 1; use 3 on a
	// cluster.
	Replicas int
	// AuditMaxAge bounds how long audit events are kept. Default 0: kept
	// until the stream's limits say otherwise (forever).
	AuditMaxAge time.Duration
	// VerdictTTL is how long a key of the verdict bucket (a verdict, a
	// target's history, a run record, a review claim) stays after its last
	// write, and a follow-up in the run stream. Default DefaultVerdictTTL.
	// After it, a copy of the proposal is decided afresh and the id may be
	// reused; the verdict is still in the audit trail.
	VerdictTTL time.Duration
	// DuplicateWindow is the proposal stream's Nats-Msg-Id window.
	// Default 2 minutes.
	DuplicateWindow time.Duration
	// AckWait is how long gated may hold a proposal without a word before
	// JetStream redelivers it; the worker sends in-progress acks every
	// third of it, so long reviews are not redelivered. Default 30 s; at
	// least MinAckWait.
	AckWait time.Duration
	// MaxDeliver bounds the deliveries of one proposal gated tries to
	// decide. When they run out the proposal gets its stored verdict or an
	// error verdict, from the worker on a last delivery that failed, or on
	// the next delivery when gated never answered (crashed or stalled on
	// each). The consumer itself redelivers without limit, so that such a
	// delivery always comes. Default 5.
	MaxDeliver int
	// MaxInFlight bounds proposals decided at once by one gated. Default
	// 1024.
	MaxInFlight int
	// TenantMaxInFlight bounds the proposals of one tenant one gated
	// works on at once while other tenants have proposals in it too, its
	// turns (a tenant alone may use every handler but TenantMaxInFlight,
	// so that one tenant is not throttled for the sake of none and the
	// next tenant to come finds a handler); a tenant's further proposals wait in
	// its own queue, so that a tenant flooding gated takes no more of its
	// CPU than this many proposals' worth and the other tenants'
	// proposals find it free. A proposal whose reviews wait on a reviewer
	// gives its turn up meanwhile (it uses no CPU then), and takes one
	// back, before the tenant's proposals that have not begun, to finish;
	// what bounds a tenant's reviews is its reviews_in_flight budget. So
	// the turns are sized for the CPU: default DefaultTenantTurnsPerCPU
	// per core (GOMAXPROCS), at most MaxInFlight.
	TenantMaxInFlight int
	// MaxAckPending bounds proposals handed out and not yet acknowledged,
	// over every gated process sharing the consumer. Default 4 ×
	// MaxInFlight.
	MaxAckPending int
}

// DefaultVerdictTTL is Config.VerdictTTL's default: a day. What reads the
// keys needs far less at the defaults: a fleet confirms an approval in
// seconds, a proposal is redelivered within minutes (AckWait ×
// MaxDeliver), a target's history spans an hour, a held action waits an
// hour for its operator and its grant lives five minutes more; `gated
// verdict get` reads an older verdict from the audit trail. The day
// leaves room for a run's next round, a follow-up its worker has not
// taken yet, a grant TTL raised up to its 24 h ceiling, and a fleet
// sending a proposal again after an outage of hours, answered with the
// verdict stored rather than decided afresh.
const DefaultVerdictTTL = 24 * time.Hour

// DefaultTenantTurnsPerCPU is how many proposals of one tenant a gated
// works on at once per core by default. Deciding a proposal is CPU
// (decoding, the policy, encoding) between round trips to the server
// (the verdict look-up, the budget counters, the audit records, the
// stored verdict), each about as long as the CPU between them: a few
// proposals per core keep a core busy for one tenant alone, and no more
// are needed for it to have the whole machine when it is the only one
// with work. A flooding tenant gets no more than that while another
// tenant has work.
const DefaultTenantTurnsPerCPU = 4

// DefaultTenantMaxInFlight is Config.TenantMaxInFlight's default for
// maxInFlight handlers: DefaultTenantTurnsPerCPU per core, from 1 to
// maxInFlight.
func DefaultTenantMaxInFlight(maxInFlight int) int {
	return max(1, min(maxInFlight, DefaultTenantTurnsPerCPU*runtime.GOMAXPROCS(0)))
}

// WithDefaults returns c with its zero values set to their defaults, or
// an error wrapping ErrInvalidConfig when c cannot be used.
func (c Config) WithDefaults() (Config, error) {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.VerdictTTL == 0 {
		c.VerdictTTL = DefaultVerdictTTL
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 2 * time.Minute
	}
	if c.AckWait == 0 {
		c.AckWait = 30 * time.Second
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = 5
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 1024
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = 4 * c.MaxInFlight
	}
	if c.TenantMaxInFlight == 0 {
		c.TenantMaxInFlight = DefaultTenantMaxInFlight(c.MaxInFlight)
	}
	switch {
	case c.Replicas < 1 || c.Replicas > 5:
		return c, fmt.Errorf("%w: replicas %d must be between 1 and 5", ErrInvalidConfig, c.Replicas)
	case c.AckWait < MinAckWait:
		return c, fmt.Errorf("%w: ack wait %s must be at least %s: in-progress acks go every third of it and must arrive in time",
			ErrInvalidConfig, c.AckWait, MinAckWait)
	case c.MaxDeliver < 1:
		return c, fmt.Errorf("%w: max deliver %d must be at least 1", ErrInvalidConfig, c.MaxDeliver)
	case c.MaxInFlight < 1:
		return c, fmt.Errorf("%w: max in flight %d must be at least 1", ErrInvalidConfig, c.MaxInFlight)
	case c.TenantMaxInFlight < 1 || c.TenantMaxInFlight > c.MaxInFlight:
		return c, fmt.Errorf("%w: tenant max in flight %d must be from 1 to max in flight %d", ErrInvalidConfig, c.TenantMaxInFlight, c.MaxInFlight)
	case c.MaxAckPending < 1:
		return c, fmt.Errorf("%w: max ack pending %d must be at least 1", ErrInvalidConfig, c.MaxAckPending)
	case c.AuditMaxAge < 0:
		return c, fmt.Errorf("%w: audit max age %s is negative", ErrInvalidConfig, c.AuditMaxAge)
	case c.VerdictTTL < 0:
		return c, fmt.Errorf("%w: verdict TTL %s is negative", ErrInvalidConfig, c.VerdictTTL)
	case c.DuplicateWindow < 0:
		return c, fmt.Errorf("%w: duplicate window %s is negative", ErrInvalidConfig, c.DuplicateWindow)
	}
	return c, nil
}

// Trails starts the audit trail of one delivery.
type Trails func() engine.AuditTrail

// Resources are the JetStream objects gated works with.
type Resources struct {
	Proposals jetstream.Stream
	Audit     jetstream.Stream
	Verdicts  jetstream.KeyValue
	Consumer  jetstream.Consumer
	// Runs is the stream of run follow-ups, wire.RunsStream.
	Runs jetstream.Stream
	// Holds is the stream of the deadlines of actions held for an
	// operator, HoldsStream, and HoldsConsumer the consumer every gated
	// shares to time them out (HoldTimer).
	Holds         jetstream.Stream
	HoldsConsumer jetstream.Consumer
	// Outcomes is the stream of outcome reports, wire.OutcomesStream, and
	// OutcomesConsumer the consumer every gated shares to take them in
	// (Outcomes).
	Outcomes         jetstream.Stream
	OutcomesConsumer jetstream.Consumer
}

// OutcomesConsumerName is the durable consumer of the outcome stream.
const OutcomesConsumerName = "gated-outcomes"

// RunsDuplicateWindow is the run stream's Nats-Msg-Id window: a follow-up
// published again within it (a replay after a crash between publishing it
// and marking it sent) is dropped as a duplicate. It is cut to the
// verdict TTL when that is shorter.
const RunsDuplicateWindow = time.Hour

// Setup creates or updates the streams, the bucket and the durable
// consumer. It is safe to run from many gated processes at once.
func Setup(ctx context.Context, js jetstream.JetStream, cfg Config) (*Resources, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	var r Resources
	r.Proposals, err = Retry(ctx, func(ctx context.Context) (jetstream.Stream, error) {
		return js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        ProposalsStream,
			Description: "Proposals from agent fleets, removed once gated has answered them.",
			Subjects:    []string{wire.ProposalSubjects},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			Duplicates:  cfg.DuplicateWindow,
			Discard:     jetstream.DiscardOld,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", ProposalsStream, err)
	}
	r.Audit, err = Retry(ctx, func(ctx context.Context) (jetstream.Stream, error) {
		return js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        audit.Stream,
			Description: "Every step gated took on the way to every verdict.",
			Subjects:    []string{wire.AuditSubjectPrefix + ">"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			MaxAge:      cfg.AuditMaxAge,
			DenyDelete:  true,
			DenyPurge:   true,
			// Pipelined records carry a Nats-Msg-Id for the check of
			// their predecessor, not for deduplication: the stream
			// remembers each id for this window only.
			Duplicates: auditDuplicates(cfg.AuditMaxAge),
			// Atomic batches let a tenant's chained records land together,
			// checked once against the tenant's last record.
			AllowAtomicPublish: true,
			// The server compresses each block of records once it is full
			// (S2): records repeat their members, their policy input and
			// their reasons, and gated bench's took a seventh of their size.
			// Readers see the records as written.
			Compression: jetstream.S2Compression,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", audit.Stream, err)
	}
	r.Verdicts, err = Retry(ctx, func(ctx context.Context) (jetstream.KeyValue, error) {
		return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      wire.VerdictBucket,
			Description: "Verdicts by <tenant>.<proposal id>, for idempotent replay and look-up.",
			History:     1,
			TTL:         cfg.VerdictTTL,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			// Full blocks compressed, as the audit stream's.
			Compression: true,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("creating bucket %s: %w", wire.VerdictBucket, err)
	}
	r.Runs, err = Retry(ctx, func(ctx context.Context) (jetstream.Stream, error) {
		return js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        wire.RunsStream,
			Description: "Follow-ups of run reviews: continuations for workers, escalations for humans.",
			Subjects:    []string{wire.ContinuationSubjectPrefix + ">", wire.EscalationSubjectPrefix + ">"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			MaxAge:      cfg.VerdictTTL,
			Duplicates:  min(RunsDuplicateWindow, cfg.VerdictTTL),
			Discard:     jetstream.DiscardOld,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", wire.RunsStream, err)
	}
	r.Consumer, err = Retry(ctx, func(ctx context.Context) (jetstream.Consumer, error) {
		return js.CreateOrUpdateConsumer(ctx, ProposalsStream, jetstream.ConsumerConfig{
			Durable:     ConsumerName,
			Description: "gated deciders; every gated process shares this consumer.",
			AckPolicy:   jetstream.AckExplicitPolicy,
			AckWait:     cfg.AckWait,
			// Unlimited: the worker enforces cfg.MaxDeliver and answers a
			// delivery past it, which JetStream must therefore make.
			MaxDeliver:    -1,
			MaxAckPending: cfg.MaxAckPending,
			FilterSubject: wire.ProposalSubjects,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("creating consumer %s on %s: %w", ConsumerName, ProposalsStream, err)
	}
	if err := setupHolds(ctx, js, cfg, &r); err != nil {
		return nil, err
	}
	r.Outcomes, err = Retry(ctx, func(ctx context.Context) (jetstream.Stream, error) {
		return js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        wire.OutcomesStream,
			Description: "Outcome reports of executors, removed once gated has audited and stored them.",
			Subjects:    []string{wire.OutcomeSubjects, wire.OutcomeAgentSubjects},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			Duplicates:  cfg.DuplicateWindow,
			Discard:     jetstream.DiscardOld,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", wire.OutcomesStream, err)
	}
	r.OutcomesConsumer, err = Retry(ctx, func(ctx context.Context) (jetstream.Consumer, error) {
		return js.CreateOrUpdateConsumer(ctx, wire.OutcomesStream, jetstream.ConsumerConfig{
			Durable:        OutcomesConsumerName,
			Description:    "gated's intake of outcome reports; every gated process shares this consumer.",
			AckPolicy:      jetstream.AckExplicitPolicy,
			AckWait:        cfg.AckWait,
			MaxDeliver:     -1,
			FilterSubjects: []string{wire.OutcomeSubjects, wire.OutcomeAgentSubjects},
		})
	})
	if err != nil {
		return nil, fmt.Errorf("creating consumer %s on %s: %w", OutcomesConsumerName, wire.OutcomesStream, err)
	}
	return &r, nil
}

// AuditDuplicateWindow is the audit stream's Nats-Msg-Id window. The ids
// of pipelined audit records (PublishPipelined) serve the stream's check
// of each record's predecessor, which does not use the window; a short one
// keeps the stream from remembering some minutes of records' ids.
const AuditDuplicateWindow = time.Second

func auditDuplicates(maxAge time.Duration) time.Duration {
	if maxAge > 0 && maxAge < AuditDuplicateWindow {
		return maxAge
	}
	return AuditDuplicateWindow
}

// setupAttempt bounds one request of Setup. A cluster that is still
// electing leaders can drop a reply; the request is then sent again while
// Setup's context allows.
const setupAttempt = 5 * time.Second

// Retry runs create until it succeeds, fails for a reason other than an
// unanswered request, or ctx ends. Creating and updating are idempotent.
func Retry[T any](ctx context.Context, create func(context.Context) (T, error)) (T, error) {
	for {
		actx, cancel := context.WithTimeout(ctx, setupAttempt)
		v, err := create(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !transient(err) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// transient tells whether a JetStream API request went unanswered, or was
// refused because the cluster is not ready yet.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders):
		return true
	case errors.As(err, &apiErr):
		return apiErr.ErrorCode == jsClusterNotAvailable || apiErr.ErrorCode == jsNoSuitablePeers
	}
	return false
}

// JetStream error codes of a cluster that is not ready yet: no meta
// leader, or peers not known to be online (a cluster still forming, a
// node restarting). The second is also what a cluster too small for the
// replicas gets; Setup then fails with it once its context ends.
const (
	jsClusterNotAvailable jetstream.ErrorCode = 10008
	jsNoSuitablePeers     jetstream.ErrorCode = 10005
)

// The deadlines of held actions. They are gated's own: no tenant needs
// the subjects or the stream.
const (
	// HoldsStream keeps one message per action held for an operator,
	// until the hold is settled.
	HoldsStream = "GATED_HOLDS"
	// HoldSubjectPrefix + tenant + "." + id is the subject of one hold's
	// deadline.
	HoldSubjectPrefix = wire.Root + "holds."
	// HoldsConsumerName is the durable consumer every gated shares to time
	// held actions out.
	HoldsConsumerName = "gated-holds"
)

// HoldSubject is the subject of the deadline of the held action of
// tenant and id.
func HoldSubject(tenant, id string) string { return HoldSubjectPrefix + tenant + "." + id }

func setupHolds(ctx context.Context, js jetstream.JetStream, cfg Config, r *Resources) error {
	var err error
	r.Holds, err = Retry(ctx, func(ctx context.Context) (jetstream.Stream, error) {
		return js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        HoldsStream,
			Description: "Deadlines of actions held for an operator, removed once each hold is settled.",
			Subjects:    []string{HoldSubjectPrefix + "*.*"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			Duplicates:  cfg.DuplicateWindow,
			// A hold outlives no verdict: the verdict bucket's TTL bounds it.
			MaxAge: cfg.VerdictTTL,
		})
	})
	if err != nil {
		return fmt.Errorf("creating stream %s: %w", HoldsStream, err)
	}
	r.HoldsConsumer, err = Retry(ctx, func(ctx context.Context) (jetstream.Consumer, error) {
		return js.CreateOrUpdateConsumer(ctx, HoldsStream, jetstream.ConsumerConfig{
			Durable:     HoldsConsumerName,
			Description: "gated's hold timers; every gated process shares this consumer.",
			AckPolicy:   jetstream.AckExplicitPolicy,
			AckWait:     cfg.AckWait,
			// A hold is looked at again until it is settled.
			MaxDeliver: -1,
		})
	})
	if err != nil {
		return fmt.Errorf("creating consumer %s on %s: %w", HoldsConsumerName, HoldsStream, err)
	}
	return nil
}
