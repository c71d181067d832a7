package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gated/gated/bus/budget"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/bus/status"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/telemetry"
	"github.com/gated/gated/policies"
)

// startWorker builds the engine over the verdict store and starts the
// worker that feeds it proposals.
func (s *Server) startWorker(context.Context) error {
	o := s.cfg
	dedupeWindow := o.DedupeWindow
	if dedupeWindow == 0 {
		dedupeWindow = -1 // the flag's 0 means off; the engine's means default
	}
	s.store = store.New(s.res.Verdicts, store.WithCorruptRecordHook(corruptRecordHook(s.auditor.Trail, s.m.corrupt, s.log)))
	setupCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	kv, err := budget.Setup(setupCtx, s.js, o.Replicas)
	cancel()
	if err != nil {
		return err
	}
	s.budgets = budget.New(kv, s.limits, func(e budget.Event) {
		if e.RefusalsUnwritten != nil {
			s.log.Warn("writing the refusals counted failed: kept for the next write",
				zap.String("tenant", e.Tenant), zap.Error(e.RefusalsUnwritten))
		}
		s.m.onBudget(e)
	})
	// Stopped after the worker: the refusals it counted are written.
	s.onStop("the budget refusal counts", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.budgets.Stop(ctx); err != nil {
			s.log.Error("writing the refusals counted: they are lost", zap.Error(err))
		}
	})
	s.watchBudgets()
	// Evaluations run on a pool, so that the goroutines waiting on reviews
	// do not each keep an evaluation-sized stack.
	pool := policies.NewPool(s.live, 0)
	s.onStop("the policy evaluators", pool.Close)
	var policy engine.Policy = telemetry.Policy(pool)
	if s.policy != nil {
		policy = s.policy
	}
	eng, err := engine.New(engine.Config{
		Policy:           meteredPolicy{Policy: policy, eval: s.m.eval},
		Personas:         s.reg,
		Router:           s.host,
		Store:            telemetry.Store(s.store, s.m.obs.observeClaimWait),
		Trace:            telemetry.Stage,
		ReviewTimeout:    o.ReviewTimeout,
		OperatorDeadline: o.OperatorDeadline,
		DedupeWindow:     dedupeWindow,
		DedupeMax:        o.DedupeMax,
		Shadow:           s.shadowPolicy(),
		Budgets:          s.budgets,
		// The counters are read for the policy input only when the policy
		// served, or the shadow, can read input.budget.
		PolicyReadsBudget: func() bool {
			return s.live.ReadsBudget() || (s.shadow != nil && s.shadow.ReadsBudget())
		},
		// So is the agent's flow state.
		Sessions:           s.flows,
		PolicyReadsSession: s.policyReadsSession,
		OnShadow:           s.m.onShadow(),
		Grants:             engine.GrantIssuer{Ring: s.grants.Ring, TTL: o.GrantTTL, Issued: s.grants.Issued},
	})
	if err != nil {
		return err
	}
	s.eng = eng
	// Every trail a decision records on publishes the proposal's status.
	statuses := status.NewPublisher(s.nc, s.log.Named("status"))
	if s.embedded != nil {
		// The embedded server's account knows who subscribes: a status
		// nobody listens to is not sent.
		statuses.SetInterest(s.embedded.GlobalAccount().SubscriptionInterest)
	}
	if err := statuses.Serve(); err != nil {
		return fmt.Errorf("answering %s: %w", wire.StatusWatchSubjects, err)
	}
	s.onStop("the status watches", statuses.Stop)
	s.m.countStatuses(statuses)
	s.trails = statuses.Trails(s.auditor.Trail)
	var decider intake.Decider = countingDecider{Decider: eng, verdicts: s.m.verdicts, dedupeHits: s.m.obs.dedupeHits}
	if s.wrapDecider != nil {
		decider = s.wrapDecider(decider)
	}
	worker, err := intake.NewWorker(s.nc, s.js, s.res, decider, s.trails, s.busCfg, s.log.Named("worker"))
	if err != nil {
		return err
	}
	if err := worker.Start(); err != nil {
		return err
	}
	var once sync.Once
	s.worker = worker
	s.stopWorker = func(grace time.Duration) { once.Do(func() { worker.Stop(grace) }) }
	// A later step's failure stops it at once; the drain stops it first,
	// with the grace.
	s.onStop("the worker", func() { s.stopWorker(0) })
	// Held actions time out on the shared hold consumer, whichever gated
	// takes each hold.
	timer, err := intake.NewHoldTimer(s.nc, s.res, eng, s.trails, s.log.Named("holds"))
	if err != nil {
		return err
	}
	if err := timer.Start(); err != nil {
		return err
	}
	s.onStop("the hold timer", timer.Stop)
	return nil
}

// startReviewService starts the request/reply endpoints, with the
// operator decisions endpoint when operators are configured.
func (s *Server) startReviewService(context.Context) error {
	if !s.cfg.ReviewService {
		return nil
	}
	svcCfg := intake.ServiceConfig{Version: s.cfg.Version, Wait: s.cfg.ReviewWait}
	if s.operators != nil {
		var err error
		svcCfg.Operators, err = operator.NewEndpoint(s.operators, s.eng, s.trails,
			intake.NewFollowUps(s.js, s.store).Send, operator.PublishVerdicts(s.nc), s.log.Named("operator"))
		if err != nil {
			return err
		}
		if svcCfg.FlowClear, err = operator.NewFlowClearer(s.operators, s.flows, s.trails, s.log.Named("operator")); err != nil {
			return err
		}
		ids := make([]string, 0, len(s.operators.Signers()))
		for _, op := range s.operators.Signers() {
			ids = append(ids, op.ID)
		}
		s.log.Info("operator decisions accepted", zap.String("file", s.cfg.Operators), zap.Strings("operators", ids))
	}
	review, err := intake.StartService(s.nc, svcCfg, s.log.Named("review"))
	if err != nil {
		return err
	}
	s.review = review
	s.onStop("the review service", func() { review.Stop(0) }) // a no-op after the drain
	return nil
}
