package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/policies"
)

// gateServer is one `gated serve`: it wires the policy, the personas, the
// plugins, NATS and the engine together, and owns every goroutine it
// starts. Run joins all of them before it returns, so none outlives it.
type gateServer struct {
	o         serveOptions
	operators *bus.OperatorList // nil: no operator decisions
	log       *zap.Logger
	// watchers are the policy and persona watchers; the other parts
	// (worker, review service, HTTP listener, plugin events) are stopped
	// and joined by their own stop functions.
	watchers sync.WaitGroup
}

// newServer returns the server the checked options o describe.
func newServer(o serveOptions, operators *bus.OperatorList, log *zap.Logger) *gateServer {
	return &gateServer{o: o, operators: operators, log: log}
}

// Run serves until ctx ends, then drains proposals in flight for the
// shutdown grace and stops. It returns only once every goroutine it
// started has returned; an error means the gate could not start.
func (s *gateServer) Run(ctx context.Context) (err error) {
	o, log := s.o, s.log
	watchCtx, cancelWatchers := context.WithCancel(ctx)
	stopWatchers := func() {
		cancelWatchers()
		s.watchers.Wait()
	}
	// Every way out joins the watchers, the early ones included.
	defer stopWatchers()

	src, policyNote, err := o.policy.sources()
	if err != nil {
		return err
	}
	// Usage errors come first; then what can be checked at once, before
	// anything is loaded or logged.
	release, err := claimServeResources(o)
	if err != nil {
		return err
	}
	defer release()
	// Reloads are logged at once; they are audited once the audit stream
	// is open (reloads only happen after that, in the watcher).
	var auditReload atomic.Pointer[func(policies.Reload)]
	live, err := s.loadPolicy(ctx, src, policyNote, &auditReload)
	if err != nil {
		return err
	}
	m := newMetrics(live)
	reg, specs, defaultPlugin, configured, err := s.loadPersonas(ctx)
	if err != nil {
		return err
	}
	if o.personasWatch && o.personasDir != "" {
		// Reloads swap the registry whole; reviews in flight keep the
		// persona they looked up.
		s.watchers.Go(func() {
			err := reg.Watch(watchCtx, personas.WatchOptions{OnReload: func(r personas.Reload) {
				logPersonaReload(log, r)
				if r.OK && r.Changed {
					warnPersonasWithoutPlugin(log, reg.Snapshot(), configured)
				}
			}})
			if err != nil {
				log.Error("persona hot reload is off", zap.Error(err))
			}
		})
	}
	host, err := plugins.NewHost(log.Named("plugins"), defaultPlugin, specs...)
	if err != nil {
		return err
	}
	defer host.Close()
	// Every way out stops the plugins, including a panic unwinding serve.
	defer plugin.CleanupClients()

	url := o.natsURL
	var embedded *server.Server
	if url == "" {
		embedded, err = bus.StartEmbedded(bus.EmbeddedConfig{Listen: o.natsListen, StoreDir: o.dataDir}, log)
		if err != nil {
			return err
		}
		defer func() {
			embedded.Shutdown()
			embedded.WaitForShutdown()
		}()
		url = embedded.ClientURL()
	}
	nc, err := o.natsConn.connect(url, "gated", natsErrorLog(log))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(16384),
		// A lost acknowledgement fails the audit trail instead of holding
		// the proposal forever: it is redelivered and decided again.
		jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}
	// The key is settled before anything is written, streams included.
	auditKey, err := serveAuditKey(ctx, js, o, embedded != nil, log)
	if err != nil {
		return err
	}
	busCfg := bus.Config{
		Replicas: o.replicas, MaxInFlight: o.maxInFlight, VerdictTTL: o.verdictTTL, AuditMaxAge: o.auditMaxAge,
		AckWait: o.ackWait, MaxDeliver: o.maxDeliver, MaxAckPending: o.maxAckPending,
	}
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	res, err := bus.Setup(setupCtx, js, busCfg)
	cancel()
	if err != nil {
		return err
	}
	auditor, err := newServeAuditor(ctx, js, o, auditKey, log)
	if err != nil {
		return err
	}
	// Deferred here, it runs after the worker and the plugin events stop.
	defer closeAuditor(auditor, log)
	// The watchers audit reloads: they stop before the auditor closes.
	defer stopWatchers()
	audit := func(r policies.Reload) {
		actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := auditor.Trail().Seal(actx, reloadEvent(r, live.Revision())); err != nil {
			log.Error("auditing a policy reload", zap.Error(err))
		}
	}
	auditReload.Store(&audit)

	// Plugins start once their events can be audited: a refused checksum,
	// an exit and a relaunch are gated's own events under tenant "_".
	stopEvents := auditHostEvents(host, auditor.Trail, log)
	defer stopEvents()
	host.SetTools(toolConfig(nc, live, o.toolTimeout))
	if err := host.Start(ctx); err != nil {
		return err
	}
	if o.policyWatch && (src.Dir != "" || len(src.DataFiles) > 0) {
		s.watchers.Go(func() {
			poll := o.policyPoll
			if poll == 0 {
				poll = -1
			}
			if err := live.Watch(watchCtx, policies.WatchOptions{Poll: poll}); err != nil {
				log.Error("policy hot reload is off", zap.Error(err))
			}
		})
	}
	dedupeWindow := o.dedupeWindow
	if dedupeWindow == 0 {
		dedupeWindow = -1 // the flag's 0 means off; the engine's means default
	}
	store := store.New(res.Verdicts, store.WithCorruptRecordHook(corruptRecordHook(auditor.Trail, m.corrupt, log)))
	// Evaluations run on a pool, so that the goroutines waiting on reviews
	// do not each keep an evaluation-sized stack.
	pool := policies.NewPool(live, 0)
	defer pool.Close()
	eng, err := engine.New(engine.Config{
		Policy:        meteredPolicy{Policy: pool, eval: m.eval},
		Personas:      reg,
		Router:        host,
		Store:         store,
		ReviewTimeout: o.reviewTimeout,
		DedupeWindow:  dedupeWindow,
		DedupeMax:     o.dedupeMax,
	})
	if err != nil {
		return err
	}
	worker, err := bus.NewWorker(nc, js, res, countingDecider{Decider: eng, verdicts: m.verdicts},
		auditor.Trail, busCfg, log.Named("worker"))
	if err != nil {
		return err
	}
	if err := worker.Start(); err != nil {
		return err
	}
	var review *bus.Service // nil when --review-service=false; Stop is nil-safe
	if o.reviewService {
		if review, err = s.startReviewService(nc, js, store, eng, auditor.Trail); err != nil {
			worker.Stop(0)
			return err
		}
		defer review.Stop(0) // every early return; a no-op after the shutdown below
	}
	var ready atomic.Bool
	ready.Store(true)
	if o.httpAddr != "" {
		stopHTTP, err := serveHTTP(o.httpAddr, o.pprof, nc, &ready, live, host, defaultPlugin, m, log)
		if err != nil {
			worker.Stop(0)
			return err
		}
		defer stopHTTP()
	}
	log.Info("gated is ready",
		zap.String("nats", redactURL(url)), zap.Bool("embedded", embedded != nil),
		zap.String("policy_revision", live.Revision()), zap.Any("plugins", host.Plugins()),
		zap.Strings("personas", reg.Names()))

	<-ctx.Done()
	ready.Store(false)
	// No reload lands while proposals drain.
	stopWatchers()
	s.drain(review, worker, host, nc)
	log.Info("gated stopped")
	return nil
}

