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

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/budget"
	"github.com/gated/gated/bus/grants"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/notify"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/bus/status"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/telemetry"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/policies"
)

// gateServer is one `gated serve`: it wires the policy, the personas, the
// plugins, NATS and the engine together, and owns every goroutine it
// starts. Run joins all of them before it returns, so none outlives it.
type gateServer struct {
	o         serveOptions
	operators *operator.List // nil: no operator decisions
	sinks     *notify.Config // nil: no notifications
	limits    *budget.Config // the budgets in force at start
	log       *zap.Logger

	// stops undo the steps that ran, newest first: Run unwinds them on
	// every way out, an early error and a panic included, within a bound
	// (shutdown.go).
	stops []stopStep
	// closeBy is when the stops still running lose the NATS connection,
	// and what a stop waits on gives up (stopContext); set as the stops
	// begin.
	closeBy time.Time
	// closeNC closes the NATS connection once (closeNATS).
	closeNC sync.Once
	// abandonedMu guards abandoned: what the shutdown gave up on.
	abandonedMu sync.Mutex
	abandoned   []string
	// watchCtx ends the policy and persona watchers, which watchers
	// joins; the other parts (worker, review service, HTTP listener,
	// plugin events) are stopped and joined by their own stop functions.
	watchCtx    context.Context
	stopWatch   context.CancelFunc
	watchers    sync.WaitGroup
	auditReload atomic.Pointer[func(policies.Reload)] // set once reloads can be audited
	ready       atomic.Bool                           // what /readyz reports

	src           policies.Sources
	live          *policies.Live
	shadow        *policies.Live // nil without --shadow-policies
	m             *metrics
	reg           *personas.Registry
	specs         []plugins.Spec
	defaultPlugin string
	configured    []string // the plugins' names
	host          *plugins.Host
	embedded      *server.Server // nil with --nats-url
	url           string
	nc            *nats.Conn
	// trails starts the audit trail of a decision: the audit writer's,
	// publishing the proposal's status as it goes.
	trails     func() engine.AuditTrail
	js         jetstream.JetStream
	busCfg     bus.Config
	res        *bus.Resources
	auditor    *audit.Writer
	auditKey   []byte // MACs the audit records; the console and the notifier check them with it; nil: none
	store      *store.Verdicts
	budgets    *budget.Store
	eng        *engine.Engine
	worker     *intake.Worker
	stopWorker func(grace time.Duration) // stops the worker once; later calls do nothing
	review     *intake.Service           // nil when --review-service=false; Stop is nil-safe
	grants     *grants.Service
}

// newServer returns the server the checked options o describe.
func newServer(o serveOptions, operators *operator.List, log *zap.Logger) *gateServer {
	return &gateServer{o: o, operators: operators, log: log}
}

// Run serves until ctx ends, then drains proposals in flight for the
// shutdown grace and stops. It returns only once every goroutine it
// started has returned; an error means the gate could not start.
func (s *gateServer) Run(ctx context.Context) error {
	return s.run(ctx, s.startSteps())
}

// startSteps are the steps that start the gate, in order. Each registers
// with onStop what undoes it.
func (s *gateServer) startSteps() []func(context.Context) error {
	return []func(context.Context) error{
		s.claimResources,
		s.startTracing,
		s.loadPolicy,
		s.loadShadow,
		s.loadPersonas,
		s.watchPersonas,
		s.newPluginHost,
		s.startNATS,
		s.setupStreams,
		s.openAudit,
		s.startNotifier,
		s.startReviewerMetrics,
		s.startPlugins,
		s.watchPolicy,
		s.watchShadow,
		s.startGrants,
		s.startWorker,
		s.startReviewService,
		s.startMetrics,
		s.startHTTP,
	}
}

// run runs steps in order, serves until ctx ends, drains and stops. A
// step's error stops the start there; every way out unwinds what the steps
// that ran started, within shutdownSlack.
func (s *gateServer) run(ctx context.Context, steps []func(context.Context) error) error {
	s.watchCtx, s.stopWatch = context.WithCancel(ctx)
	// An early error or a panic: what started stops, bounded too.
	defer s.unwind()
	// Registered first, so it runs last: every way out joins the
	// watchers, the early ones included.
	s.onStop("the policy and persona watchers", s.stopWatchers)
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	s.log.Info("gated is ready",
		zap.String("nats", redactURL(s.url)), zap.Bool("embedded", s.embedded != nil),
		zap.String("policy_revision", s.live.Revision()), zap.Any("plugins", s.host.Plugins()),
		zap.Strings("personas", s.reg.Names()))

	<-ctx.Done()
	return s.shutdown()
}

