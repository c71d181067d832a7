package plugins

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gated/gated"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/plugins/internal/wire"
	"github.com/gated/gated/plugins/pluginv1"
)

// process is one plugin process and its connection.
type process struct {
	host *Host
	spec Spec
	log  *zap.Logger

	// startMu serialises launches of this plugin; reviews on other
	// plugins never wait for it.
	startMu sync.Mutex
	// failures counts launches that failed in a row; lastFailure is when
	// the last one did, and lastErr why. Relaunches back off
	// exponentially.
	failures    int
	lastFailure time.Time
	lastErr     error

	mu        sync.Mutex
	client    *plugin.Client
	rpc       pluginv1.ReviewerClient
	desc      *pluginv1.DescribeResponse
	pid       int
	startedAt time.Time
	// pgid is the running launch's process group; conn its connection,
	// which health checks use.
	pgid int
	conn *grpc.ClientConn
	// life ends, with the reason as its cause, when the running launch is
	// killed or exits; reviews in flight on it fail at once.
	life context.Context
	end  context.CancelCauseFunc
	// brokerID is where the plugin finds this host's ToolHost, offered on
	// broker at offeredAt; toolsDialed turns true once the plugin
	// connected to it (see offerTools).
	brokerID    uint32
	broker      *plugin.GRPCBroker
	toolHost    *toolHost
	offeredAt   time.Time
	offers      int
	toolsDialed *atomic.Bool
	// sem bounds reviews in flight. It is made at the first launch and kept
	// across relaunches, so reviews still holding a slot count against the
	// new process too.
	sem chan struct{}
}

// launchEnd is why a launch of a plugin ended, the cause of its life
// context: failure is how the reviews in flight on it failed.
type launchEnd struct {
	failure engine.ReviewFailure
	msg     string
}

func (e *launchEnd) Error() string { return e.msg }

func launchEnded(failure engine.ReviewFailure, format string, args ...any) *launchEnd {
	return &launchEnd{failure: failure, msg: fmt.Sprintf(format, args...)}
}

// Relaunch backoff bounds.
const (
	minRestartBackoff = time.Second
	maxRestartBackoff = 30 * time.Second
)

// ensureRunning relaunches an exited plugin, no more often than the
// backoff allows; until then routes to it fail and reviews are blocked.
// A launch that fails is logged with its error, which may quote what the
// plugin printed: the operator's, never a verdict's.
func (p *process) ensureRunning() error {
	if p.running() {
		return nil
	}
	p.startMu.Lock()
	defer p.startMu.Unlock()
	if p.running() {
		return nil
	}
	if p.failures > 0 {
		backoff := min(minRestartBackoff<<min(p.failures-1, 5), maxRestartBackoff)
		if wait := time.Until(p.lastFailure.Add(backoff)); wait > 0 {
			err := fmt.Errorf("plugin %q failed to start %d times in a row; next attempt in %s", p.spec.Name, p.failures, wait.Round(time.Millisecond))
			if p.lastErr != nil {
				err = fmt.Errorf("%w; the last attempt: %w", err, p.lastErr)
			}
			return err
		}
	}
	if err := p.start(context.Background()); err != nil {
		p.failures++
		p.lastFailure, p.lastErr = time.Now(), err
		p.log.Warn("plugin could not be started; reviews routed to it are blocked", zap.Int("failures", p.failures), zap.Error(err))
		return err
	}
	p.failures, p.lastErr = 0, nil
	return nil
}

// superviseEvery is how often a supervisor looks at its plugin.
const superviseEvery = 100 * time.Millisecond

// crashLoopUptime: a plugin that exits sooner than this after its launch
// is relaunched with backoff.
const crashLoopUptime = 30 * time.Second

// supervise relaunches the plugin whenever it exits, until the host
// closes. Reviews in flight on the exited process have already failed
// with their broken stream; routes in the meantime are blocked.
func (p *process) supervise() {
	tick := time.NewTicker(superviseEvery)
	defer tick.Stop()
	var seenPID int
	for {
		select {
		case <-p.host.done:
			return
		case <-tick.C:
		}
		// One look at the launch: a route may relaunch the plugin at any
		// moment, and what is ended below must be the launch that exited,
		// never the one that replaced it.
		p.mu.Lock()
		c, pid, pgid, end, startedAt := p.client, p.pid, p.pgid, p.end, p.startedAt
		p.mu.Unlock()
		if c == nil || !c.Exited() {
			continue
		}
		if pid != seenPID {
			seenPID = pid
			uptime := time.Since(startedAt)
			// A plugin that dies soon after it started counts as a failed
			// launch, so a crash loop backs off instead of spinning.
			if uptime < crashLoopUptime {
				p.startMu.Lock()
				p.failures++
				p.lastFailure = time.Now()
				p.startMu.Unlock()
			}
			// Whatever the plugin started and left behind goes with it.
			killProcessGroup(pgid)
			end(launchEnded(engine.FailureCrashed, "plugin %q (pid %d) exited", p.spec.Name, pid))
			p.log.Warn("plugin exited; relaunching", zap.Int("pid", pid), zap.Duration("uptime", uptime))
			p.host.emit(EventPluginExited, gated.PluginEventData{Plugin: p.spec.Name, PID: pid, UptimeS: uptime.Seconds()})
		}
		if err := p.ensureRunning(); err != nil {
			p.log.Debug("plugin relaunch deferred", zap.Error(err))
		}
	}
}