// loadPolicy loads the policy from src, logging each reload and auditing
// it once auditReload is set.
func (s *gateServer) loadPolicy(ctx context.Context, src policies.Sources, note string, auditReload *atomic.Pointer[func(policies.Reload)]) (*policies.Live, error) {
	log := s.log
	if note != "" {
		log.Warn(note)
	}
	live, err := policies.NewLive(ctx, src, func(r policies.Reload) {
		logReload(log, r)
		if f := auditReload.Load(); f != nil {
			(*f)(r)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("loading the policy: %w", err)
	}
	state := live.State()
	log.Info("policy loaded", zap.String("revision", state.Revision), zap.Int("tests", state.Tests), zap.Int("parity_inputs", state.ParityInputs), zap.Strings("files", state.Files),
		zap.String("evaluator", state.Evaluator.Evaluator), zap.String("evaluator_reason", state.Evaluator.Reason))
	return live, nil
}

// loadPersonas loads the personas and the plugin configuration, and warns
// about personas that name no configured plugin. configured are the
// plugins' names.
func (s *gateServer) loadPersonas(ctx context.Context) (reg *personas.Registry, specs []plugins.Spec, defaultPlugin string, configured []string, err error) {
	reg, warnings, err := personas.Load(s.o.personasDir)
	if err != nil {
		return nil, nil, "", nil, fmt.Errorf("loading personas: %w", err)
	}
	for _, w := range warnings {
		s.log.Warn("persona", zap.String("warning", w))
	}
	specs, defaultPlugin, err = pluginSpecs(ctx, s.o)
	if err != nil {
		return nil, nil, "", nil, err
	}
	configured = make([]string, 0, len(specs))
	for _, spec := range specs {
		configured = append(configured, spec.Name)
	}
	warnPersonasWithoutPlugin(s.log, reg.Snapshot(), configured)
	return reg, specs, defaultPlugin, configured, nil
}

// startReviewService starts the request/reply endpoints, with the
// operator decisions endpoint when operators are configured.
func (s *gateServer) startReviewService(nc *nats.Conn, js jetstream.JetStream, store *store.Verdicts, eng *engine.Engine, trail func() engine.AuditTrail) (*bus.Service, error) {
	svcCfg := bus.ServiceConfig{Version: version, Wait: s.o.reviewWait}
	if s.operators != nil {
		var err error
		svcCfg.Operators, err = bus.NewOperatorEndpoint(s.operators, eng, trail,
			bus.NewFollowUps(js, store).Send, verdictPublisher(nc), s.log.Named("operator"))
		if err != nil {
			return nil, err
		}
		ids := make([]string, 0, len(s.operators.Operators()))
		for _, op := range s.operators.Operators() {
			ids = append(ids, op.ID)
		}
		s.log.Info("operator decisions accepted", zap.String("file", s.o.operators), zap.Strings("operators", ids))
	}
	return bus.StartService(nc, svcCfg, s.log.Named("review"))
}

// drain stops taking proposals and lets those in flight finish within the
// shutdown grace. Requests to gated.review stop first; their proposals
// finish on the worker, and both share one grace period.
func (s *gateServer) drain(review *bus.Service, worker *bus.Worker, host *plugins.Host, nc *nats.Conn) {
	s.log.Info("shutting down: draining proposals in flight", zap.Duration("grace", s.o.shutdownGrace))
	deadline := time.Now().Add(s.o.shutdownGrace)
	review.Stop(s.o.shutdownGrace)
	worker.Stop(max(0, time.Until(deadline)))
	host.Close()
	if err := nc.Flush(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		s.log.Warn("flushing NATS connection", zap.Error(err))
	}
}
