// Package plugins runs reviewer plugins out of process and routes reviews
// to them. The host launches each plugin with hashicorp/go-plugin over
// gRPC with automatic mutual TLS, executes only the bytes whose SHA-256 it
// verified, runs each plugin in a process group of its own, checks that it
// answers, limits its concurrency, and fails every review it cannot
// complete closed: an exited or unresponsive plugin, a broken stream or a
// deadline is never an approval.
package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/digest"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/plugins/internal/wire"
	"github.com/gated/gated/plugins/pluginv1"
)

// Errors the host returns. Each says how to fix the problem.
var (
	// ErrChecksum means the plugin binary does not have the pinned SHA-256:
	// it was replaced or the pin is stale. Re-pin it only if the new binary
	// is trusted.
	ErrChecksum = errors.New("plugin binary does not match its pinned sha256; refusing to run it")
	// ErrNotConfigured means a persona names a plugin the host does not
	// run. Add the plugin to the configuration or fix the persona.
	ErrNotConfigured = errors.New("plugin is not configured")
)

// DefaultStartTimeout bounds a plugin's launch and handshake.
const DefaultStartTimeout = 10 * time.Second

// DefaultHealthInterval is how often the host checks a running plugin's
// health unless its spec says otherwise.
const DefaultHealthInterval = 5 * time.Second

// DefaultHealthMisses is how many health checks in a row a plugin may
// miss before it is killed and relaunched, unless its spec says
// otherwise.
const DefaultHealthMisses = 3

// DefaultMaxConcurrency applies when neither the spec nor the plugin sets
// a limit.
const DefaultMaxConcurrency = wire.DefaultMaxConcurrency

// Spec says how to launch one plugin.
type Spec struct {
	// Name is how personas refer to the plugin (persona field plugin).
	Name string
	// Path is the plugin executable. It is run directly, never via a shell.
	Path string
	// Args are passed to the executable.
	Args []string
	// Env is added to a minimal environment; the host's own environment is
	// not inherited, so keys do not leak into plugins by accident.
	Env []string
	// SHA256 is the hex digest the executable must have. Required.
	SHA256 string
	// MaxConcurrency bounds reviews in flight; further reviews queue until
	// a slot frees or their deadline passes. 0 means the smaller of the
	// plugin's own limit and DefaultMaxConcurrency.
	MaxConcurrency int
	// StartTimeout bounds launch and handshake. Default DefaultStartTimeout.
	StartTimeout time.Duration
	// HealthInterval is how often the host checks that the running plugin
	// answers gRPC's health service; a check that gets no answer within
	// the interval is a miss. Default DefaultHealthInterval.
	HealthInterval time.Duration
	// HealthMisses is how many checks in a row the plugin may miss before
	// the host kills its process group, fails its reviews in flight and
	// relaunches it. Default DefaultHealthMisses.
	HealthMisses int

	// self marks a bundled reviewer: the host runs its own executable
	// image rather than the file at Path.
	self bool
}

// Bundled returns the spec of a reviewer compiled into this binary: the
// running executable re-launched as `plugin run NAME`, pinned to its own
// SHA-256. On Linux the host launches the very file gated runs from
// (/proc/self/exe), so a binary swapped at gated's path since it started
// is never run as its reviewer; elsewhere the file at the path is copied
// and checked like any plugin's.
func Bundled(name string) (Spec, error) {
	exe, err := os.Executable()
	if err != nil {
		return Spec{}, fmt.Errorf("locating own executable for plugin %q: %w", name, err)
	}
	from := exe
	if selfExe != "" {
		from = selfExe
	}
	sum, err := FileSHA256(from)
	if err != nil {
		return Spec{}, fmt.Errorf("hashing own executable for plugin %q: %w", name, err)
	}
	return Spec{Name: name, Path: exe, Args: []string{"plugin", "run", name}, SHA256: sum, self: true}, nil
}