// stopWatchers ends the policy and persona watchers and joins them; a
// second call does nothing more.
func (s *gateServer) stopWatchers() {
	s.stopWatch()
	s.watchers.Wait()
}

// claimResources refuses usage errors first; then it claims what can be
// checked at once, before anything is loaded or logged.
func (s *gateServer) claimResources(context.Context) error {
	src, note, err := s.o.policy.sources()
	if err != nil {
		return err
	}
	release, err := claimServeResources(s.o)
	if err != nil {
		return err
	}
	s.onStop("the data directory lock", release)
	s.src = src
	if note != "" {
		s.log.Warn(note)
	}
	return nil
}

// loadPolicy loads the policy, logging each reload at once and auditing
// it once the audit stream is open (reloads only happen after that, in
// the watcher).
func (s *gateServer) loadPolicy(ctx context.Context) error {
	live, err := policies.NewLive(ctx, s.src, func(r policies.Reload) {
		logReload(s.log, r)
		if f := s.auditReload.Load(); f != nil {
			(*f)(r)
		}
	})
	if err != nil {
		return fmt.Errorf("loading the policy: %w", err)
	}
	state := live.State()
	s.log.Info("policy loaded", zap.String("revision", state.Revision), zap.Int("tests", state.Tests), zap.Int("parity_inputs", state.ParityInputs), zap.Strings("files", state.Files),
		zap.String("evaluator", state.Evaluator.Evaluator), zap.String("evaluator_reason", state.Evaluator.Reason))
	s.live = live
	s.m = newMetrics(live, s.o.metricsTenantLabels)
	return nil
}

// loadPersonas loads the personas and the plugin configuration, and warns
// about personas that name no configured plugin.
func (s *gateServer) loadPersonas(ctx context.Context) error {
	reg, warnings, err := personas.Load(s.o.personasDir)
	if err != nil {
		return fmt.Errorf("loading personas: %w", err)
	}
	for _, w := range warnings {
		s.log.Warn("persona", zap.String("warning", w))
	}
	specs, defaultPlugin, err := pluginSpecs(ctx, s.o)
	if err != nil {
		return err
	}
	configured := make([]string, 0, len(specs))
	for _, spec := range specs {
		configured = append(configured, spec.Name)
	}
	warnPersonasWithoutPlugin(s.log, reg.Snapshot(), configured)
	s.reg, s.specs, s.defaultPlugin, s.configured = reg, specs, defaultPlugin, configured
	return nil
}

// watchPersonas reloads the personas when their files change, with
// --personas-watch. Reloads swap the registry whole; reviews in flight
// keep the persona they looked up.
func (s *gateServer) watchPersonas(context.Context) error {
	if !s.o.personasWatch || s.o.personasDir == "" {
		return nil
	}
	s.watchers.Go(func() {
		err := s.reg.Watch(s.watchCtx, personas.WatchOptions{OnReload: func(r personas.Reload) {
			logPersonaReload(s.log, r)
			if r.OK && r.Changed {
				warnPersonasWithoutPlugin(s.log, s.reg.Snapshot(), s.configured)
			}
		}})
		if err != nil {
			s.log.Error("persona hot reload is off", zap.Error(err))
		}
	})
	return nil
}

// newPluginHost makes the plugin host; the plugins start later, once
// their events can be audited.
func (s *gateServer) newPluginHost(context.Context) error {
	host, err := plugins.NewHost(s.log.Named("plugins"), s.defaultPlugin, s.specs...)
	if err != nil {
		return err
	}
	s.host = host
	s.onStop("the plugins", host.Close)
	// Every way out stops the plugins, including a panic unwinding serve.
	s.onStop("the plugin clients", plugin.CleanupClients)
	return nil
}

// startNATS starts the embedded server unless --nats-url names one, and
// connects to it.
func (s *gateServer) startNATS(context.Context) error {
	s.url = s.o.natsURL
	if s.url == "" {
		embedded, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: s.o.natsListen, StoreDir: s.o.dataDir}, s.log)
		if err != nil {
			return err
		}
		s.embedded = embedded
		s.onStop("the embedded NATS server", func() {
			embedded.Shutdown()
			embedded.WaitForShutdown()
		})
		s.url = embedded.ClientURL()
	}
	nc, err := s.o.natsConn.connect(s.url, "gated", natsErrorLog(s.log))
	if err != nil {
		return err
	}
	s.nc = nc
	s.onStop("the NATS connection", func() { s.closeNATS("") })
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(16384),
		// A lost acknowledgement fails the audit trail instead of holding
		// the proposal forever: it is redelivered and decided again.
		jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}
	s.js = js
	return nil
}

