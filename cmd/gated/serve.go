package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/budget"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/notify"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/plugins/sop"
	"github.com/gated/gated/policies"
)

// MinReviewTimeout is the shortest review deadline the configuration
// accepts: reviewers need time to look things up, and a deadline that
// always fires is a gate that never opens.
const MinReviewTimeout = 30 * time.Second

// DefaultLLMMaxConcurrency is how many reviews the bundled llm reviewer
// runs at once unless --llm-max-concurrency says otherwise. A review
// mostly waits on the provider, so the bound is the provider's rate limit
// rather than this machine.
const DefaultLLMMaxConcurrency = 64

type serveOptions struct {
	dataDir       string
	personasDir   string
	personasWatch bool
	natsListen    string
	natsURL       string
	natsConn      natsConnOptions
	httpAddr      string
	pprof         bool
	logFormat     string
	logLevel      string
	reviewTimeout time.Duration
	// operatorDeadline is how long an action held for an operator waits.
	operatorDeadline  time.Duration
	shutdownGrace     time.Duration
	reviewService     bool
	reviewWait        time.Duration
	maxInFlight       int
	tenantMaxInFlight int
	ackWait           time.Duration
	maxDeliver        int
	maxAckPending     int
	replicas          int
	verdictTTL        time.Duration
	duplicateWindow   time.Duration
	auditMaxAge       time.Duration
	auditKeyFile      string
	grantKeyFile      string
	grantTTL          time.Duration
	auditKeyRotate    bool
	auditPublish      string
	auditCompress     bool
	policy            policySourceOptions
	shadow            shadowOptions
	policyWatch       bool
	policyPoll        time.Duration
	toolTimeout       time.Duration
	dedupeWindow      time.Duration
	dedupeMax         int
	pluginsDir        string
	defaultPlugin     string
	llmMaxConc        int
	operators         string
	notify            string
	// budgets is the budgets file; "" keeps the built-in limits.
	budgets      string
	budgetsWatch time.Duration

	// metricsListen is the address of the listener that serves /metrics
	// alone; "" leaves /metrics to --http when no console is on it.
	metricsListen string
	// metricsTenantLabels has the budget metrics name each tenant.
	metricsTenantLabels bool
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
	o.register(c.Flags())
	return c
}