// FileSHA256 returns the hex SHA-256 of a file.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return hashFrom(f)
}

// Host runs reviewer plugins and implements engine.Router.
type Host struct {
	log           *zap.Logger
	defaultPlugin string
	basePrompt    string

	tools   ToolConfig
	reviews reviews
	events  func(engine.AuditEvent)
	// done is closed by Close: supervisors stop relaunching.
	done chan struct{}
	// decoys are tools offered to reviewers but never allowed: the
	// conformance run uses them to see how a plugin takes a refusal.
	decoys []string

	mu     sync.Mutex
	procs  map[string]*process
	closed bool
	// watchers are the supervisors and health checkers; Close waits for
	// them.
	watchers sync.WaitGroup

	// images are the verified executables, by digest.
	imagesMu     sync.Mutex
	images       map[string]*image
	imagesClosed bool
}

var _ engine.Router = (*Host)(nil)

// NewHost returns a host for specs. defaultPlugin serves personas that
// name no plugin. Nothing is launched until Start.
func NewHost(log *zap.Logger, defaultPlugin string, specs ...Spec) (*Host, error) {
	h := &Host{log: log, defaultPlugin: defaultPlugin, basePrompt: personas.BasePrompt, procs: map[string]*process{},
		done: make(chan struct{}), images: map[string]*image{}}
	for _, s := range specs {
		if s.Name == "" {
			return nil, fmt.Errorf("a plugin spec has no name (path %q)", s.Path)
		}
		if s.Path == "" {
			return nil, fmt.Errorf("plugin %q has no path", s.Name)
		}
		if !digest.ValidSHA256(strings.ToLower(s.SHA256)) {
			return nil, fmt.Errorf("plugin %q: sha256 %q must be 64 hex digits", s.Name, s.SHA256)
		}
		s.SHA256 = strings.ToLower(s.SHA256)
		if s.HealthInterval < 0 || s.HealthMisses < 0 {
			return nil, fmt.Errorf("plugin %q: health interval %s and misses %d must not be negative", s.Name, s.HealthInterval, s.HealthMisses)
		}
		if s.HealthInterval == 0 {
			s.HealthInterval = DefaultHealthInterval
		}
		if s.HealthMisses == 0 {
			s.HealthMisses = DefaultHealthMisses
		}
		if _, dup := h.procs[s.Name]; dup {
			return nil, fmt.Errorf("plugin %q is configured twice", s.Name)
		}
		if s.StartTimeout <= 0 {
			s.StartTimeout = DefaultStartTimeout
		}
		h.procs[s.Name] = &process{host: h, spec: s, log: log.With(zap.String("plugin", s.Name))}
	}
	if _, ok := h.procs[defaultPlugin]; !ok && defaultPlugin != "" {
		return nil, fmt.Errorf("default plugin %q: %w", defaultPlugin, ErrNotConfigured)
	}
	return h, nil
}

// SetTools configures the tools reviewers may call. Call it before Start.
func (h *Host) SetTools(cfg ToolConfig) { h.tools = cfg }

// SetEvents sets where the host's own audit events go (a plugin refused,
// exited or relaunched). They carry the engine.UnknownTenant token. Call it
// before Start; send must not block for long.
func (h *Host) SetEvents(send func(engine.AuditEvent)) { h.events = send }

// Plugin events, under the engine.UnknownTenant token.
const (
	EventPluginStarted   = "plugin.started"
	EventPluginRefused   = "plugin.refused"
	EventPluginExited    = "plugin.exited"
	EventPluginUnhealthy = "plugin.unhealthy"
)

func (h *Host) emit(event string, data map[string]any) {
	if h.events == nil {
		return
	}
	raw, _ := json.Marshal(data)
	h.events(engine.AuditEvent{V: engine.SchemaVersion, Event: event, Tenant: engine.UnknownTenant, At: time.Now().UTC(), Data: raw})
}

