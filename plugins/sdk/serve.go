package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/telemetry"
	"github.com/gated/gated/plugins/internal/wire"
	"github.com/gated/gated/plugins/pluginv1"
)

// Logger writes to the host: gated reads a plugin's stderr, parses these
// JSON lines and files them under the plugin's name in its own log. Never
// log secrets or whole prompts.
var Logger = hclog.New(&hclog.LoggerOptions{
	Name:       "plugin",
	Output:     os.Stderr,
	JSONFormat: true,
	Level:      hclog.Info,
})

// shutdownGrace is how long reviews in flight get to return after SIGTERM.
const shutdownGrace = 5 * time.Second

// Serve runs the plugin until the host stops it. It does not return: the
// process exits when the host closes the connection, kills the plugin, or
// dies (the watchdog notices a new parent and exits). On SIGTERM the
// contexts of reviews in flight are cancelled and the plugin exits once
// they return, or after a short grace.
//
// A plugin run by hand with the single argument -h or --help (and not by
// gated, which sets the handshake cookie) prints what it is and how gated
// runs it, and Serve returns so that the process exits 0. Run by hand
// otherwise, it exits 1 with go-plugin's explanation.
//
// Serve runs the plugin's Go code on one processor (GOMAXPROCS 1) unless
// the plugin's environment sets GOMAXPROCS, and collects garbage at GC
// percent 50 (see defaultGCPercent) unless it sets GOGC. A reviewer mostly waits, and
// with processors to spare every hand-off between gRPC's goroutines wakes
// another thread, which costs each review more than the work it hands
// over. A plugin that computes a lot per review gets more processors by
// setting GOMAXPROCS in the Env of its spec in gated's configuration.
//
// go-plugin answers the host's gRPC health checks; a plugin that cannot
// serve should exit rather than answer reviews with errors.
func Serve(r Reviewer) {
	if helpAsked(os.Args[1:], os.LookupEnv) {
		printHelp(os.Stdout, r)
		return
	}
	if n, ok := procs(os.LookupEnv); ok {
		runtime.GOMAXPROCS(n)
	}
	if p, ok := gcPercent(os.LookupEnv); ok {
		debug.SetGCPercent(p)
	}
	// Traces go where gated's go: the host passes its OTEL_* variables
	// on (see docs/OBSERVABILITY.md). Without them nothing is traced.
	flush, err := telemetry.Setup(context.Background(), "gated-plugin", os.LookupEnv)
	if err != nil {
		Logger.Warn("traces are off", "error", err)
		flush = func(context.Context) error { return nil }
	}
	go watchParent(os.Getppid(), time.Second)
	srv := newServer(r)
	srv.flush = flush
	go srv.onTerminate()
	defer srv.flushTraces()
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  wire.Handshake,
		VersionedPlugins: wire.PluginSets(srv),
		Logger:           Logger,
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, wire.ServerOptions(wire.PluginStreamWorkers())...)...)
		},
	})
}

// defaultProcs is the GOMAXPROCS of a plugin process whose environment
// does not set one. A reviewer spends a review waiting: on gated, on a
// model's API, on the tools it calls back. Its CPU work is small, but every
// review passes between several gRPC goroutines (the connection's reader,
// the handler, the writer), and while a processor is idle each hand-off
// wakes another OS thread to look for work. Those wake-ups cost more than
// the work they hand over, and on a small machine the threads they wake
// compete for the cores with gated, which is waiting for the answer. One
// processor runs the hand-offs on the thread already running.
const defaultProcs = 1

// procs tells what GOMAXPROCS Serve sets, if any: defaultProcs, unless the
// environment (read through lookup) sets GOMAXPROCS, which the Go runtime
// has already applied.
func procs(lookup func(string) (string, bool)) (int, bool) {
	if v, ok := lookup("GOMAXPROCS"); ok && v != "" {
		return 0, false
	}
	return defaultProcs, true
}

// defaultGCPercent is the GOGC of a plugin process whose environment does
// not set one. A reviewer's memory grows with the reviews it has in flight
// (an LLM reviewer holds a connection, a request and a prompt for each),
// while its CPU work is small: collecting at 50% growth of the live heap
// instead of Go's 100% costs little CPU and trims the heap's slack. With
// 2,000 LLM reviews in flight the bundled LLM reviewer's RSS went from
// about 245 MB to 210 MB.
const defaultGCPercent = 50

// gcPercent tells what GC percent Serve sets, if any: defaultGCPercent,
// unless the environment (read through lookup) sets GOGC, which the Go
// runtime has already applied.
func gcPercent(lookup func(string) (string, bool)) (int, bool) {
	if v, ok := lookup("GOGC"); ok && v != "" {
		return 0, false
	}
	return defaultGCPercent, true
}

