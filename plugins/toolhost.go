package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/plugins/pluginv1"
	"github.com/gated/gated/plugins/sdk"
)

// Built-in read tools the host answers itself.
const (
	toolGetSOPText        = sdk.ToolGetSOPText
	toolGetVerdictHistory = sdk.ToolGetVerdictHistory
	toolGetProposal       = sdk.ToolGetProposal
)

const (
	DefaultToolCallTimeout = 10 * time.Second
	// maxToolArgsBytes and maxToolResultBytes bound one tool call.
	maxToolArgsBytes   = 64 << 10
	maxToolResultBytes = 1 << 20
)

// ToolConfig says how the host answers the tool calls of reviewers.
type ToolConfig struct {
	// Forward runs a tool that is not built in, by a request on
	// gated.tools.<name>. Nil means only the built-in tools exist.
	Forward func(ctx context.Context, name string, req ToolRequest) ([]byte, error)
	// SOP finds a catalog entry by id for get_sop_text. Nil limits
	// get_sop_text to the SOP that covers the proposal.
	SOP func(id string) (*gated.SOP, bool)
	// Describe gives a catalog tool's description and JSON schema for the
	// reviewer's tool list. Nil, or ok false, gives a bare object schema.
	Describe func(name string) (description, schema string, ok bool)
	// CallTimeout bounds one call; it never outlives the review.
	// Default DefaultToolCallTimeout.
	CallTimeout time.Duration
}

// ToolRequest is what a forwarded tool call carries: the call's arguments
// and the review it belongs to, so a tool service can scope its answer to
// the tenant.
type ToolRequest struct {
	Tenant     string          `json:"tenant"`
	ProposalID string          `json:"proposal_id"`
	Action     string          `json:"action"`
	ReviewID   string          `json:"review_id"`
	Tool       string          `json:"tool"`
	Args       json.RawMessage `json:"args"`
}

