package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/plugins/sop"
	"github.com/gated/gated/policies"
)

// MinReviewTimeout is the shortest review deadline the configuration
// accepts: reviewers need time to look things up, and a deadline that
// always fires is a gate that never opens.
const MinReviewTimeout = 30 * time.Second

type serveOptions struct {
	dataDir       string
	personasDir   string
	natsListen    string
	natsURL       string
	natsConn      natsConnOptions
	httpAddr      string
	logFormat     string
	logLevel      string
	reviewTimeout time.Duration
	shutdownGrace time.Duration
	maxInFlight   int
	replicas      int
	verdictTTL    time.Duration
	auditMaxAge   time.Duration
}

func serveCmd() *cobra.Command {
	o := serveOptions{}
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the gate: decide every proposal published on NATS",
		Long: `serve runs the gate. Without --nats-url it starts an embedded NATS server with
JetStream (files in --data-dir, clients on --nats-listen); with --nats-url it
uses an external server or cluster. Every flag can also be set through the
environment as GATED_<FLAG>, e.g. GATED_NATS_URL.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context(), o) },
	}
	f := c.Flags()
	f.StringVar(&o.dataDir, "data-dir", "gated-data", "directory of the embedded server's JetStream files")
	f.StringVar(&o.personasDir, "personas", "", "directory of persona files (*.md) added to the built-in personas")
	f.StringVar(&o.natsListen, "nats-listen", "127.0.0.1:4222", "client listener of the embedded server (port 0 picks a free one)")
	f.StringVar(&o.natsURL, "nats-url", "", "external NATS server or cluster URLs, comma-separated; empty starts the embedded server")
	o.natsConn.register(f)
	f.StringVar(&o.httpAddr, "http", "", "serve /healthz and /readyz on this address, e.g. 127.0.0.1:8080")
	f.StringVar(&o.logFormat, "log-format", "auto", "auto (console on a terminal, else JSON), json or console")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.DurationVar(&o.reviewTimeout, "review-timeout", engine.DefaultReviewTimeout, "deadline of a review unless the persona sets one; at least 30s")
	f.DurationVar(&o.shutdownGrace, "shutdown-grace", 30*time.Second, "how long SIGTERM waits for proposals in flight before returning them to the stream")
	f.IntVar(&o.maxInFlight, "max-in-flight", 1024, "proposals decided at once by this process")
	f.IntVar(&o.replicas, "replicas", 1, "replicas of the streams and the verdict bucket (3 on a cluster)")
	f.DurationVar(&o.verdictTTL, "verdict-ttl", 7*24*time.Hour, "how long verdicts are kept for idempotent replay")
	f.DurationVar(&o.auditMaxAge, "audit-max-age", 0, "how long audit events are kept (0 keeps them)")
	return c
}

func serve(ctx context.Context, o serveOptions) (err error) {
	if o.reviewTimeout < MinReviewTimeout {
		return usageError("--review-timeout %s is below the %s minimum: reviews need time, and a deadline that always fires blocks every change", o.reviewTimeout, MinReviewTimeout)
	}
	switch {
	case o.shutdownGrace < 0:
		return usageError("--shutdown-grace must not be negative")
	case o.replicas < 1 || o.replicas > 5:
		return usageError("--replicas %d must be between 1 and 5", o.replicas)
	case o.maxInFlight < 1:
		return usageError("--max-in-flight %d must be at least 1", o.maxInFlight)
	case o.verdictTTL < time.Minute:
		return usageError("--verdict-ttl %s must be at least 1m: verdicts are how a redelivered proposal avoids a second review", o.verdictTTL)
	case o.auditMaxAge < 0:
		return usageError("--audit-max-age must not be negative (0 keeps events)")
	}
	log, err := newLogger(o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	bundle, err := policies.Default()
	if err != nil {
		return fmt.Errorf("loading the default policy bundle: %w", err)
	}
	policy, err := policies.Compile(ctx, bundle)
	if err != nil {
		return fmt.Errorf("compiling the policy: %w", err)
	}
	reg, warnings, err := personas.Load(o.personasDir)
	if err != nil {
		return fmt.Errorf("loading personas: %w", err)
	}
	for _, w := range warnings {
		log.Warn("persona", zap.String("warning", w))
	}

	spec, err := plugins.Bundled(sop.Name)
	if err != nil {
		return err
	}
	host, err := plugins.NewHost(log.Named("plugins"), sop.Name, spec)
	if err != nil {
		return err
	}
	defer host.Close()
	if err := host.Start(ctx); err != nil {
		return err
	}

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
	connOpts, err := o.natsConn.options("gated")
	if err != nil {
		return err
	}
	nc, err := nats.Connect(url, connOpts...)
	if err != nil {
		return fmt.Errorf("connecting to NATS at %s: %w", url, err)
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
	busCfg := bus.Config{Replicas: o.replicas, MaxInFlight: o.maxInFlight, VerdictTTL: o.verdictTTL, AuditMaxAge: o.auditMaxAge}
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	res, err := bus.Setup(setupCtx, js, busCfg)
	cancel()
	if err != nil {
		return err
	}
	eng, err := engine.New(engine.Config{
		Policy:        policy,
		Personas:      reg,
		Router:        host,
		Store:         bus.NewVerdictStore(res.Verdicts),
		ReviewTimeout: o.reviewTimeout,
	})
	if err != nil {
		return err
	}
	worker, err := bus.NewWorker(nc, js, res, eng, busCfg, log.Named("worker"))
	if err != nil {
		return err
	}
	if err := worker.Start(); err != nil {
		return err
	}
	var ready atomic.Bool
	ready.Store(true)
	if o.httpAddr != "" {
		stopHTTP, err := serveHTTP(o.httpAddr, nc, &ready, log)
		if err != nil {
			worker.Stop(0)
			return err
		}
		defer stopHTTP()
	}
	log.Info("gated is ready",
		zap.String("nats", url), zap.Bool("embedded", embedded != nil),
		zap.String("policy_revision", policy.Revision()), zap.Any("plugins", host.Plugins()),
		zap.Strings("personas", reg.Names()))

	<-ctx.Done()
	ready.Store(false)
	log.Info("shutting down: draining proposals in flight", zap.Duration("grace", o.shutdownGrace))
	worker.Stop(o.shutdownGrace)
	host.Close()
	if err := nc.Flush(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		log.Warn("flushing NATS connection", zap.Error(err))
	}
	log.Info("gated stopped")
	return nil
}

func serveHTTP(addr string, nc *nats.Conn, ready *atomic.Bool, log *zap.Logger) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() || !nc.IsConnected() {
			http.Error(w, "not ready: NATS connection "+nc.Status().String(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on --http %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", zap.Error(err))
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