// register defines serve's flags on f, each setting its field of o.
func (o *serveOptions) register(f *pflag.FlagSet) {
	f.StringVar(&o.dataDir, "data-dir", "gated-data", "directory of the embedded server's JetStream files")
	f.StringVar(&o.personasDir, "personas", "", "directory of persona files (*.md) added to the built-in personas")
	f.BoolVar(&o.personasWatch, "personas-watch", true, "reload the personas when files under --personas change")
	f.StringVar(&o.natsListen, "nats-listen", "127.0.0.1:4222", "client listener of the embedded server (port 0 picks a free one)")
	f.StringVar(&o.natsURL, "nats-url", "", "external NATS server or cluster URLs, comma-separated; empty starts the embedded server")
	o.natsConn.register(f)
	f.StringVar(&o.httpAddr, "http", "", "serve /healthz, /readyz and, with --operators, the web console (docs/CONSOLE.md) on this address, e.g. 127.0.0.1:8080; also /metrics when neither --metrics-listen nor the console is given")
	f.StringVar(&o.metricsListen, "metrics-listen", "", "serve /metrics (Prometheus) alone on this address, e.g. 127.0.0.1:9090, and not on --http; with the console on --http, /metrics is served only here (docs/OBSERVABILITY.md)")
	f.BoolVar(&o.metricsTenantLabels, "metrics-tenant-labels", false, "have the budget metrics carry a tenant label naming each tenant; without it /metrics names no tenant (it answers without credentials)")
	f.BoolVar(&o.pprof, "pprof", false, "also serve Go's profiles under /debug/pprof/ on --http (CPU, heap, goroutines; keep that address private)")
	f.StringVar(&o.logFormat, "log-format", "auto", "auto (console on a terminal, else JSON), json or console")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.DurationVar(&o.reviewTimeout, "review-timeout", engine.DefaultReviewTimeout, "deadline of a review unless the persona sets one; at least 30s")
	f.DurationVar(&o.shutdownGrace, "shutdown-grace", 30*time.Second, "how long SIGTERM waits for proposals in flight before returning them to the stream; the whole shutdown ends within it plus 5s, in every state (what it gives up on is logged, and the exit status is 1)")
	f.IntVar(&o.maxInFlight, "max-in-flight", 1024, "proposals decided at once by this process")
	f.IntVar(&o.tenantMaxInFlight, "tenant-max-in-flight", 0, "proposals of one tenant this process works on at once while other tenants have proposals in it too (a tenant alone may use every handler but this many); more wait in the tenant's own queue, so a flooding tenant leaves the CPU to the others; a proposal waiting on its reviewer holds none (0: 4 per core, at most --max-in-flight)")
	f.DurationVar(&o.ackWait, "ack-wait", 30*time.Second, "how long a proposal may go without an acknowledgement before JetStream redelivers it; gated sends in-progress acks every third of it; at least 1s")
	f.IntVar(&o.maxDeliver, "max-deliver", 5, "deliveries of one proposal before gated answers it with an error verdict")
	f.IntVar(&o.maxAckPending, "max-ack-pending", 0, "proposals handed out and not yet acknowledged, over every gated sharing the consumer (0: 4 × --max-in-flight)")
	f.BoolVar(&o.reviewService, "review-service", true, "serve the request/reply endpoints gated.review and gated.review.<tenant> (nats micro service \"gated\")")
	f.StringVar(&o.operators, "operators", "", "YAML file of the operators (nkey public keys) whose signed decisions on held actions and run reviews gated accepts on gated.operator.<tenant>.<id> (docs/OPERATORS.md); empty: none")
	f.DurationVar(&o.operatorDeadline, "operator-deadline", engine.DefaultOperatorDeadline, "how long an action the policy holds for an operator waits for a decision before it times out (a policy hold may set less)")
	_ = cobra.MarkFlagFilename(f, "operators", "yaml", "yml")
	f.StringVar(&o.notify, "notify", "", "YAML file of webhook sinks notified when a proposal awaits an operator, a run escalates, a verdict times out, a plugin goes down or the audit trail fails to verify (docs/NOTIFICATIONS.md); empty: none")
	_ = cobra.MarkFlagFilename(f, "notify", "yaml", "yml")
	f.StringVar(&o.budgets, "budgets", "", "YAML file of the limits per tenant and per agent: proposals, reads and tokens per interval, reviews in flight, actions pending an operator (docs/BUDGETS.md); empty: the built-in limits")
	_ = cobra.MarkFlagFilename(f, "budgets", "yaml", "yml")
	f.DurationVar(&o.budgetsWatch, "budgets-poll", 5*time.Second, "read --budgets again every interval and apply it once a change reads the same twice in a row and is valid; an empty file is refused (0 disables)")
	f.DurationVar(&o.reviewWait, "review-wait", fleet.DefaultWait, "how long a gated.review request waits for its verdict before a 504 reply")
	f.IntVar(&o.replicas, "replicas", 1, "replicas of the streams and the verdict bucket (3 on a cluster)")
	f.DurationVar(&o.verdictTTL, "verdict-ttl", 7*24*time.Hour, "how long verdicts are kept for idempotent replay")
	f.DurationVar(&o.auditMaxAge, "audit-max-age", 0, "how long audit events are kept (0 keeps them)")
	f.DurationVar(&o.duplicateWindow, "duplicate-window", 2*time.Minute, "how long the proposal stream remembers a Nats-Msg-Id and drops a proposal published again under it; the NATS server keeps every id of the window in memory (docs/NATS.md)")
	f.StringVar(&o.auditKeyFile, "audit-key-file", "", "key that MACs audit records: 32+ random bytes, raw or hex (default with the embedded server: <data-dir>/audit.key, created on first start)")
	_ = cobra.MarkFlagFilename(f, "audit-key-file")
	f.StringVar(&o.grantKeyFile, "grant-key-file", "", "Ed25519 key file that signs grants (docs/GRANTS.md; default <data-dir>/grant.keys, created on first start)")
	_ = cobra.MarkFlagFilename(f, "grant-key-file")
	f.DurationVar(&o.grantTTL, "grant-ttl", DefaultGrantTTL, "how long the grant of an approved action stays valid (5s to 24h)")
	f.BoolVar(&o.auditKeyRotate, "audit-key-rotate", false, "start even though the audit key is not the one that MACed the audit stream's newest record (a new key on purpose, or a lost one)")
	f.StringVar(&o.auditPublish, "audit-publish", "auto", "how audit records are published: auto, batches (atomic batches), pipelined or one-at-a-time")
	f.BoolVar(&o.auditCompress, "audit-compress", true, "store each audit record as a zstd frame of its JSON, about half the bytes; false stores the JSON (docs/AUDIT.md)")
	o.policy.register(f)
	o.shadow.register(f)
	f.BoolVar(&o.policyWatch, "policy-watch", true, "reload the policy when --policies or --policy-data files change")
	f.DurationVar(&o.policyPoll, "policy-poll", 10*time.Second, "also compare the policy files every interval, for changes file events miss (0 disables)")
	f.StringVar(&o.pluginsDir, "plugins-dir", "", "directory of reviewer plugin executables pinned by gated-plugins.lock (see gated plugins --help)")
	_ = cobra.MarkFlagDirname(f, "plugins-dir")
	f.StringVar(&o.defaultPlugin, "default-plugin", sop.Name, "plugin that reviews for personas naming none")
	f.IntVar(&o.llmMaxConc, "llm-max-concurrency", DefaultLLMMaxConcurrency, "reviews the bundled llm reviewer runs at once; more wait for a slot (mind the provider's rate limits)")
	f.DurationVar(&o.toolTimeout, "tool-timeout", plugins.DefaultToolCallTimeout, "time limit of one reviewer tool call (never past the review's deadline)")
	f.DurationVar(&o.dedupeWindow, "dedupe-window", engine.DefaultDedupeWindow, "how long a rejection answers identical proposals at stage dedupe (0 turns dedupe off)")
	f.IntVar(&o.dedupeMax, "dedupe-max", engine.DefaultDedupeMax, "rejections remembered for dedupe at most (oldest forgotten first)")
}

