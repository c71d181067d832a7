// Package server is `gated serve` as a package: the configuration its
// flags and config file fill in, and the server that configuration builds,
// with an explicit lifecycle. New checks the configuration; Build loads
// what can fail before anything serves (policy, personas, plugins); Start
// connects to NATS and starts the streams, the workers and the listeners;
// Stop drains and undoes every step, newest first, within a bound. The
// command and the test kits run the same server.
package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/budget"
	"github.com/gated/gated/bus/flow"
	"github.com/gated/gated/bus/grants"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/notify"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/natsconn"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/policies"
)

// Server is one `gated serve`: it wires the policy, the personas, the
// plugins, NATS and the engine together, and owns every goroutine it
// starts. Run joins all of them before it returns, so none outlives it.
type Server struct {
	cfg       Config
	operators *operator.List // nil: no operator decisions
	sinks     *notify.Config // nil: no notifications
	limits    *budget.Config // the budgets in force at start
	log       *zap.Logger
	// wrapDecider, when not nil, wraps the worker's decider (WithDecider).
	wrapDecider func(intake.Decider) intake.Decider
	noPlugins   bool          // WithoutPlugins
	policy      engine.Policy // WithPolicy; nil: the live policy

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
	flows      *flow.Store
	eng        *engine.Engine
	worker     *intake.Worker
	stopWorker func(grace time.Duration) // stops the worker once; later calls do nothing
	review     *intake.Service           // nil when --review-service=false; Stop is nil-safe
	grants     *grants.Service
}

// Option changes what New builds; tests use them to reach into the gate.
type Option func(*Server)

// WithLogger has the server log to log rather than to the logger
// Config.LogFormat and Config.LogLevel describe.
func WithLogger(log *zap.Logger) Option { return func(s *Server) { s.log = log } }

// WithoutPlugins runs no reviewer plugin: every persona is unrouted, so
// a proposal that needs a review is blocked. For tests of the intake.
func WithoutPlugins() Option { return func(s *Server) { s.noPlugins = true } }

// WithPolicy has the engine decide with pol in place of the policy
// Config.Policy names, which is still loaded, served and reported.
func WithPolicy(pol engine.Policy) Option { return func(s *Server) { s.policy = pol } }

// WithDecider has the worker hand its deliveries to wrap of the decider it
// would use (the engine, counted for the metrics), so that a test can hold
// or script them.
func WithDecider(wrap func(intake.Decider) intake.Decider) Option {
	return func(s *Server) { s.wrapDecider = wrap }
}