// Start launches every plugin, asks each to describe itself, and from then
// on relaunches a plugin that exits, with exponential backoff, and kills
// and relaunches one that misses its health checks. It fails if any
// plugin cannot start; the error names the plugin.
func (h *Host) Start(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, name := range h.namesLocked() {
		p := h.procs[name]
		p.startMu.Lock()
		err := p.start(ctx)
		p.startMu.Unlock()
		if err != nil {
			return err
		}
	}
	for _, name := range h.namesLocked() {
		p := h.procs[name]
		h.watchers.Go(p.supervise)
		h.watchers.Go(p.watchHealth)
	}
	return nil
}

func (h *Host) namesLocked() []string {
	names := make([]string, 0, len(h.procs))
	for n := range h.procs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Route implements engine.Router. An exited plugin is relaunched once
// per call; if that fails the review is blocked.
func (h *Host) Route(p *engine.Persona) (engine.Reviewer, error) {
	name := p.Plugin
	if name == "" {
		name = h.defaultPlugin
	}
	h.mu.Lock()
	closed := h.closed
	proc, ok := h.procs[name]
	h.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: gated is shutting down", engine.ErrNoReviewer)
	}
	if !ok {
		return nil, fmt.Errorf("%w: persona %q names plugin %q: %w", engine.ErrNoReviewer, p.Name, name, ErrNotConfigured)
	}
	if err := proc.ensureRunning(); err != nil {
		return nil, fmt.Errorf("%w: %w", engine.ErrNoReviewer, err)
	}
	return &route{proc: proc, basePrompt: h.basePrompt}, nil
}

// Info describes a running plugin.
type Info struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	PID     int    `json:"pid"`
	Running bool   `json:"running"`
}

// Plugins lists the configured plugins.
func (h *Host) Plugins() []Info {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Info
	for _, name := range h.namesLocked() {
		p := h.procs[name]
		p.mu.Lock()
		info := Info{Name: name, PID: p.pid, Running: p.client != nil && !p.client.Exited()}
		if p.desc != nil {
			info.Version = p.desc.GetVersion()
		}
		p.mu.Unlock()
		out = append(out, info)
	}
	return out
}

// Close stops every plugin: a graceful shutdown request, then a kill of
// its whole process group. It returns once every plugin process has
// exited and the host's own goroutines have stopped.
func (h *Host) Close() {
	h.mu.Lock()
	if !h.closed {
		close(h.done)
	}
	h.closed = true
	procs := make([]*process, 0, len(h.procs))
	for _, p := range h.procs {
		procs = append(procs, p)
	}
	h.mu.Unlock()
	// No supervisor relaunches anything once they are all gone.
	h.watchers.Wait()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(p.stop)
	}
	wg.Wait()
	h.releaseImages()
}

// process is one plugin process and its connection.
type process struct {
	host *Host
	spec Spec
	log  *zap.Logger

	// startMu serialises launches of this plugin; reviews on other
	// plugins never wait for it.
	startMu sync.Mutex
	// failures counts launches that failed in a row; lastFailure is when
	// the last one did. Relaunches back off exponentially.
	failures    int
	lastFailure time.Time

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

// Relaunch backoff bounds.
const (
	minRestartBackoff = time.Second
	maxRestartBackoff = 30 * time.Second
)

// ensureRunning relaunches an exited plugin, no more often than the
// backoff allows; until then routes to it fail and reviews are blocked.
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
			return fmt.Errorf("plugin %q failed to start %d times in a row; next attempt in %s", p.spec.Name, p.failures, wait.Round(time.Millisecond))
		}
	}
	if err := p.start(context.Background()); err != nil {
		p.failures++
		p.lastFailure = time.Now()
		return err
	}
	p.failures = 0
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
			end(fmt.Errorf("plugin %q (pid %d) exited", p.spec.Name, pid))
			p.log.Warn("plugin exited; relaunching", zap.Int("pid", pid), zap.Duration("uptime", uptime))
			p.host.emit(EventPluginExited, map[string]any{"plugin": p.spec.Name, "pid": pid, "uptime_s": uptime.Seconds()})
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
			p.host.emit(EventPluginRefused, map[string]any{
				"plugin": p.spec.Name, "path": p.spec.Path, "pinned_sha256": p.spec.SHA256,
				"actual_sha256": actual, "why": "checksum mismatch",
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
		return fmt.Errorf("starting plugin %q: %w", p.spec.Name, err)
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
		limit = DefaultMaxConcurrency
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
		oldEnd(fmt.Errorf("plugin %q was relaunched", p.spec.Name))
		endLaunch(p.log, old, oldPgid, true)
	}
	p.log.Info("plugin started", zap.String("version", desc.GetVersion()), zap.Int("pid", pid), zap.Int("max_concurrency", limit))
	p.host.emit(EventPluginStarted, map[string]any{"plugin": p.spec.Name, "version": desc.GetVersion(), "pid": pid, "sha256": img.sha256})
	return nil
}