// watchParent exits the plugin when its parent goes away: a plugin never
// outlives its host, even when the host is killed with SIGKILL.
func watchParent(parent int, every time.Duration) {
	for range time.Tick(every) {
		if os.Getppid() != parent {
			fmt.Fprintf(os.Stderr, "gated plugin: host process %d is gone; exiting\n", parent)
			os.Exit(3)
		}
	}
}

// server adapts a Reviewer to the generated gRPC interface.
type server struct {
	pluginv1.UnimplementedReviewerServer
	impl  Reviewer
	tools toolConns
	// base is cancelled on SIGTERM; every review's context derives from it.
	base     context.Context
	stop     context.CancelFunc
	inFlight sync.WaitGroup
	// flush exports the spans still buffered; nil: no traces.
	flush func(context.Context) error
}

// flushTraces exports the spans still buffered, for at most a second,
// before the plugin exits.
func (s *server) flushTraces() {
	if s.flush == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.flush(ctx); err != nil {
		Logger.Warn("flushing traces", "error", err)
	}
}

func newServer(r Reviewer) *server {
	base, stop := context.WithCancel(context.Background())
	return &server{impl: r, base: base, stop: stop}
}

// UseBroker implements wire.BrokerUser.
func (s *server) UseBroker(b *plugin.GRPCBroker) { s.tools.setBroker(b) }

// onTerminate cancels reviews in flight on SIGTERM, waits for them a
// little, and exits.
func (s *server) onTerminate() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	Logger.Info("SIGTERM: cancelling reviews in flight")
	s.stop()
	done := make(chan struct{})
	go func() { s.inFlight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(shutdownGrace):
	}
	s.flushTraces()
	os.Exit(0)
}

func (s *server) Describe(ctx context.Context, _ *pluginv1.DescribeRequest) (out *pluginv1.DescribeResponse, err error) {
	defer recoverInto(&err)
	d, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, err
	}
	return &pluginv1.DescribeResponse{
		Name: d.Name, Version: d.Version, Personas: d.Personas, Models: d.Models,
		MaxConcurrency: uint32(max(d.MaxConcurrency, 0)),
	}, nil
}

func (s *server) Review(ctx context.Context, in *pluginv1.ReviewRequest) (out *pluginv1.ReviewResponse, err error) {
	// The plugin's own work, a child of gated's review span when the
	// host sent its trace context; the reviewer's spans are its children.
	ctx, span := telemetry.Start(ctx, telemetry.SpanPluginReview, telemetry.KindServer)
	defer func() { endReviewSpan(span, in, err) }()
	defer recoverInto(&err)
	s.inFlight.Add(1)
	defer s.inFlight.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.base, cancel)()
	req, err := requestFromWire(in)
	if err != nil {
		return nil, err
	}
	if id := in.GetToolHostBrokerId(); id != 0 {
		if req.tools, err = s.tools.client(id); err != nil {
			return nil, err
		}
	}
	res, err := s.impl.Review(ctx, req)
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, fmt.Errorf("reviewer returned no response")
	}
	return responseToWire(res), nil
}

// endReviewSpan ends the plugin's review span with the review's persona
// and model names.
func endReviewSpan(span telemetry.Span, in *pluginv1.ReviewRequest, err error) {
	if span.Recording() {
		span.String(telemetry.AttrPersona, in.GetPersona().GetName())
		span.String(telemetry.AttrModel, in.GetPersona().GetModel())
	}
	span.End(err)
}

// recoverInto turns a panic in the reviewer into an error for this one
// review; the host reads it as an error verdict.
func recoverInto(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("reviewer panicked: %v\n%s", r, debug.Stack())
	}
}

func requestFromWire(in *pluginv1.ReviewRequest) (*Request, error) {
	var p gated.Proposal
	if err := json.Unmarshal(in.GetProposalJson(), &p); err != nil {
		return nil, fmt.Errorf("decoding proposal: %w", err)
	}
	req := &Request{
		ReviewID:     in.GetReviewId(),
		Proposal:     &p,
		ProposalJSON: in.GetProposalJson(),
		Deadline:     time.UnixMilli(in.GetDeadlineUnixMs()),
	}
	if pp := in.GetPersona(); pp != nil {
		req.Persona = Persona{
			Name: pp.GetName(), SystemPrompt: pp.GetSystemPrompt(), Model: pp.GetModel(),
			MaxTurns: int(pp.GetMaxTurns()), RequiredGates: pp.GetRequiredGates(),
			PermissionMode: pp.GetPermissionMode(),
		}
		for _, t := range pp.GetTools() {
			req.Persona.Tools = append(req.Persona.Tools, Tool{Name: t.GetName(), Description: t.GetDescription(), InputSchema: t.GetInputSchemaJson()})
		}
	}
	if pc := in.GetPolicy(); pc != nil {
		req.Policy = Policy{Revision: pc.GetRevision(), Why: pc.GetWhy(), DeniedTools: pc.GetDeniedTools(), History: pc.GetHistoryJson()}
		req.Policy.SOP = SOPFromWire(pc.GetSop())
		run, err := RunFromWire(pc.GetRunJson())
		if err != nil {
			return nil, err
		}
		req.Run = run
	}
	return req, nil
}