// validToolName tells whether name is what a tool may be called: 1 to 128
// ASCII letters, digits, '_' and '-'. It becomes a subject token.
func validToolName(name string) bool {
	if len(name) == 0 || len(name) > 128 {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// liveReview is a review in flight: the only reviews whose tools may be
// called, and only with the tools of their own bag.
type liveReview struct {
	plugin  string
	req     engine.ReviewRequest
	allowed map[string]bool

	mu     sync.Mutex
	closed bool
	calls  sync.WaitGroup
}

// enter marks a call in flight; it fails once the review is over, so no
// tool event is recorded after the review's trail is sealed.
func (lr *liveReview) enter() bool {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if lr.closed {
		return false
	}
	lr.calls.Add(1)
	return true
}

// close ends the review and waits for its calls still running.
func (lr *liveReview) close() {
	lr.mu.Lock()
	lr.closed = true
	lr.mu.Unlock()
	lr.calls.Wait()
}

// reviews indexes the live reviews by id.
type reviews struct {
	mu sync.Mutex
	m  map[string]*liveReview
}

func (rs *reviews) add(plugin string, req *engine.ReviewRequest) (*liveReview, error) {
	lr := &liveReview{plugin: plugin, req: *req, allowed: make(map[string]bool, len(req.Tools))}
	for _, t := range req.Tools {
		lr.allowed[t] = true
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.m == nil {
		rs.m = map[string]*liveReview{}
	}
	if _, dup := rs.m[req.ReviewID]; dup || req.ReviewID == "" {
		return nil, fmt.Errorf("review id %q is empty or already in use", req.ReviewID)
	}
	rs.m[req.ReviewID] = lr
	return lr, nil
}

func (rs *reviews) remove(lr *liveReview) {
	rs.mu.Lock()
	delete(rs.m, lr.req.ReviewID)
	rs.mu.Unlock()
	lr.close()
}

func (rs *reviews) get(id string) *liveReview {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.m[id]
}

// toolHost serves ToolHost to one plugin process through its broker.
type toolHost struct {
	pluginv1.UnimplementedToolHostServer
	plugin  string
	reviews *reviews
	cfg     *ToolConfig
}

// CallTool checks that the review is live and belongs to this plugin and
// that the tool is in the review's bag, records the call on the proposal's
// audit trail, and runs it within the call timeout and the review deadline.
func (th *toolHost) CallTool(ctx context.Context, in *pluginv1.CallToolRequest) (*pluginv1.CallToolResponse, error) {
	lr := th.reviews.get(in.GetReviewId())
	// A review of another plugin is as unknown to this one as a made-up id.
	if lr == nil || lr.plugin != th.plugin || !lr.enter() {
		return nil, status.Errorf(codes.PermissionDenied, "review %q is not in progress on plugin %q", clipString(in.GetReviewId(), 64), th.plugin)
	}
	defer lr.calls.Done()
	name, args := in.GetName(), in.GetArgsJson()
	sum := sha256.Sum256(args)
	base := map[string]any{
		"review_id": lr.req.ReviewID, "plugin": th.plugin, "tool": clipString(name, 128),
		"args_sha256": hex.EncodeToString(sum[:]), "args_bytes": len(args),
	}
	deny := func(code codes.Code, why string) error {
		base["why"] = why
		lr.audit(ctx, gated.EventToolDenied, base)
		return status.Error(code, why)
	}
	switch {
	case !validToolName(name):
		return nil, deny(codes.InvalidArgument, fmt.Sprintf("tool name %q is not a valid tool name", clipString(name, 128)))
	case !lr.allowed[name]:
		return nil, deny(codes.PermissionDenied, fmt.Sprintf("tool %q is not in this review's tool bag", name))
	case len(args) > maxToolArgsBytes:
		return nil, deny(codes.InvalidArgument, fmt.Sprintf("arguments are %d bytes, over the %d byte limit", len(args), maxToolArgsBytes))
	}
	if len(args) == 0 {
		args = []byte("{}")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(args, &obj); err != nil {
		return nil, deny(codes.InvalidArgument, "arguments must be a JSON object: "+err.Error())
	}

	started := time.Now()
	cctx, cancel := context.WithDeadline(ctx, callDeadline(started, th.cfg.CallTimeout, lr.req.Deadline))
	defer cancel()
	out, err := th.run(cctx, lr, name, args, obj)
	if err == nil && len(out) > maxToolResultBytes {
		err = fmt.Errorf("tool %q answered %d bytes, over the %d byte limit", name, len(out), maxToolResultBytes)
	}
	if err == nil && !json.Valid(out) {
		err = fmt.Errorf("tool %q answered something that is not JSON", name)
	}
	base["latency_ms"] = float64(time.Since(started).Microseconds()) / 1000
	if err != nil {
		base["error"] = err.Error()
		lr.audit(ctx, gated.EventToolCalled, base)
		code := codes.Unavailable
		switch {
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(cctx.Err(), context.DeadlineExceeded):
			code = codes.DeadlineExceeded
		case errors.Is(err, errNotFound):
			code = codes.NotFound
		case errors.Is(err, errBadArgs):
			code = codes.InvalidArgument
		}
		return nil, status.Error(code, err.Error())
	}
	base["result_bytes"] = len(out)
	lr.audit(ctx, gated.EventToolCalled, base)
	return &pluginv1.CallToolResponse{ResultJson: out}, nil
}

// callDeadline is when a tool call that starts at now must end: after the
// call timeout (DefaultToolCallTimeout when not set), and never after the
// review's deadline, when it has one.
func callDeadline(now time.Time, timeout time.Duration, review time.Time) time.Time {
	if timeout <= 0 {
		timeout = DefaultToolCallTimeout
	}
	d := now.Add(timeout)
	if !review.IsZero() && review.Before(d) {
		d = review
	}
	return d
}

var (
	errNotFound = errors.New("not found")
	errBadArgs  = errors.New("bad arguments")
)

func (lr *liveReview) audit(ctx context.Context, event string, data map[string]any) {
	if lr.req.Audit != nil {
		lr.req.Audit(context.WithoutCancel(ctx), event, data)
	}
}

// run answers one allowed call.
func (th *toolHost) run(ctx context.Context, lr *liveReview, name string, args []byte, obj map[string]json.RawMessage) ([]byte, error) {
	req := lr.req
	switch name {
	case toolGetProposal:
		return req.ProposalJSON, nil
	case toolGetVerdictHistory:
		history := req.History
		if history == nil {
			history = []gated.Verdict{}
		}
		return json.Marshal(history)
	case toolGetSOPText:
		return th.sopText(req, obj)
	}
	if th.cfg.Forward == nil {
		return nil, fmt.Errorf("tool %q has no provider: gated answers only %s, %s and %s itself", name, toolGetSOPText, toolGetVerdictHistory, toolGetProposal)
	}
	var tenant, id, action string
	if p := req.Proposal; p != nil {
		tenant, id, action = p.Tenant, p.ID, p.Action
	}
	// The time limit holds even for a provider that ignores ctx.
	type answer struct {
		out []byte
		err error
	}
	done := make(chan answer, 1)
	go func() {
		out, err := th.cfg.Forward(ctx, name, ToolRequest{
			Tenant: tenant, ProposalID: id, Action: action, ReviewID: req.ReviewID, Tool: name, Args: args,
		})
		done <- answer{out, err}
	}()
	select {
	case a := <-done:
		return a.out, a.err
	case <-ctx.Done():
		return nil, fmt.Errorf("tool %q: %w", name, ctx.Err())
	}
}

// sopText answers get_sop_text: {"id": "SOP-001"}, or no id for the SOP
// that covers the proposal.
func (th *toolHost) sopText(req engine.ReviewRequest, obj map[string]json.RawMessage) ([]byte, error) {
	var id string
	if raw, ok := obj["id"]; ok {
		if err := json.Unmarshal(raw, &id); err != nil {
			return nil, fmt.Errorf("%w: id must be a string", errBadArgs)
		}
	}
	var sop *gated.SOP
	switch {
	case id == "" && req.SOP == nil:
		return nil, fmt.Errorf("%w: no SOP covers this proposal's action", errNotFound)
	case id == "" || (req.SOP != nil && req.SOP.ID == id):
		sop = req.SOP
	case th.cfg.SOP != nil:
		if s, ok := th.cfg.SOP(id); ok {
			sop = s
		}
	}
	if sop == nil {
		return nil, fmt.Errorf("%w: the SOP catalog has no %q", errNotFound, id)
	}
	return json.Marshal(sopAnswer{
		Actions: sop.Actions, ID: sop.ID, Rollback: sop.Rollback,
		Steps: sop.Steps, Text: renderSOP(sop), Title: sop.Title,
	})
}

// sopAnswer is get_sop_text's answer. Its fields are in the order of
// their JSON names, so it encodes as the same object with its keys sorted.
type sopAnswer struct {
	Actions  []string `json:"actions"`
	ID       string   `json:"id"`
	Rollback string   `json:"rollback"`
	Steps    []string `json:"steps"`
	Text     string   `json:"text"`
	Title    string   `json:"title"`
}

// renderSOP writes an SOP as markdown, the form a model reads best.
func renderSOP(s *gated.SOP) string {
	rollback := s.Rollback
	if rollback == "" {
		rollback = "none written"
	}
	n := len(s.ID) + len(s.Title) + len(rollback) + 32
	for _, a := range s.Actions {
		n += len(a) + 2
	}
	for _, st := range s.Steps {
		n += len(st) + 8
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString("# ")
	b.WriteString(s.ID)
	b.WriteString(": ")
	b.WriteString(s.Title)
	b.WriteString("\n\n")
	if len(s.Actions) > 0 {
		b.WriteString("Covers: ")
		for i, a := range s.Actions {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(a)
		}
		b.WriteString("\n\n")
	}
	if len(s.Steps) > 0 {
		b.WriteString("Steps:\n")
		for i, st := range s.Steps {
			b.WriteString(strconv.Itoa(i + 1))
			b.WriteString(". ")
			b.WriteString(st)
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	b.WriteString("Rollback: ")
	b.WriteString(rollback)
	b.WriteString("\n")
	return b.String()
}

// toolSpecs gives the reviewer its tool list with descriptions and
// argument schemas.
func toolSpecs(cfg *ToolConfig, names []string) []*pluginv1.Tool {
	out := make([]*pluginv1.Tool, 0, len(names))
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		t := &pluginv1.Tool{Name: n, InputSchemaJson: `{"type":"object"}`}
		switch n {
		case toolGetSOPText:
			t.Description = "The full text of a standard operating procedure. Without an id, the SOP that covers the proposal's action."
			t.InputSchemaJson = `{"type":"object","properties":{"id":{"type":"string","description":"SOP id, e.g. SOP-001"}},"additionalProperties":false}`
		case toolGetVerdictHistory:
			t.Description = "Recent approved verdicts on the same tenant and target, oldest first."
			t.InputSchemaJson = `{"type":"object","properties":{},"additionalProperties":false}`
		case toolGetProposal:
			t.Description = "The proposal under review, exactly as the agent published it."
			t.InputSchemaJson = `{"type":"object","properties":{},"additionalProperties":false}`
		}
		if cfg.Describe != nil {
			if d, s, ok := cfg.Describe(n); ok {
				if d != "" {
					t.Description = d
				}
				if s != "" {
					t.InputSchemaJson = s
				}
			}
		}
		out = append(out, t)
	}
	return out
}

func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
