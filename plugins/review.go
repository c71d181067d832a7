package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/telemetry"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/plugins/pluginv1"
)

// route is a Reviewer bound to one persona on one plugin process.
type route struct {
	proc       *process
	basePrompt string
}

// Review implements engine.Reviewer. With tracing on, the review RPC has
// a span of its own, whose context goes to the plugin in the call's gRPC
// metadata; the host's review observer hears every review's latency.
//
// A review that fails returns an *engine.ReviewError that says how it
// failed, with what went wrong in full (a plugin's panic and its stack,
// its own error text), which is logged here: the engine puts gated's
// words in the verdict and the error in the audit record only.
func (r *route) Review(ctx context.Context, req engine.ReviewRequest) (res engine.ReviewResult, err error) {
	ctx, span := telemetry.Start(ctx, telemetry.SpanReview, telemetry.KindClient)
	start := time.Now()
	defer func() { r.proc.host.reviewed(span, r.proc.spec.Name, req, start, err) }()
	res, err = r.review(ctx, &req)
	if err != nil {
		err = r.failed(&req, err)
	}
	return res, err
}

// failed logs a review that failed with err and returns err as an
// *engine.ReviewError naming the plugin, as the host configured it.
func (r *route) failed(req *engine.ReviewRequest, err error) error {
	var re *engine.ReviewError
	if !errors.As(err, &re) {
		failure := engine.FailureUnknown
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			failure = engine.FailureTimeout
		case errors.Is(err, engine.ErrNoReviewer):
			failure = engine.FailureUnavailable
		}
		re = &engine.ReviewError{Plugin: r.proc.spec.Name, Failure: failure, Err: err}
	}
	fields := []zap.Field{zap.String("review_id", req.ReviewID), zap.String("failure", string(re.Failure)), zap.Error(re)}
	if req.Persona != nil {
		fields = append(fields, zap.String("persona", req.Persona.Name))
	}
	if p := req.Proposal; p != nil {
		fields = append(fields, zap.String("tenant", p.Tenant), zap.String("proposal_id", p.ID))
	}
	r.proc.log.Warn("review failed", fields...)
	return re
}

// review calls the plugin. Its frame waits on the plugin's answer for the
// whole review, and a review in flight keeps its goroutine's stack: the
// request is passed by pointer and the answer read in result, so that
// neither is held in that frame.
func (r *route) review(ctx context.Context, req *engine.ReviewRequest) (engine.ReviewResult, error) {
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
		return engine.ReviewResult{}, p.callFailed(ctx, life, client, pid, err)
	}
	return result(out, desc, pid, p.spec.Name), nil
}

// exitWait is how long a review whose connection broke waits to see the
// plugin's process exit, so that its failure names the exit: the stream
// breaks a moment before go-plugin has reaped the process.
const exitWait = time.Second

// sdkPanicked opens the error the SDK's Serve fails a review with when
// the reviewer panicked (sdk.recoverInto), before the panic and its stack.
const sdkPanicked = "reviewer panicked: "

// callFailed reads how the review call on the launch of this plugin
// (client, pid, life) failed with err: the review's own deadline or
// cancellation, as the engine reads them, or an *engine.ReviewError that
// says how the plugin failed.
func (p *process) callFailed(ctx, life context.Context, client *plugin.Client, pid int, err error) error {
	name := p.spec.Name
	if ctx.Err() != nil {
		return fmt.Errorf("plugin %q: %w", name, ctx.Err())
	}
	if deadlineReached(ctx, err) {
		return fmt.Errorf("plugin %q: %w", name, context.DeadlineExceeded)
	}
	failed := func(f engine.ReviewFailure, err error) error {
		return &engine.ReviewError{Plugin: name, Failure: f, Err: err}
	}
	code := status.Code(err)
	if code == codes.Unavailable {
		waitExited(ctx, life, client, exitWait)
	}
	var ended *launchEnd
	switch cause := context.Cause(life); {
	case life.Err() != nil && errors.As(cause, &ended):
		return failed(ended.failure, fmt.Errorf("review failed: %w", cause))
	case life.Err() != nil:
		return failed(engine.FailureCrashed, fmt.Errorf("review failed: %w", cause))
	case client.Exited():
		return failed(engine.FailureCrashed, fmt.Errorf("plugin %q (pid %d) exited during the review: %w", name, pid, err))
	}
	switch {
	case code == codes.Unavailable:
		return failed(engine.FailureCrashed, fmt.Errorf("plugin %q (pid %d): the connection broke during the review: %w", name, pid, err))
	case code == codes.ResourceExhausted || code == codes.Internal:
		// gRPC's own errors for an answer too large, or one that does
		// not encode or decode.
		return failed(engine.FailureUnusableAnswer, fmt.Errorf("plugin %q: %w", name, err))
	case code == codes.Unknown && strings.HasPrefix(status.Convert(err).Message(), sdkPanicked):
		return failed(engine.FailureCrashed, fmt.Errorf("plugin %q: %w", name, err))
	}
	return failed(engine.FailureReported, fmt.Errorf("plugin %q: %w", name, err))
}

