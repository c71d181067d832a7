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
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/digest"
	"github.com/gated/gated/internal/telemetry"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/plugins/internal/wire"
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

// defaultStartTimeout bounds a plugin's launch and handshake.
const defaultStartTimeout = 10 * time.Second

// defaultHealthInterval is how often the host checks a running plugin's
// health unless its spec says otherwise.
const defaultHealthInterval = 5 * time.Second

// defaultHealthMisses is how many health checks in a row a plugin may
// miss before it is killed and relaunched, unless its spec says
// otherwise.
const defaultHealthMisses = 3

// defaultMaxConcurrency applies when neither the spec nor the plugin sets
// a limit.
const defaultMaxConcurrency = wire.DefaultMaxConcurrency

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
	// plugin's own limit and 16.
	MaxConcurrency int
	// StartTimeout bounds launch and handshake. Default 10s.
	StartTimeout time.Duration
	// HealthInterval is how often the host checks that the running plugin
	// answers gRPC's health service; a check that gets no answer within
	// the interval is a miss. Default 5s.
	HealthInterval time.Duration
	// HealthMisses is how many checks in a row the plugin may miss before
	// the host kills its process group, fails its reviews in flight and
	// relaunches it. Default 3.
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
	events  func(gated.AuditEvent)
	// observe hears every review; nil: nobody listens.
	observe func(ReviewObservation)
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
			s.HealthInterval = defaultHealthInterval
		}
		if s.HealthMisses == 0 {
			s.HealthMisses = defaultHealthMisses
		}
		if _, dup := h.procs[s.Name]; dup {
			return nil, fmt.Errorf("plugin %q is configured twice", s.Name)
		}
		if s.StartTimeout <= 0 {
			s.StartTimeout = defaultStartTimeout
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
// exited or relaunched). They carry the gated.UnknownTenant token. Call it
// before Start; send must not block for long.
func (h *Host) SetEvents(send func(gated.AuditEvent)) { h.events = send }

// ReviewObservation is what the host's review observer hears of one
// review: which plugin and persona, how long the review took (its wait
// for a free slot on the plugin included), and its error, nil when the
// plugin answered (whatever it decided).
type ReviewObservation struct {
	Plugin  string
	Persona string
	Took    time.Duration
	Err     error
}

// SetReviewObserver has observe hear every review the host runs, for
// metrics. It must not block. Call it before Start.
func (h *Host) SetReviewObserver(observe func(ReviewObservation)) { h.observe = observe }

// reviewed reports one review to the observer and ends its span.
func (h *Host) reviewed(span telemetry.Span, plugin string, req engine.ReviewRequest, start time.Time, err error) {
	persona := ""
	if req.Persona != nil {
		persona = req.Persona.Name
	}
	if h.observe != nil {
		h.observe(ReviewObservation{Plugin: plugin, Persona: persona, Took: time.Since(start), Err: err})
	}
	if span.Recording() {
		span.String(telemetry.AttrPlugin, plugin)
		span.String(telemetry.AttrPersona, persona)
		if req.Proposal != nil {
			span.String(telemetry.AttrTenant, req.Proposal.Tenant)
			span.String(telemetry.AttrProposalID, req.Proposal.ID)
		}
	}
	span.End(err)
}

// Plugin events, under the gated.UnknownTenant token.
const (
	EventPluginStarted   = gated.EventPluginStarted
	EventPluginRefused   = gated.EventPluginRefused
	EventPluginExited    = gated.EventPluginExited
	EventPluginUnhealthy = gated.EventPluginUnhealthy
)

func (h *Host) emit(event string, data gated.PluginEventData) {
	if h.events == nil {
		return
	}
	raw, _ := json.Marshal(data)
	h.events(gated.AuditEvent{V: gated.SchemaVersion, Event: event, Tenant: gated.UnknownTenant, At: time.Now().UTC(), Data: raw})
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
//
// Its error is an *engine.ReviewError wrapping engine.ErrNoReviewer that
// names the plugin, as configured, and says why it cannot review
// (engine.FailureNotStarted, engine.FailureNotConfigured,
// engine.FailureStopped): the verdict says that much, and the error, which
// may quote what a plugin printed as it failed to start, goes to the audit
// record and, from ensureRunning, to the log.
func (h *Host) Route(p *engine.Persona) (engine.Reviewer, error) {
	name := p.Plugin
	if name == "" {
		name = h.defaultPlugin
	}
	h.mu.Lock()
	closed := h.closed
	proc, ok := h.procs[name]
	h.mu.Unlock()
	unrouted := func(f engine.ReviewFailure, err error) error {
		return &engine.ReviewError{Plugin: name, Failure: f, Err: err}
	}
	if closed {
		return nil, unrouted(engine.FailureStopped, fmt.Errorf("%w: gated is shutting down", engine.ErrNoReviewer))
	}
	if !ok {
		return nil, unrouted(engine.FailureNotConfigured, fmt.Errorf("%w: persona %q names plugin %q: %w", engine.ErrNoReviewer, p.Name, name, ErrNotConfigured))
	}
	if err := proc.ensureRunning(); err != nil {
		return nil, unrouted(engine.FailureNotStarted, fmt.Errorf("%w: %w", engine.ErrNoReviewer, err))
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