func (p *process) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.client != nil && !p.client.Exited()
}

func (p *process) start(ctx context.Context) error {
	select {
	case <-p.host.done:
		return fmt.Errorf("plugin %q: gated is shutting down", p.spec.Name)
	default:
	}
	img, actual, err := p.host.imageFor(p.spec)
	if err != nil {
		if errors.Is(err, ErrChecksum) {
			p.host.emit(EventPluginRefused, gated.PluginEventData{
				Plugin: p.spec.Name, Path: p.spec.Path, PinnedSHA256: p.spec.SHA256,
				ActualSHA256: actual, Why: "checksum mismatch",
			})
		}
		return fmt.Errorf("starting plugin %q: %w", p.spec.Name, err)
	}
	// The verified image runs, never the file at the path, which may have
	// been swapped since. The plugin still sees its path as argv[0].
	cmd := exec.Command(img.path, p.spec.Args...)
	cmd.Args[0] = p.spec.Path
	cmd.ExtraFiles = img.files
	tlsConfig, certPEM, err := clientTLS()
	if err != nil {
		return fmt.Errorf("starting plugin %q: %w", p.spec.Name, err)
	}
	// The certificate comes last, so a spec's env cannot replace it.
	cmd.Env = append(append(minimalEnv(), p.spec.Env...), clientCertEnv+"="+certPEM)
	setParentDeathSignal(cmd)
	setProcessGroup(cmd)
	stderr := new(stderrTail)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  wire.Handshake,
		VersionedPlugins: wire.PluginSets(nil),
		Cmd:              cmd,
		// No SecureConfig: it hashes the path and then executes the path,
		// a window in which the file can be swapped. The image was
		// verified instead.
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		// Mutual TLS as go-plugin's AutoMTLS, with a key every TLS stack
		// takes (see clientTLS).
		TLSConfig:   tlsConfig,
		SkipHostEnv: true,
		// Managed clients are stopped by plugin.CleanupClients, which gated
		// calls on every way out.
		Managed:         true,
		StartTimeout:    p.spec.StartTimeout,
		Logger:          newHCLogger(p.log),
		Stderr:          stderr,
		GRPCDialOptions: wire.DialOptions(),
	})
	// pgid is the plugin's process group, which it leads: known once the
	// process started, inside client.Client.
	pgid := func() int {
		if cmd.Process == nil {
			return 0
		}
		return cmd.Process.Pid
	}
	fail := func(err error) error {
		endLaunch(p.log, client, pgid(), false)
		if startTimedOut(err) {
			err = fmt.Errorf("no answer within its start timeout of %s: %w", p.spec.StartTimeout, err)
		}
		return fmt.Errorf("starting plugin %q: %w", p.spec.Name, launchFailed(err, client, cmd, stderr))
	}
	proto, err := client.Client()
	if err != nil {
		return fail(err)
	}
	raw, err := proto.Dispense(wire.PluginName)
	if err != nil {
		return fail(err)
	}
	conn, ok := raw.(*wire.Conn)
	if !ok {
		return fail(fmt.Errorf("dispensed %T, want a reviewer connection", raw))
	}
	grpcClient, ok := proto.(*plugin.GRPCClient)
	if !ok {
		return fail(fmt.Errorf("connected with %T, want a gRPC client", proto))
	}
	dctx, cancel := context.WithTimeout(ctx, p.spec.StartTimeout)
	defer cancel()
	desc, err := conn.Reviewer.Describe(dctx, &pluginv1.DescribeRequest{})
	if err != nil {
		return fail(fmt.Errorf("describe: %w", err))
	}
	limit := p.spec.MaxConcurrency
	if limit <= 0 {
		limit = defaultMaxConcurrency
		if n := int(desc.GetMaxConcurrency()); n > 0 && n < limit {
			limit = n
		}
	}
	pid := pgid()
	life, end := context.WithCancelCause(context.Background())
	p.mu.Lock()
	old, oldPgid, oldEnd := p.client, p.pgid, p.end
	p.client, p.rpc, p.desc, p.pid = client, conn.Reviewer, desc, pid
	p.pgid, p.conn, p.life, p.end = pid, grpcClient.Conn, life, end
	// One long-lived ToolHost per plugin process, on the broker.
	p.broker, p.toolsDialed, p.offers = conn.Broker, new(atomic.Bool), 0
	p.toolHost = &toolHost{plugin: p.spec.Name, reviews: &p.host.reviews, cfg: &p.host.tools}
	p.offerTools()
	p.startedAt = time.Now()
	if p.sem == nil {
		p.sem = make(chan struct{}, limit)
	}
	p.mu.Unlock()
	if old != nil {
		oldEnd(launchEnded(engine.FailureCrashed, "plugin %q was relaunched", p.spec.Name))
		endLaunch(p.log, old, oldPgid, true)
	}
	p.log.Info("plugin started", zap.String("version", desc.GetVersion()), zap.Int("pid", pid), zap.Int("max_concurrency", limit))
	p.host.emit(EventPluginStarted, gated.PluginEventData{Plugin: p.spec.Name, Version: desc.GetVersion(), PID: pid, SHA256: img.sha256})
	return nil
}