// serve checks the options and runs the gate until ctx ends.
func serve(ctx context.Context, o serveOptions) (err error) {
	operators, err := o.check()
	if err != nil {
		return err
	}
	limits := &budget.Config{}
	if o.budgets != "" {
		if limits, err = budget.LoadConfig(o.budgets); err != nil {
			return usageError("--budgets: %v", err)
		}
	}
	var sinks *notify.Config
	if o.notify != "" {
		if sinks, err = notify.LoadConfig(o.notify, os.Getenv); err != nil {
			return usageError("--notify: %v", err)
		}
	}
	log, err := newLogger(o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	s := newServer(o, operators, log)
	s.sinks = sinks
	s.limits = limits
	return s.Run(ctx)
}

// check refuses options that do not go together, before anything starts,
// and loads the operators file.
func (o *serveOptions) check() (operators *operator.List, err error) {
	if err := o.shadow.check(); err != nil {
		return nil, err
	}
	if o.operatorDeadline <= 0 {
		return nil, usageError("--operator-deadline %s must be positive: a held action times out at its deadline", o.operatorDeadline)
	}
	if err := checkGrantTTL(o.grantTTL); err != nil {
		return nil, err
	}
	if o.reviewTimeout < MinReviewTimeout {
		return nil, usageError("--review-timeout %s is below the %s minimum: reviews need time, and a deadline that always fires blocks every change", o.reviewTimeout, MinReviewTimeout)
	}
	switch {
	case o.pprof && o.httpAddr == "":
		return nil, usageError("--pprof serves the profiles on the --http listener: give --http too")
	case o.metricsListen != "" && o.metricsListen == o.httpAddr:
		return nil, usageError("--metrics-listen %s is the --http address: give /metrics an address of its own", o.metricsListen)
	case o.metricsTenantLabels && o.metricsListener() == "":
		return nil, usageError("--metrics-tenant-labels names tenants on /metrics, which is not served: give --metrics-listen (with --operators, the console's --http listener serves no /metrics)")
	case o.reviewWait <= 0:
		return nil, usageError("--review-wait %s must be positive", o.reviewWait)
	case o.shutdownGrace < 0:
		return nil, usageError("--shutdown-grace must not be negative")
	case o.replicas < 1 || o.replicas > 5:
		return nil, usageError("--replicas %d must be between 1 and 5", o.replicas)
	case o.replicas > 1 && o.natsURL == "":
		return nil, usageError("--replicas %d needs a NATS cluster (--nats-url): the embedded server is a single node and keeps one copy", o.replicas)
	case len(o.natsConn.authFlags()) > 0 && o.natsURL == "":
		return nil, usageError("%s apply to an external server: give --nats-url too (the embedded server has no authentication or TLS)", strings.Join(o.natsConn.authFlags(), ", "))
	case o.maxInFlight < 1:
		return nil, usageError("--max-in-flight %d must be at least 1", o.maxInFlight)
	case o.tenantMaxInFlight < 0 || o.tenantMaxInFlight > o.maxInFlight:
		return nil, usageError("--tenant-max-in-flight %d must be from 0 to --max-in-flight %d (0: 4 per core)", o.tenantMaxInFlight, o.maxInFlight)
	case o.ackWait < bus.MinAckWait:
		return nil, usageError("--ack-wait %s must be at least %s: gated sends in-progress acks every third of it, and they must reach JetStream before it runs out", o.ackWait, bus.MinAckWait)
	case o.maxDeliver < 1:
		return nil, usageError("--max-deliver %d must be at least 1", o.maxDeliver)
	case o.llmMaxConc < 1 || o.llmMaxConc > 65536:
		return nil, usageError("--llm-max-concurrency %d must be from 1 to 65536", o.llmMaxConc)
	case o.maxAckPending < 0:
		return nil, usageError("--max-ack-pending %d must not be negative (0: 4 × --max-in-flight)", o.maxAckPending)
	case o.verdictTTL < time.Minute:
		return nil, usageError("--verdict-ttl %s must be at least 1m: verdicts are how a redelivered proposal avoids a second review", o.verdictTTL)
	case o.auditMaxAge < 0:
		return nil, usageError("--audit-max-age must not be negative (0 keeps events)")
	case o.duplicateWindow < time.Second || o.duplicateWindow > o.verdictTTL:
		return nil, usageError("--duplicate-window %s must be from 1s to --verdict-ttl (%s): after it, the stored verdict answers a proposal published again", o.duplicateWindow, o.verdictTTL)
	case o.toolTimeout <= 0:
		return nil, usageError("--tool-timeout %s must be positive", o.toolTimeout)
	case o.dedupeWindow < 0:
		return nil, usageError("--dedupe-window must not be negative (0 turns dedupe off)")
	case o.budgetsWatch < 0:
		return nil, usageError("--budgets-poll must not be negative (0 disables)")
	case o.dedupeMax < 1:
		return nil, usageError("--dedupe-max %d must be at least 1", o.dedupeMax)
	}
	if err := o.natsConn.validate(); err != nil {
		return nil, err
	}
	if o.operators != "" {
		if !o.reviewService {
			return nil, usageError("--operators needs --review-service: operator decisions are an endpoint of the review service")
		}
		if operators, err = operator.LoadList(o.operators); err != nil {
			return nil, usageError("--operators: %v", err)
		}
	}
	return operators, nil
}

// verdictPublisher publishes verdicts on gated.verdicts.<tenant>.<id>,
// as the worker does.
func verdictPublisher(nc *nats.Conn) operator.VerdictHook {
	return func(_ context.Context, v *gated.Verdict) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return nc.Publish(wire.VerdictSubject(v.Tenant, v.ProposalID), data)
	}
}