// New checks cfg and loads what it names that needs no start (the
// operators, the budgets and the notification sinks): it refuses, with a
// UsageError, a configuration that could not run. Nothing runs yet.
func New(cfg Config, opts ...Option) (*Server, error) {
	operators, err := cfg.check()
	if err != nil {
		return nil, err
	}
	limits := &budget.Config{}
	if cfg.Budgets != "" {
		if limits, err = budget.LoadConfig(cfg.Budgets); err != nil {
			return nil, usageError("--budgets: %v", err)
		}
	}
	var sinks *notify.Config
	if cfg.Notify != "" {
		if sinks, err = notify.LoadConfig(cfg.Notify, os.Getenv); err != nil {
			return nil, usageError("--notify: %v", err)
		}
	}
	s := &Server{cfg: cfg, operators: operators, sinks: sinks, limits: limits}
	for _, opt := range opts {
		opt(s)
	}
	if s.log == nil {
		if s.log, err = NewLogger(cfg.LogFormat, cfg.LogLevel); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// URL is the NATS server's client URL, once Start has connected.
func (s *Server) URL() string { return s.url }

// Resources are the streams and the verdict bucket Start set up.
func (s *Server) Resources() *bus.Resources { return s.res }

// Grants is the grant service Start started.
func (s *Server) Grants() *grants.Service { return s.grants }

// Audit is the audit writer the gate records with.
func (s *Server) Audit() *audit.Writer { return s.auditor }

// Log is the server's logger.
func (s *Server) Log() *zap.Logger { return s.log }

// Run builds and starts the gate, serves until ctx ends, then drains
// proposals in flight for the shutdown grace and stops. It returns only
// once every goroutine it started has returned; an error from Build or
// Start means the gate could not start.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Build(ctx); err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return s.Stop()
}

// Build runs what can fail before anything serves: it claims the data
// directory and the listeners' ports, and loads the policy, the shadow
// policy, the personas and the plugins' configuration. On an error it
// has undone what it did.
func (s *Server) Build(ctx context.Context) error {
	s.watchCtx, s.stopWatch = context.WithCancel(context.WithoutCancel(ctx))
	// Registered first, so it runs last: every way out joins the
	// watchers, the early ones included.
	s.onStop("the policy and persona watchers", s.stopWatchers)
	return s.runSteps(ctx, s.buildSteps())
}

// Start connects to NATS (starting the embedded server unless
// Config.NATSURL names one), sets up the streams, the audit key and the
// audit writer, and starts the plugins, the workers, the review service
// and the listeners, then reports the gate ready. On an error it has
// undone what it and Build did.
func (s *Server) Start(ctx context.Context) error {
	if err := s.runSteps(ctx, s.startSteps()); err != nil {
		return err
	}
	s.log.Info("gated is ready",
		zap.String("nats", natsconn.RedactURL(s.url)), zap.Bool("embedded", s.embedded != nil),
		zap.String("policy_revision", s.live.Revision()), zap.Any("plugins", s.host.Plugins()),
		zap.Strings("personas", s.reg.Names()))
	return nil
}

// Stop drains the proposals in flight for Config.ShutdownGrace, then
// stops what Build and Start started, newest first, all within the grace
// and shutdownSlack (shutdown.go). It returns a *ShutdownError, already
// logged, when it abandoned anything.
func (s *Server) Stop() error { return s.shutdown() }

// buildSteps are the steps of Build, in order. Each registers with onStop
// what undoes it.
func (s *Server) buildSteps() []func(context.Context) error {
	return []func(context.Context) error{
		s.claimResources,
		s.startTracing,
		s.loadPolicy,
		s.loadShadow,
		s.loadPersonas,
		s.watchPersonas,
		s.newPluginHost,
	}
}

// startSteps are the steps of Start, in order. Each registers with onStop
// what undoes it.
func (s *Server) startSteps() []func(context.Context) error {
	return []func(context.Context) error{
		s.startNATS,
		s.setupStreams,
		s.openAudit,
		s.startNotifier,
		s.startReviewerMetrics,
		s.startPlugins,
		s.watchPolicy,
		s.watchShadow,
		s.startFlows,
		s.startGrants,
		s.startWorker,
		s.startReviewService,
		s.startMetrics,
		s.startHTTP,
	}
}

// runSteps runs steps in order. A step's error stops them there; that
// error, and a panic, unwind what every step that ran started, within
// shutdownSlack.
func (s *Server) runSteps(ctx context.Context, steps []func(context.Context) error) error {
	ok := false
	defer func() {
		if !ok {
			s.unwind()
		}
	}()
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	ok = true
	return nil
}

// stopWatchers ends the policy and persona watchers and joins them; a
// second call does nothing more.
func (s *Server) stopWatchers() {
	s.stopWatch()
	s.watchers.Wait()
}

// claimResources refuses usage errors first; then it claims what can be
// checked at once, before anything is loaded or logged.
func (s *Server) claimResources(context.Context) error {
	src, note, err := s.cfg.Policy.Sources()
	if err != nil {
		return err
	}
	release, err := claimServeResources(s.cfg)
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
func (s *Server) loadPolicy(ctx context.Context) error {
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
	s.m = newMetrics(live, s.cfg.MetricsTenantLabels)
	return nil
}

// loadPersonas loads the personas and the plugin configuration, and warns
// about personas that name no configured plugin.
func (s *Server) loadPersonas(ctx context.Context) error {
	reg, warnings, err := personas.Load(s.cfg.PersonasDir)
	if err != nil {
		return fmt.Errorf("loading personas: %w", err)
	}
	for _, w := range warnings {
		s.log.Warn("persona", zap.String("warning", w))
	}
	var specs []plugins.Spec
	var defaultPlugin string // WithoutPlugins: none
	if !s.noPlugins {
		if specs, defaultPlugin, err = PluginSpecs(ctx, s.cfg); err != nil {
			return err
		}
	}
	configured := make([]string, 0, len(specs))
	for _, spec := range specs {
		configured = append(configured, spec.Name)
	}
	if !s.noPlugins {
		warnPersonasWithoutPlugin(s.log, reg.Snapshot(), configured)
	}
	s.reg, s.specs, s.defaultPlugin, s.configured = reg, specs, defaultPlugin, configured
	return nil
}

// watchPersonas reloads the personas when their files change, with
// --personas-watch. Reloads swap the registry whole; reviews in flight
// keep the persona they looked up.
func (s *Server) watchPersonas(context.Context) error {
	if !s.cfg.PersonasWatch || s.cfg.PersonasDir == "" {
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
func (s *Server) newPluginHost(context.Context) error {
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
func (s *Server) startNATS(context.Context) error {
	s.url = s.cfg.NATSURL
	if s.url == "" {
		embedded, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: s.cfg.NATSListen, StoreDir: s.cfg.DataDir}, s.log)
		if err != nil {
			return err
		}
		s.embedded = embedded
		s.onStop("the embedded NATS server", func() {
			embedded.Shutdown()
			embedded.WaitForShutdown()
		})
		s.url = embedded.ClientURL()
		limit, undo := bus.SetEmbeddedMemoryLimit()
		s.onStop("the embedded server's memory limit", undo)
		s.log.Debug("soft memory limit", zap.Int64("bytes", limit))
	}
	nc, err := s.cfg.NATSConn.Connect(s.url, "gated", natsconn.ErrorLog(s.log))
	if err = asUsage(err); err != nil {
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
func (s *Server) setupStreams(ctx context.Context) error {
	// The key is settled before anything is written, streams included.
	auditKey, err := serveAuditKey(ctx, s.js, s.cfg, s.embedded != nil, s.log)
	if err != nil {
		return err
	}
	s.auditKey = auditKey
	o := s.cfg
	s.busCfg = bus.Config{
		Replicas: o.Replicas, MaxInFlight: o.MaxInFlight, TenantMaxInFlight: o.TenantMaxInFlight, VerdictTTL: o.VerdictTTL, AuditMaxAge: o.AuditMaxAge,
		AckWait: o.AckWait, MaxDeliver: o.MaxDeliver, MaxAckPending: o.MaxAckPending,
		DuplicateWindow: o.DuplicateWindow,
	}
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	s.res, err = bus.Setup(setupCtx, s.js, s.busCfg)
	cancel()
	if err != nil {
		return err
	}
	s.auditor, err = newObservedAuditor(ctx, s.js, s.cfg, auditKey, s.log, s.m.obs.observeAppend)
	return err
}

// openAudit arranges for the auditor to close after everything that
// writes to it, and starts auditing policy reloads.
func (s *Server) openAudit(context.Context) error {
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
func (s *Server) startPlugins(ctx context.Context) error {
	s.host.SetReviewObserver(s.m.obs.observeReview)
	s.m.reg.MustRegister(pluginCollector{s.host})
	s.onStop("the audit of plugin events", auditCountedHostEvents(s.host, s.auditor.Trail, s.m.obs.countPluginEvent, s.log))
	s.host.SetTools(ToolConfig(s.nc, s.live, s.cfg.ToolTimeout))
	return s.host.Start(ctx)
}

// startNotifier starts the webhook notifications of --notify, before the
// plugins and the worker, so that they follow their records from the
// first. It reads the
// audit stream on its own consumer: no decision waits for it. It stops
// before the auditor closes, since it audits every delivery.
func (s *Server) startNotifier(ctx context.Context) error {
	if s.sinks == nil {
		return nil
	}
	n, err := notify.New(s.js, s.sinks, notify.Options{
		Trails: s.auditor.Trail, Key: s.auditKey, Replicas: s.cfg.Replicas,
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
	s.log.Info("webhook notifications", zap.String("file", s.cfg.Notify), zap.Strings("sinks", names))
	return nil
}

// watchPolicy reloads the policy when its files change, with
// --policy-watch and a policy of files.
func (s *Server) watchPolicy(context.Context) error {
	if !s.cfg.PolicyWatch || (s.src.Dir == "" && len(s.src.DataFiles) == 0) {
		return nil
	}
	s.watchers.Go(func() {
		poll := s.cfg.PolicyPoll
		if poll == 0 {
			poll = -1
		}
		if err := s.live.Watch(s.watchCtx, policies.WatchOptions{Poll: poll}); err != nil {
			s.log.Error("policy hot reload is off", zap.Error(err))
		}
	})
	return nil
}

// drain stops taking proposals and lets those in flight finish by
// graceEnd. Requests to gated.review stop first; their proposals finish
// on the worker, and both share one grace period. What they sent is then
// flushed to the server, if it is there to take it.
func (s *Server) drain(graceEnd time.Time) {
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