// startTimedOut tells whether a launch failed for want of an answer in
// time: no handshake line, or no answer to Describe. go-plugin reports
// the first with an error of its own text only.
func startTimedOut(err error) bool {
	return strings.Contains(err.Error(), noStart) ||
		errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded
}

// stopGrace is how long ending a plugin waits for go-plugin's own
// shutdown (a request to exit, up to 2 s, then a kill of the plugin's
// process) before it kills the plugin's process group.
const stopGrace = 3 * time.Second

// endLaunch ends one launch of a plugin and every process in its process
// group pgid. With graceful, go-plugin asks the plugin to exit first; the
// group is killed once that is done or stopGrace has passed. Without, the
// group is killed at once. Killing the group is what ends a wrapper's
// child that holds the plugin's output open: go-plugin waits for that
// output to close before it lets go of a plugin.
func endLaunch(log *zap.Logger, client *plugin.Client, pgid int, graceful bool) {
	if !graceful {
		killProcessGroup(pgid)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		client.Kill()
	}()
	select {
	case <-done:
	case <-time.After(stopGrace):
		killProcessGroup(pgid)
		select {
		case <-done:
		case <-time.After(stopGrace):
			// Only a process that left the group can hold the output
			// now; go-plugin lets go once it closes it.
			log.Error("a process that left the plugin's process group keeps its output open; no longer waiting for it", zap.Int("pgid", pgid))
		}
	}
	// Whatever of the group outlived the plugin's own process.
	killProcessGroup(pgid)
}

func (p *process) stop() {
	p.mu.Lock()
	c, pid, pgid, end := p.client, p.pid, p.pgid, p.end
	p.client, p.rpc = nil, nil
	p.mu.Unlock()
	if c != nil {
		endLaunch(p.log, c, pgid, true)
		end(launchEnded(engine.FailureStopped, "plugin %q was stopped: gated is shutting down", p.spec.Name))
		p.log.Info("plugin stopped", zap.Int("pid", pid))
	}
}

// watchHealth checks every HealthInterval that the running plugin answers
// gRPC's health service, until the host closes. A check with no answer
// within the interval is a miss; after HealthMisses in a row (a plugin
// that is stopped, deadlocked or swapping) the plugin's process group is
// killed, its reviews in flight fail at once with an error naming the
// misses, and the supervisor relaunches it.
func (p *process) watchHealth() {
	every := p.spec.HealthInterval
	tick := time.NewTicker(every)
	defer tick.Stop()
	var watched *plugin.Client
	misses := 0
	for {
		select {
		case <-p.host.done:
			return
		case <-tick.C:
		}
		p.mu.Lock()
		c, conn, pid, pgid, end := p.client, p.conn, p.pid, p.pgid, p.end
		p.mu.Unlock()
		if c == nil || c.Exited() {
			continue
		}
		if c != watched {
			watched, misses = c, 0
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := checkHealth(ctx, conn)
		cancel()
		if err == nil {
			misses = 0
			continue
		}
		misses++
		p.log.Warn("plugin missed a health check", zap.Int("pid", pid), zap.Int("misses", misses), zap.Error(err))
		if misses < p.spec.HealthMisses || c.Exited() {
			continue
		}
		why := launchEnded(engine.FailureUnresponsive, "plugin %q (pid %d) missed %d health checks in a row (one every %s); gated killed its process group", p.spec.Name, pid, misses, every)
		p.log.Error("plugin is unresponsive; killing and relaunching it", zap.Int("pid", pid), zap.Int("misses", misses))
		p.host.emit(EventPluginUnhealthy, gated.PluginEventData{Plugin: p.spec.Name, PID: pid, Misses: misses, IntervalS: every.Seconds()})
		end(why)
		endLaunch(p.log, c, pgid, false)
		watched = nil
	}
}

// checkHealth asks a plugin's gRPC health service whether it serves.
func checkHealth(ctx context.Context, conn *grpc.ClientConn) error {
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: plugin.GRPCServiceName})
	if err != nil {
		return err
	}
	if st := res.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health status %s", st)
	}
	return nil
}