// serveHTTP serves /healthz and /readyz on addr, metrics (when not nil)
// under /metrics, the profiles when asked, and root (the console), when
// not nil, under /.
func serveHTTP(addr string, profiles bool, nc *nats.Conn, ready *atomic.Bool, live *policies.Live, host *plugins.Host, defaultPlugin string, budgets *budget.Store, metrics, root http.Handler, log *zap.Logger) (stop func(ctx context.Context), err error) {
	mux := http.NewServeMux()
	if root != nil {
		mux.Handle("/", root)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		policy := live.State()
		body := readiness{Ready: true, NATS: nc.Status().String(), Policy: policy, Plugins: host.Plugins()}
		defaultUp := false
		for _, p := range body.Plugins {
			defaultUp = defaultUp || (p.Name == defaultPlugin && p.Running)
		}
		switch {
		case !ready.Load():
			body.Ready, body.Reason = false, "shutting down"
		case !nc.IsConnected():
			body.Ready, body.Reason = false, "NATS connection "+nc.Status().String()
		case !defaultUp:
			// Reviews would be blocked until the supervisor relaunches it.
			body.Ready, body.Reason = false, "the default reviewer plugin "+defaultPlugin+" is not running"
		case budgets != nil && budgetsUnreachable(r.Context(), budgets) != "":
			// No review starts while the counters cannot be reached.
			body.Ready, body.Reason = false, budgetsUnreachable(r.Context(), budgets)
		case policy.Stale:
			// The last good policy is still served; the policy on disk is
			// not, and an operator should know.
			body.Ready, body.Reason = false, "the latest policy reload failed; serving the last good revision "+policy.Revision
		}
		w.Header().Set("Content-Type", "application/json")
		if !body.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})
	if metrics != nil {
		mux.Handle("/metrics", metrics)
	}
	if profiles {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return listenHTTP("--http", addr, mux, log)
}