// waitExited waits up to d for client's process to be seen exited or for
// its launch to end, whichever comes first, unless ctx ends before.
func waitExited(ctx, life context.Context, client *plugin.Client, d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !client.Exited() && life.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

// result is the engine's reading of a plugin's answer, bounded. It names
// the plugin by name, the name gated's configuration gives it, never by
// the name its Describe reports: a plugin may call itself anything. The
// version it describes and the model it reports stay what it said; the
// engine keeps one short line of each (engine.Judge).
func result(out *pluginv1.ReviewResponse, desc *pluginv1.DescribeResponse, pid int, name string) engine.ReviewResult {
	res := engine.ReviewResult{
		Plugin: name, PluginVersion: desc.GetVersion(), PID: pid,
		Model: out.GetModel(), Text: out.GetText(), SOPID: out.GetSopId(),
		RollbackPath: out.GetRollbackPath(), Notes: out.GetNotes(), Turns: int(out.GetTurns()),
		MissingWork: out.GetMissingWork(), NextRoundGuidance: out.GetNextRoundGuidance(),
		Warnings: out.GetWarnings(), Confidence: out.GetConfidence(),
		Tokens: gated.Tokens{Prompt: int(out.GetUsage().GetPromptTokens()), Completion: int(out.GetUsage().GetCompletionTokens())},
	}
	switch out.GetDecision() {
	case pluginv1.Decision_DECISION_APPROVE:
		res.Decision = gated.DecisionApprove
	default:
		res.Decision = gated.DecisionReject
	}
	if gates := out.GetGates(); len(gates) > 0 {
		res.Gates = make([]gated.GateResult, 0, len(gates))
		for _, g := range gates {
			res.Gates = append(res.Gates, gated.GateResult{Name: g.GetName(), Passed: g.GetPassed(), Detail: g.GetDetail()})
		}
	}
	for _, c := range out.GetCriteria() {
		res.Criteria = append(res.Criteria, gated.CriterionEval{ID: c.GetId(), Pass: c.GetPass(), Confidence: c.GetConfidence(), Reason: c.GetReason(), Refs: c.GetRefs()})
	}
	for _, c := range out.GetComments() {
		res.Comments = append(res.Comments, gated.Comment{Path: c.GetPath(), Line: commentLine(c), Body: c.GetBody()})
	}
	bound(&res)
	return res
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
// decision text (gated.MaxDecisionTextBytes). Anything over is cut and
// the cut is noted, in the notes and as the first warning; a required gate
// cut off counts as not reported, so a bound can only ever turn an
// approval into a rejection. The bounds on run review output are the
// ceilings of gated.RunLimits, so that the engine, not the host, applies
// the limits a policy sets.
const (
	maxFieldBytes    = 16 << 10
	maxListItems     = 64
	maxRunItems      = gated.CeilingRunMaxItems
	maxRunItemBytes  = gated.CeilingRunMaxItemBytes
	maxGuidanceBytes = gated.CeilingRunMaxGuidanceBytes
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

func (r *route) request(req *engine.ReviewRequest) (*pluginv1.ReviewRequest, error) {
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

// commentLine reads a comment's line: absent, or 0 (lines count from 1),
// is a comment on the file as a whole, as is a line int cannot hold.
func commentLine(c *pluginv1.Comment) *int {
	if c.Line == nil || *c.Line == 0 || uint64(*c.Line) > math.MaxInt {
		return nil
	}
	n := int(*c.Line)
	return &n
}