// setupStreams settles the audit key, then creates or updates the
// streams and the verdict bucket.
func (s *gateServer) setupStreams(ctx context.Context) error {
	// The key is settled before anything is written, streams included.
	auditKey, err := serveAuditKey(ctx, s.js, s.o, s.embedded != nil, s.log)
	if err != nil {
		return err
	}
	s.auditKey = auditKey
	o := s.o
	s.busCfg = bus.Config{
		Replicas: o.replicas, MaxInFlight: o.maxInFlight, TenantMaxInFlight: o.tenantMaxInFlight, VerdictTTL: o.verdictTTL, AuditMaxAge: o.auditMaxAge,
		AckWait: o.ackWait, MaxDeliver: o.maxDeliver, MaxAckPending: o.maxAckPending,
		DuplicateWindow: o.duplicateWindow,
	}
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	s.res, err = bus.Setup(setupCtx, s.js, s.busCfg)
	cancel()
	if err != nil {
		return err
	}
	s.auditor, err = newObservedAuditor(ctx, s.js, s.o, auditKey, s.log, s.m.obs.observeAppend)
	return err
}

// openAudit arranges for the auditor to close after everything that
// writes to it, and starts auditing policy reloads.
func (s *gateServer) openAudit(context.Context) error {
	auditor := s.auditor
	// Registered here, it runs after the worker and the plugin events stop.
	s.onStop("the audit writer", func() {
		ctx, cancel := s.stopContext(auditCloseWait)
		defer cancel()
		if err := closeAuditor(ctx, auditor, s.log); err != nil {
			s.abandon("the audit records still queued (" + err.Error() + ")")
		}
	})
	// The watchers audit reloads: they stop before the auditor closes.
	s.onStop("the policy and persona watchers", s.stopWatchers)
	audit := func(r policies.Reload) {
		actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := auditor.Trail().Seal(actx, reloadEvent(r, s.live.Revision())); err != nil {
			s.log.Error("auditing a policy reload", zap.Error(err))
		}
	}
	s.auditReload.Store(&audit)
	return nil
}

// startPlugins starts the plugins once their events can be audited: a
// refused checksum, an exit and a relaunch are gated's own events under
// tenant "_".
func (s *gateServer) startPlugins(ctx context.Context) error {
	s.host.SetReviewObserver(s.m.obs.observeReview)
	s.m.reg.MustRegister(pluginCollector{s.host})
	s.onStop("the audit of plugin events", auditCountedHostEvents(s.host, s.auditor.Trail, s.m.obs.countPluginEvent, s.log))
	s.host.SetTools(toolConfig(s.nc, s.live, s.o.toolTimeout))
	return s.host.Start(ctx)
}

// startNotifier starts the webhook notifications of --notify, before the
// plugins and the worker, so that they follow their records from the
// first. It reads the
// audit stream on its own consumer: no decision waits for it. It stops
// before the auditor closes, since it audits every delivery.
func (s *gateServer) startNotifier(ctx context.Context) error {
	if s.sinks == nil {
		return nil
	}
	n, err := notify.New(s.js, s.sinks, notify.Options{
		Trails: s.auditor.Trail, Key: s.auditKey, Replicas: s.o.replicas,
		Log: s.log.Named("notify"), Observe: s.m.notifyObserver(),
	})
	if err != nil {
		return err
	}
	if err := n.Start(ctx); err != nil {
		return err
	}
	s.onStop("the webhook notifier", n.Stop)
	names := make([]string, 0, len(s.sinks.Sinks))
	for _, sk := range s.sinks.Sinks {
		names = append(names, sk.Name+" "+sk.Endpoint())
	}
	s.log.Info("webhook notifications", zap.String("file", s.o.notify), zap.Strings("sinks", names))
	return nil
}

// watchPolicy reloads the policy when its files change, with
// --policy-watch and a policy of files.
func (s *gateServer) watchPolicy(context.Context) error {
	if !s.o.policyWatch || (s.src.Dir == "" && len(s.src.DataFiles) == 0) {
		return nil
	}
	s.watchers.Go(func() {
		poll := s.o.policyPoll
		if poll == 0 {
			poll = -1
		}
		if err := s.live.Watch(s.watchCtx, policies.WatchOptions{Poll: poll}); err != nil {
			s.log.Error("policy hot reload is off", zap.Error(err))
		}
	})
	return nil
}

