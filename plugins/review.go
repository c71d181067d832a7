package plugins

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
func (r *route) Review(ctx context.Context, req engine.ReviewRequest) (res engine.ReviewResult, err error) {
	ctx, span := telemetry.Start(ctx, telemetry.SpanReview, telemetry.KindClient)
	start := time.Now()
	defer func() { r.proc.host.reviewed(span, r.proc.spec.Name, req, start, err) }()
	return r.review(ctx, &req)
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
	return result(out, desc, pid, p.spec.Name), nil
}

// result is the engine's reading of a plugin's answer, bounded.
func result(out *pluginv1.ReviewResponse, desc *pluginv1.DescribeResponse, pid int, name string) engine.ReviewResult {
	res := engine.ReviewResult{
		Plugin: desc.GetName(), PluginVersion: desc.GetVersion(), PID: pid,
		Model: out.GetModel(), Text: out.GetText(), SOPID: out.GetSopId(),
		RollbackPath: out.GetRollbackPath(), Notes: out.GetNotes(), Turns: int(out.GetTurns()),
		MissingWork: out.GetMissingWork(), NextRoundGuidance: out.GetNextRoundGuidance(),
		Warnings: out.GetWarnings(), Confidence: out.GetConfidence(),
		Tokens: engine.Tokens{Prompt: int(out.GetUsage().GetPromptTokens()), Completion: int(out.GetUsage().GetCompletionTokens())},
	}
	if res.Plugin == "" {
		res.Plugin = name
	}
	switch out.GetDecision() {
	case pluginv1.Decision_DECISION_APPROVE:
		res.Decision = engine.DecisionApprove
	default:
		res.Decision = engine.DecisionReject
	}
	if gates := out.GetGates(); len(gates) > 0 {
		res.Gates = make([]engine.GateResult, 0, len(gates))
		for _, g := range gates {
			res.Gates = append(res.Gates, engine.GateResult{Name: g.GetName(), Passed: g.GetPassed(), Detail: g.GetDetail()})
		}
	}
	for _, c := range out.GetCriteria() {
		res.Criteria = append(res.Criteria, engine.CriterionEval{ID: c.GetId(), Pass: c.GetPass(), Confidence: c.GetConfidence(), Reason: c.GetReason(), Refs: c.GetRefs()})
	}
	for _, c := range out.GetComments() {
		res.Comments = append(res.Comments, engine.Comment{Path: c.GetPath(), Line: commentLine(c), Body: c.GetBody()})
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