// minimalEnv is what a plugin inherits from the host: enough to run, and
// no credentials. The OpenTelemetry variables go too (see otelEnv), so
// that a plugin exports its spans where gated exports its own.
func minimalEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "LANG", "TZ"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, otelEnv(os.Environ())...)
}

// otelEnv picks the OTEL_* variables of environ that a plugin inherits:
// all but the exporter headers, which may carry a collector's
// credentials (a plugin that needs them gets them in its spec's Env), and
// OTEL_SERVICE_NAME, so that a plugin's spans are not taken for gated's.
func otelEnv(environ []string) []string {
	var env []string
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, "OTEL_") || strings.Contains(k, "HEADERS") || k == "OTEL_SERVICE_NAME" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// newHCLogger sends go-plugin's logs, and the plugin's stderr, to zap.
func newHCLogger(log *zap.Logger) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:   "go-plugin",
		Level:  hclog.Info,
		Output: zapWriter{log: log},
	})
}

type zapWriter struct{ log *zap.Logger }

func (w zapWriter) Write(b []byte) (int, error) {
	w.log.Info(string(trimNewline(b)))
	return len(b), nil
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// toolOfferFresh is how old an offer of the ToolHost may be when a review
// hands its broker id to a plugin that has not connected yet. The broker
// on the plugin's side forgets connection details nobody claimed within 5
// seconds; the SDK dials when a review arrives, so an offer younger than
// this is still there when the plugin looks for it.
const toolOfferFresh = 2 * time.Second

// toolOffer returns the broker id a review with tools hands the plugin
// launched as client, renewing an offer the plugin has not taken up once
// it is older than toolOfferFresh. It is called once the review holds its
// slot, just before the request goes out. A plugin that never dials is
// offered at most maxToolOffers times.
func (p *process) toolOffer(client *plugin.Client) uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == client && p.toolsDialed != nil && !p.toolsDialed.Load() &&
		time.Since(p.offeredAt) > toolOfferFresh && p.offers < maxToolOffers {
		p.offerTools()
		if p.offers == maxToolOffers {
			p.log.Warn("plugin never connected to the tool service; no more offers until it is relaunched",
				zap.Int("offers", p.offers))
		}
	}
	return p.brokerID
}

// maxToolOffers bounds the ToolHost offers made to one plugin process that
// never connects: each offer keeps a listener until the process exits.
const maxToolOffers = 64

// offerTools offers the ToolHost on the plugin's broker under a new id and
// makes it the id reviews carry. A plugin connects only when a review with
// tools reaches it, which can be long after its launch, so an offer the
// plugin has not taken up is renewed by the next review once it is older
// than toolOfferFresh; once the plugin connected, the id stays. Every
// offer serves the same ToolHost. p.mu is held.
func (p *process) offerTools() {
	id := p.broker.NextId()
	th, dialed := p.toolHost, p.toolsDialed
	go p.broker.AcceptAndServe(id, func(opts []grpc.ServerOption) *grpc.Server {
		opts = append(opts, wire.ServerOptions(wire.StreamWorkers())...)
		opts = append(opts, grpc.StatsHandler(connSeen{dialed}))
		s := grpc.NewServer(opts...)
		pluginv1.RegisterToolHostServer(s, th)
		return s
	})
	p.brokerID, p.offeredAt = id, time.Now()
	p.offers++
}

// connSeen records that a connection reached a ToolHost offer.
type connSeen struct{ dialed *atomic.Bool }

func (c connSeen) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (c connSeen) HandleRPC(context.Context, stats.RPCStats)                         {}
func (c connSeen) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (c connSeen) HandleConn(_ context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnBegin); ok {
		c.dialed.Store(true)
	}
}