// startWorker builds the engine over the verdict store and starts the
// worker that feeds it proposals.
func (s *gateServer) startWorker(context.Context) error {
	o := s.o
	dedupeWindow := o.dedupeWindow
	if dedupeWindow == 0 {
		dedupeWindow = -1 // the flag's 0 means off; the engine's means default
	}
	s.store = store.New(s.res.Verdicts, store.WithCorruptRecordHook(corruptRecordHook(s.auditor.Trail, s.m.corrupt, s.log)))
	setupCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	kv, err := budget.Setup(setupCtx, s.js, o.replicas)
	cancel()
	if err != nil {
		return err
	}
	s.budgets = budget.New(kv, s.limits, s.m.onBudget)
	s.watchBudgets()
	// Evaluations run on a pool, so that the goroutines waiting on reviews
	// do not each keep an evaluation-sized stack.
	pool := policies.NewPool(s.live, 0)
	s.onStop("the policy evaluators", pool.Close)
	eng, err := engine.New(engine.Config{
		Policy:           meteredPolicy{Policy: telemetry.Policy(pool), eval: s.m.eval},
		Personas:         s.reg,
		Router:           s.host,
		Store:            telemetry.Store(s.store, s.m.obs.observeClaimWait),
		Trace:            telemetry.Stage,
		ReviewTimeout:    o.reviewTimeout,
		OperatorDeadline: o.operatorDeadline,
		DedupeWindow:     dedupeWindow,
		DedupeMax:        o.dedupeMax,
		Shadow:           s.shadowPolicy(),
		Budgets:          s.budgets,
		// The counters are read for the policy input only when the policy
		// served, or the shadow, can read input.budget.
		PolicyReadsBudget: func() bool {
			return s.live.ReadsBudget() || (s.shadow != nil && s.shadow.ReadsBudget())
		},
		OnShadow: s.m.onShadow(),
		Grants:   engine.GrantIssuer{Ring: s.grants.Ring, TTL: o.grantTTL, Issued: s.grants.Issued},
	})
	if err != nil {
		return err
	}
	s.eng = eng
	// Every trail a decision records on publishes the proposal's status.
	statuses := status.NewPublisher(s.nc, s.log.Named("status"))
	s.m.countStatuses(statuses)
	s.trails = statuses.Trails(s.auditor.Trail)
	worker, err := intake.NewWorker(s.nc, s.js, s.res, countingDecider{Decider: eng, verdicts: s.m.verdicts, dedupeHits: s.m.obs.dedupeHits},
		s.trails, s.busCfg, s.log.Named("worker"))
	if err != nil {
		return err
	}
	worker.RecordGrants(s.grants.Record)
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
func (s *gateServer) startReviewService(context.Context) error {
	if !s.o.reviewService {
		return nil
	}
	svcCfg := intake.ServiceConfig{Version: version, Wait: s.o.reviewWait}
	if s.operators != nil {
		var err error
		followUps := intake.NewFollowUps(s.js, s.store).Send
		// An operator's approval carries a grant: its record is written
		// before the verdict is published, as the worker does.
		beforePublish := func(ctx context.Context, v *gated.Verdict) error {
			if err := s.grants.Record(ctx, v); err != nil {
				return err
			}
			return followUps(ctx, v)
		}
		svcCfg.Operators, err = operator.NewEndpoint(s.operators, s.eng, s.trails,
			beforePublish, verdictPublisher(s.nc), s.log.Named("operator"))
		if err != nil {
			return err
		}
		ids := make([]string, 0, len(s.operators.Signers()))
		for _, op := range s.operators.Signers() {
			ids = append(ids, op.ID)
		}
		s.log.Info("operator decisions accepted", zap.String("file", s.o.operators), zap.Strings("operators", ids))
	}
	review, err := intake.StartService(s.nc, svcCfg, s.log.Named("review"))
	if err != nil {
		return err
	}
	s.review = review
	s.onStop("the review service", func() { review.Stop(0) }) // a no-op after the drain
	return nil
}

// drain stops taking proposals and lets those in flight finish by
// graceEnd. Requests to gated.review stop first; their proposals finish
// on the worker, and both share one grace period. What they sent is then
// flushed to the server, if it is there to take it.
func (s *gateServer) drain(graceEnd time.Time) {
	s.review.Stop(max(0, time.Until(graceEnd)))
	s.stopWorker(max(0, time.Until(graceEnd)))
	s.host.Close()
	if !s.nc.IsConnected() {
		return // closeNATS says what is lost
	}
	wait := min(natsFlushWait, time.Until(s.closeBy))
	if wait <= 0 {
		return
	}
	if err := s.nc.FlushTimeout(wait); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		s.log.Warn("flushing NATS connection", zap.Error(err))
	}
}