// startTimedOut tells whether a launch failed for want of an answer in
// time: no handshake line, or no answer to Describe. go-plugin reports
// the first with an error of its own text only.
func startTimedOut(err error) bool {
	return strings.Contains(err.Error(), "timeout while waiting for plugin to start") ||
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
		end(fmt.Errorf("plugin %q was stopped: gated is shutting down", p.spec.Name))
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
		why := fmt.Errorf("plugin %q (pid %d) missed %d health checks in a row (one every %s); gated killed its process group", p.spec.Name, pid, misses, every)
		p.log.Error("plugin is unresponsive; killing and relaunching it", zap.Int("pid", pid), zap.Int("misses", misses))
		p.host.emit(EventPluginUnhealthy, map[string]any{"plugin": p.spec.Name, "pid": pid, "misses": misses, "interval_s": every.Seconds()})
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

// route is a Reviewer bound to one persona on one plugin process.
type route struct {
	proc       *process
	basePrompt string
}

// Review implements engine.Reviewer.
func (r *route) Review(ctx context.Context, req engine.ReviewRequest) (engine.ReviewResult, error) {
	p := r.proc
	p.mu.Lock()
	rpc, sem, desc, pid, client, life := p.rpc, p.sem, p.desc, p.pid, p.client, p.life
	p.mu.Unlock()
	if rpc == nil || client == nil {
		return engine.ReviewResult{}, fmt.Errorf("%w: plugin %q is not running", engine.ErrNoReviewer, p.spec.Name)
	}
	select {
	case sem <- struct{}{}:
		defer func() { <-sem }()
	case <-ctx.Done():
		return engine.ReviewResult{}, fmt.Errorf("waiting for a free slot on plugin %q: %w", p.spec.Name, ctx.Err())
	}
	in, err := r.request(req)
	if err != nil {
		return engine.ReviewResult{}, err
	}
	lr, err := p.host.reviews.add(p.spec.Name, req)
	if err != nil {
		return engine.ReviewResult{}, err
	}
	defer p.host.reviews.remove(lr)
	if len(in.Persona.Tools) > 0 {
		in.ToolHostBrokerId = p.toolOffer(client)
	}
	// The call ends when its launch does, for whatever reason, even if
	// the connection lingers.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(life, cancel)()
	out, err := rpc.Review(rctx, in)
	if err != nil {
		if ctx.Err() != nil {
			return engine.ReviewResult{}, fmt.Errorf("plugin %q: %w", p.spec.Name, ctx.Err())
		}
		if deadlineReached(ctx, err) {
			return engine.ReviewResult{}, fmt.Errorf("plugin %q: %w", p.spec.Name, context.DeadlineExceeded)
		}
		if life.Err() != nil {
			return engine.ReviewResult{}, fmt.Errorf("review failed: %w", context.Cause(life))
		}
		if client.Exited() {
			return engine.ReviewResult{}, fmt.Errorf("plugin %q (pid %d) exited during the review: %w", p.spec.Name, pid, err)
		}
		return engine.ReviewResult{}, fmt.Errorf("plugin %q: %w", p.spec.Name, err)
	}
	res := engine.ReviewResult{
		Plugin: desc.GetName(), PluginVersion: desc.GetVersion(), PID: pid,
		Model: out.GetModel(), Text: out.GetText(), SOPID: out.GetSopId(),
		RollbackPath: out.GetRollbackPath(), Notes: out.GetNotes(), Turns: int(out.GetTurns()),
		MissingWork: out.GetMissingWork(), NextRoundGuidance: out.GetNextRoundGuidance(),
		Warnings: out.GetWarnings(), Confidence: out.GetConfidence(),
		Tokens: engine.Tokens{Prompt: int(out.GetUsage().GetPromptTokens()), Completion: int(out.GetUsage().GetCompletionTokens())},
	}
	if res.Plugin == "" {
		res.Plugin = p.spec.Name
	}
	switch out.GetDecision() {
	case pluginv1.Decision_DECISION_APPROVE:
		res.Decision = engine.DecisionApprove
	default:
		res.Decision = engine.DecisionReject
	}
	if gates := out.GetGates(); len(gates) > 0 {
		res.Gates = make([]engine.Gate, 0, len(gates))
		for _, g := range gates {
			res.Gates = append(res.Gates, engine.Gate{Name: g.GetName(), Passed: g.GetPassed(), Detail: g.GetDetail()})
		}
	}
	for _, c := range out.GetCriteria() {
		res.Criteria = append(res.Criteria, engine.CriterionEval{ID: c.GetId(), Pass: c.GetPass(), Confidence: c.GetConfidence(), Reason: c.GetReason(), Refs: c.GetRefs()})
	}
	for _, c := range out.GetComments() {
		res.Comments = append(res.Comments, engine.Comment{Path: c.GetPath(), Line: commentLine(c), Body: c.GetBody()})
	}
	bound(&res)
	return res, nil
}

// deadlineSlack is how close to the review's deadline a deadline error
// from the plugin counts as the review's own timeout.
const deadlineSlack = 5 * time.Millisecond

// deadlineReached tells whether err is the plugin's side of the review's
// deadline: the plugin's copy of the deadline (sent in the grpc-timeout
// header) can fire, and its answer arrive, before ctx's own timer has
// run, most often on a loaded machine. Such a review timed out; it did
// not fail.
func deadlineReached(ctx context.Context, err error) bool {
	deadline, ok := ctx.Deadline()
	return ok && status.Code(err) == codes.DeadlineExceeded && time.Until(deadline) <= deadlineSlack
}

// Bounds on what the host keeps of a reviewer's answer, besides the
// decision text (engine.MaxDecisionTextBytes). Anything over is cut and
// the cut is noted, in the notes and as the first warning; a required gate
// cut off counts as not reported, so a bound can only ever turn an
// approval into a rejection. The bounds on run review output are the
// ceilings of engine.RunLimits, so that the engine, not the host, applies
// the limits a policy sets.
const (
	maxFieldBytes    = 16 << 10
	maxListItems     = 64
	maxRunItems      = engine.CeilingRunMaxItems
	maxRunItemBytes  = engine.CeilingRunMaxItemBytes
	maxGuidanceBytes = engine.CeilingRunMaxGuidanceBytes
)

func bound(res *engine.ReviewResult) {
	var cut []string
	clipN := func(name string, s *string, n int) {
		if len(*s) > n {
			*s = clipString(*s, n)
			cut = append(cut, name)
		}
	}
	clip := func(name string, s *string) { clipN(name, s, maxFieldBytes) }
	list := func(name string, ss *[]string, items, bytes int) {
		if len(*ss) > items {
			*ss, cut = (*ss)[:items], append(cut, name)
		}
		for i := range *ss {
			clipN(name, &(*ss)[i], bytes)
		}
	}
	clip("sop_id", &res.SOPID)
	clip("rollback_path", &res.RollbackPath)
	clip("notes", &res.Notes)
	clipN("next_round_guidance", &res.NextRoundGuidance, maxGuidanceBytes)
	clip("model", &res.Model)
	if len(res.Gates) > maxListItems {
		res.Gates, cut = res.Gates[:maxListItems], append(cut, "gates")
	}
	for i := range res.Gates {
		clip("gates.detail", &res.Gates[i].Detail)
	}
	if len(res.Criteria) > maxRunItems {
		res.Criteria, cut = res.Criteria[:maxRunItems], append(cut, "criteria")
	}
	for i := range res.Criteria {
		clip("criteria.reason", &res.Criteria[i].Reason)
		list("criteria.refs", &res.Criteria[i].Refs, maxListItems, maxFieldBytes)
	}
	if len(res.Comments) > maxRunItems {
		res.Comments, cut = res.Comments[:maxRunItems], append(cut, "comments")
	}
	for i := range res.Comments {
		clip("comments.path", &res.Comments[i].Path)
		clipN("comments.body", &res.Comments[i].Body, maxRunItemBytes)
	}
	list("missing_work", &res.MissingWork, maxRunItems, maxRunItemBytes)
	list("warnings", &res.Warnings, maxRunItems, maxRunItemBytes)
	if len(cut) > 0 {
		note := "gated cut the reviewer's oversized " + strings.Join(slices.Compact(cut), ", ")
		res.Notes += " [" + note + "]"
		res.Warnings = append([]string{note}, res.Warnings...)
	}
}

func (r *route) request(req engine.ReviewRequest) (*pluginv1.ReviewRequest, error) {
	history, err := json.Marshal(req.History)
	if err != nil {
		return nil, fmt.Errorf("encoding history: %w", err)
	}
	persona := req.Persona
	tools := toolSpecs(&r.proc.host.tools, append(slices.Clip(req.Tools), r.proc.host.decoys...))
	in := &pluginv1.ReviewRequest{
		ReviewId:       req.ReviewID,
		ProposalJson:   req.ProposalJSON,
		DeadlineUnixMs: req.Deadline.UnixMilli(),
		Persona: &pluginv1.Persona{
			Name:           persona.Name,
			SystemPrompt:   personas.ComposeSystemPrompt(r.basePrompt, persona),
			Model:          persona.Model,
			MaxTurns:       uint32(max(persona.MaxTurns, 0)),
			Tools:          tools,
			RequiredGates:  persona.RequiredGates,
			PermissionMode: persona.PermissionMode,
		},
		Policy: &pluginv1.PolicyContext{
			Revision: req.PolicyRevision, Why: req.Why, DeniedTools: req.DeniedTools, HistoryJson: history,
		},
	}
	if req.Run != nil {
		if in.Policy.RunJson, err = json.Marshal(req.Run); err != nil {
			return nil, fmt.Errorf("encoding run context: %w", err)
		}
	}
	if s := req.SOP; s != nil {
		in.Policy.Sop = &pluginv1.Sop{Id: s.ID, Title: s.Title, Actions: s.Actions, Rollback: s.Rollback, Steps: s.Steps}
	}
	return in, nil
}

// minimalEnv is what a plugin inherits from the host: enough to run, and
// no credentials.
func minimalEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "LANG", "TZ"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
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

// commentLine reads a comment's line: absent, or 0 (lines count from 1),
// is a comment on the file as a whole, as is a line int cannot hold.
func commentLine(c *pluginv1.Comment) *int {
	if c.Line == nil || *c.Line == 0 || uint64(*c.Line) > math.MaxInt {
		return nil
	}
	n := int(*c.Line)
	return &n
}