// listenHTTP serves h on addr, the address of flag, until stop. stop
// waits for the requests under way until ctx ends, then closes
// what is still open.
func listenHTTP(flag, addr string, h http.Handler, log *zap.Logger) (stop func(ctx context.Context), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s %s: %w", flag, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", zap.String("listener", flag), zap.Error(err))
		}
	}()
	return func(ctx context.Context) {
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}

// budgetsUnreachable says why the budget counters cannot be reached, or
// "" when they can.
func budgetsUnreachable(ctx context.Context, b *budget.Store) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := b.Check(ctx); err != nil {
		return "the budget counters cannot be reached, so no review starts: " + err.Error()
	}
	return ""
}

// readiness is the /readyz document.
type readiness struct {
	Ready   bool           `json:"ready"`
	Reason  string         `json:"reason,omitempty"`
	NATS    string         `json:"nats"`
	Policy  policies.State `json:"policy"`
	Plugins []plugins.Info `json:"plugins"`
}

func logReload(log *zap.Logger, r policies.Reload) {
	switch {
	case !r.OK:
		log.Error("policy reload refused: the last good policy stays in force",
			zap.String("serving", r.Previous), zap.String("error", r.Error), zap.Duration("took", r.Duration))
	case r.Changed:
		log.Info("policy reloaded", zap.String("revision", r.Revision), zap.String("previous", r.Previous),
			zap.Int("tests", r.Tests), zap.Duration("took", r.Duration))
	default:
		log.Info("policy sources changed but decide alike: revision unchanged", zap.String("revision", r.Revision))
	}
}

// reloadEvent is the audit record of a reload attempt: gated's own event,
// under the reserved tenant token.
func reloadEvent(r policies.Reload, serving string) engine.AuditEvent {
	name := engine.EventPolicyReloaded
	if !r.OK {
		name = engine.EventPolicyReloadFailed
	}
	data, _ := json.Marshal(r)
	return engine.AuditEvent{
		V: gated.SchemaVersion, Event: name, Tenant: gated.UnknownTenant, At: r.At.UTC(),
		PolicyRevision: serving, Data: data,
	}
}