// RunFromWire decodes the run context the host sends with the review of a
// kind run proposal (PolicyContext.run_json). Empty input is an action
// review: nil and no error. Anything but one JSON object of the
// gated.RunContext schema is an error wrapping ErrMalformedRun: Serve
// fails the review with it, and the host reads the failure as an error
// verdict, never as an approval.
func RunFromWire(raw []byte) (*gated.RunContext, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("%w: want a JSON object", ErrMalformedRun)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var run gated.RunContext
	if err := dec.Decode(&run); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedRun, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrMalformedRun)
	}
	return &run, nil
}

// SOPFromWire converts a wire SOP; nil stays nil.
func SOPFromWire(s *pluginv1.Sop) *gated.SOP {
	if s == nil {
		return nil
	}
	return &gated.SOP{ID: s.GetId(), Title: s.GetTitle(), Actions: s.GetActions(), Rollback: s.GetRollback(), Steps: s.GetSteps()}
}

// responseToWire converts a response. Strings are made valid UTF-8 (gRPC
// refuses anything else), so a reviewer's garbled text still reaches the
// host, which reads it as the rejection it is.
func responseToWire(r *Response) *pluginv1.ReviewResponse {
	u := func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
	us := func(ss []string) []string {
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = u(s)
		}
		return out
	}
	out := &pluginv1.ReviewResponse{
		Text: u(r.Text), SopId: u(r.SOPID), RollbackPath: u(r.RollbackPath), Notes: u(r.Notes), Model: u(r.Model),
		Turns: uint32(max(r.Turns, 0)), MissingWork: us(r.MissingWork), NextRoundGuidance: u(r.NextRoundGuidance),
		Warnings: us(r.Warnings), Confidence: r.Confidence,
		Usage: &pluginv1.Usage{PromptTokens: uint32(max(r.Tokens.Prompt, 0)), CompletionTokens: uint32(max(r.Tokens.Completion, 0))},
	}
	switch r.Decision {
	case gated.DecisionApprove:
		out.Decision = pluginv1.Decision_DECISION_APPROVE
	case gated.DecisionReject:
		out.Decision = pluginv1.Decision_DECISION_REJECT
	}
	for _, g := range r.Gates {
		out.Gates = append(out.Gates, &pluginv1.Gate{Name: u(g.Name), Passed: g.Passed, Detail: u(g.Detail)})
	}
	for _, c := range r.Criteria {
		out.Criteria = append(out.Criteria, &pluginv1.CriterionResult{Id: u(c.ID), Pass: c.Pass, Confidence: c.Confidence, Reason: u(c.Reason), Refs: us(c.Refs)})
	}
	for _, c := range r.Comments {
		out.Comments = append(out.Comments, &pluginv1.Comment{Path: u(c.Path), Line: lineToWire(c.Line), Body: u(c.Body)})
	}
	return out
}

// lineToWire encodes a comment's line: nil, and a line that is not a
// line number (below 1, or beyond uint32), go as absent: a comment on the
// file as a whole.
func lineToWire(l *int) *uint32 {
	if l == nil || *l < 1 || uint64(*l) > math.MaxUint32 {
		return nil
	}
	n := uint32(*l)
	return &n
}

// helpAsked reports whether a person ran the plugin to ask what it is:
// one argument, -h, -help or --help, and no handshake cookie from gated.
// A plugin gated starts is never taken for one, whatever its arguments.
func helpAsked(args []string, lookupEnv func(string) (string, bool)) bool {
	if v, ok := lookupEnv(wire.Handshake.MagicCookieKey); ok && v == wire.Handshake.MagicCookieValue {
		return false
	}
	if len(args) != 1 {
		return false
	}
	switch args[0] {
	case "-h", "-help", "--help":
		return true
	}
	return false
}

// printHelp tells a person what the plugin is and how gated runs it.
func printHelp(w io.Writer, r Reviewer) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	what := "this program"
	if d, err := r.Describe(ctx); err == nil && d.Name != "" {
		what = strings.TrimSpace(d.Name + " " + d.Version)
	}
	fmt.Fprintf(w, `%s is a reviewer plugin for gated. gated starts it and talks to it
over gRPC; it is not meant to be run by hand. To use it, put the executable
in a plugin directory DIR, then:

  gated plugins test DIR/NAME     # the conformance checks
  gated plugins lock DIR          # pin its SHA-256 in DIR/gated-plugins.lock
  gated serve --plugins-dir DIR   # personas name it as plugin NAME, its file name
`, what)
}
