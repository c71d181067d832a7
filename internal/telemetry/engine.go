package telemetry

import (
	"context"
	"errors"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// Stage traces the stages the engine runs itself; it is what
// engine.Config.Trace takes. While tracing is off it returns a function
// that does nothing, without allocating.
func Stage(ctx context.Context, stage string) func(error) {
	if !Enabled() {
		return noEnd
	}
	_, span := Start(ctx, "gated."+stage, KindInternal)
	return span.End
}

func noEnd(error) {}

// Store traces the calls a decision makes on the verdict store: the
// look-up of a stored verdict, the target's history, the review claim and
// the wait for another message's verdict, and storing the verdict.
// onClaimWait, when set, hears how long each wait for a claim held by
// another message took (metrics).
func Store(s engine.VerdictStore, onClaimWait func(time.Duration)) engine.VerdictStore {
	return tracedStore{VerdictStore: s, onClaimWait: onClaimWait}
}

type tracedStore struct {
	engine.VerdictStore
	onClaimWait func(time.Duration)
}

// Get implements engine.VerdictReader.
func (s tracedStore) Get(ctx context.Context, tenant, id string) (*gated.Verdict, error) {
	ctx, span := Start(ctx, SpanStoreLookup, KindClient)
	v, err := s.VerdictStore.Get(ctx, tenant, id)
	span.Bool(AttrFound, err == nil)
	spanErr := err
	if errors.Is(err, gated.ErrNotFound) {
		spanErr = nil // not finding one is the usual answer, not a failure
	}
	span.End(spanErr)
	return v, err
}

// Recent implements engine.TargetHistory.
func (s tracedStore) Recent(ctx context.Context, tenant, targetKey string) (engine.History, error) {
	ctx, span := Start(ctx, SpanStoreHistory, KindClient)
	h, err := s.VerdictStore.Recent(ctx, tenant, targetKey)
	span.End(err)
	return h, err
}

// Join implements engine.TargetHistory: an approval joining its target's
// history, traced as a history span.
func (s tracedStore) Join(ctx context.Context, v *gated.Verdict, h engine.History) (engine.History, error) {
	ctx, span := Start(ctx, SpanStoreHistory, KindClient)
	now, err := s.VerdictStore.Join(ctx, v, h)
	spanErr := err
	if errors.Is(err, engine.ErrTargetChanged) {
		span.Bool("gated.target.changed", true)
		spanErr = nil // another approval joined first: the policy decides again
	}
	span.End(spanErr)
	return now, err
}

// Create implements engine.VerdictWriter.
func (s tracedStore) Create(ctx context.Context, v *gated.Verdict) (*gated.Verdict, error) {
	ctx, span := Start(ctx, SpanStore, KindClient)
	stored, err := s.VerdictStore.Create(ctx, v)
	spanErr := err
	if errors.Is(err, gated.ErrExists) {
		span.Bool(AttrReplayed, true)
		spanErr = nil
	}
	span.End(spanErr)
	return stored, err
}

// Claim implements engine.ReviewClaims.
func (s tracedStore) Claim(ctx context.Context, tenant, id string, c engine.Claim) (engine.Claim, error) {
	ctx, span := Start(ctx, SpanClaim, KindClient)
	held, err := s.VerdictStore.Claim(ctx, tenant, id, c)
	spanErr := err
	if errors.Is(err, gated.ErrClaimed) {
		span.Bool("gated.claim.held_by_another", true)
		spanErr = nil
	}
	span.End(spanErr)
	return held, err
}

// Await implements engine.ReviewClaims.
func (s tracedStore) Await(ctx context.Context, tenant, id string) (*gated.Verdict, error) {
	ctx, span := Start(ctx, SpanClaimWait, KindInternal)
	start := time.Now()
	v, err := s.VerdictStore.Await(ctx, tenant, id)
	if s.onClaimWait != nil {
		s.onClaimWait(time.Since(start))
	}
	span.End(err)
	return v, err
}

// Policy traces each evaluation of p.
func Policy(p engine.Policy) engine.Policy { return tracedPolicy{p} }

type tracedPolicy struct{ engine.Policy }

// Evaluate implements engine.Policy.
func (p tracedPolicy) Evaluate(ctx context.Context, in engine.PolicyInput) (engine.PolicyDecision, error) {
	ctx, span := Start(ctx, SpanPolicy, KindInternal)
	d, err := p.Policy.Evaluate(ctx, in)
	switch {
	case errors.Is(err, engine.ErrBudgetUnread):
		// Not a failure: the engine reads the counters and asks again,
		// in a span of its own.
		span.Bool(AttrBudgetUnread, true)
		span.End(nil)
		return d, err
	case err == nil && span.Recording():
		span.String(AttrRevision, d.Revision)
		span.Bool("gated.policy.denied", len(d.Denies) > 0)
		span.Bool("gated.policy.review_required", d.Review.Required)
	}
	span.End(err)
	return d, err
}
