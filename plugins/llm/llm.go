// Package llm is gated's bundled model reviewer (`gated plugin run llm`).
// It runs the persona's model through langchaingo — OpenAI, Anthropic,
// Ollama, or any OpenAI-compatible server such as vLLM or the llama.cpp
// server — in a bounded tool loop over the tools gated brokers, and
// answers in the decision format the host reads.
//
// The reviewer has no authority of its own. The host reads the decision
// line, checks the required gates and the tool bag; this package only
// makes sure that what it returns is bounded, well formed when the model
// was, and a rejection in every other case.
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/tmc/langchaingo/llms"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/telemetry"
	"github.com/gated/gated/plugins/sdk"
)

// Name is the plugin name the bundled reviewer runs under.
const Name = "llm"

// Bounds on what the reviewer feeds back to the model.
const (
	// maxToolResultBytes bounds one tool result in the conversation.
	maxToolResultBytes = 64 << 10
	// maxEchoBytes bounds an unreadable answer quoted back for repair, or
	// in a rejection's notes.
	maxEchoBytes = 2 << 10
	// maxRunEchoBytes bounds an unreadable answer to a run review quoted
	// back for repair: enough to keep its ```json block.
	maxRunEchoBytes = 16 << 10
)

// Reviewer is the LLM reviewer. It is safe for concurrent reviews.
type Reviewer struct {
	cfg Config

	// models holds the clients opened so far, by the persona's model
	// spec: a client is safe for concurrent calls, and its connections
	// outlive one review.
	mu     sync.Mutex
	models map[string]*backend
}

var _ sdk.Reviewer = (*Reviewer)(nil)

// New returns a reviewer for cfg. It checks nothing and contacts no one:
// a provider's key and address are needed only when a review uses it, so
// the plugin starts on a machine with none configured.
func New(cfg Config) *Reviewer {
	if cfg.TurnTimeout <= 0 {
		cfg.TurnTimeout = DefaultTurnTimeout
	}
	if cfg.MaxTurns <= 0 {
		cfg.MaxTurns = DefaultMaxTurns
	}
	if cfg.MaxOutputTokens <= 0 {
		cfg.MaxOutputTokens = DefaultMaxOutputTokens
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = newHTTPClient()
	}
	return &Reviewer{cfg: cfg, models: map[string]*backend{}}
}

// maxModels bounds the clients a reviewer keeps open; past it the map is
// emptied and clients are opened anew.
const maxModels = 64

// open returns the client of a model spec, opening it on first use.
// Errors are not kept: a spec refused now is checked again next time.
func (r *Reviewer) open(spec string) (*backend, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if be, ok := r.models[spec]; ok {
		return be, nil
	}
	be, err := r.cfg.open(spec)
	if err != nil {
		return nil, err
	}
	if len(r.models) >= maxModels {
		clear(r.models)
	}
	r.models[spec] = be
	return be, nil
}

// Describe implements sdk.Reviewer. Models lists the providers this
// configuration has a key and address for.
func (r *Reviewer) Describe(context.Context) (sdk.Description, error) {
	return sdk.Description{Name: Name, Version: r.cfg.Version, Models: r.cfg.providers(), MaxConcurrency: 16}, nil
}

// Review implements sdk.Reviewer. It returns an error, never an approval,
// when the persona's model cannot be reached: ErrNoModel,
// ErrUnknownProvider, ErrMissingAPIKey or ErrMissingBaseURL before any
// call; a provider's failure as it came (keys removed); and
// context.DeadlineExceeded or context.Canceled when the review's context
// ends, whatever error the provider client made of it.
//
// A model that keeps calling tools until max_turns, or whose answer stays
// unreadable after one repair turn, gets a rejection that says so. A run
// review (req.Run set) gets an error instead, ErrMaxTurns or
// ErrUnreadableAnswer: a rejection of a run must say what the worker has
// to do, and a reviewer that reached no decision cannot say that.
//
// A run review's answer carries a ```json block after the decision
// format (see parseRunAnswer); it fills the response's Criteria,
// Comments, MissingWork, NextRoundGuidance and Warnings.
func (r *Reviewer) Review(ctx context.Context, req *sdk.Request) (*sdk.Response, error) {
	if req.Deadline.UnixMilli() > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, req.Deadline)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	be, err := r.open(req.Persona.Model)
	if err != nil {
		return nil, err
	}
	tools, err := toolDefs(req.Persona.Tools)
	if err != nil {
		return nil, err
	}
	opts := append([]llms.CallOption{llms.WithMaxTokens(r.cfg.MaxOutputTokens), llms.WithTemperature(0)}, be.extra...)
	if len(tools) > 0 {
		opts = append(opts, llms.WithTools(tools))
	}
	maxTurns := req.Persona.MaxTurns
	if maxTurns <= 0 {
		maxTurns = r.cfg.MaxTurns
	}
	s := &session{
		cfg: &r.cfg, be: be, req: req, opts: opts, maxTurns: maxTurns,
		res: &sdk.Response{Model: req.Persona.Model},
	}
	if req.Persona.SystemPrompt != "" {
		s.msgs = append(s.msgs, llms.TextParts(llms.ChatMessageTypeSystem, req.Persona.SystemPrompt))
	}
	var brief string
	if req.Run != nil {
		brief, s.res.Warnings = runBriefing(req)
	} else {
		brief = briefing(req)
	}
	s.msgs = append(s.msgs, llms.TextParts(llms.ChatMessageTypeHuman, brief))
	return s.run(ctx)
}

// session is one review's conversation with the model.
type session struct {
	cfg      *Config
	be       *backend
	req      *sdk.Request
	opts     []llms.CallOption
	maxTurns int
	msgs     []llms.MessageContent
	res      *sdk.Response
}

func (s *session) run(ctx context.Context) (*sdk.Response, error) {
	repaired := false
	for s.res.Turns < s.maxTurns {
		text, calls, err := s.call(ctx)
		if err != nil {
			return nil, err
		}
		if len(calls) > 0 {
			if s.res.Turns >= s.maxTurns {
				break // no turn left to read the results
			}
			if err := s.runTools(ctx, calls); err != nil {
				return nil, err
			}
			continue
		}
		ans, perr := s.parse(text)
		if perr == nil {
			s.accept(text, ans)
			return s.res, nil
		}
		if repaired || s.res.Turns >= s.maxTurns {
			why := "after one repair turn"
			if !repaired {
				why = "and no turn was left for a repair"
			}
			began := jsonString(clip(strings.TrimSpace(text), maxEchoBytes))
			if s.req.Run != nil {
				return nil, fmt.Errorf("%w as a run review %s: %s; it began: %s", ErrUnreadableAnswer, why, perr, began)
			}
			return s.reject(fmt.Sprintf("The model's answer could not be read as a decision %s (%s), so this is a rejection. It began: %s",
				why, perr, began)), nil
		}
		repaired = true
		echo, want := clip(text, maxEchoBytes), format(s.req.Persona.RequiredGates)
		if s.req.Run != nil {
			echo, want = clip(text, maxRunEchoBytes), runFormat(s.req.Persona.RequiredGates, s.req.Run.AIReview)
		}
		s.msgs = append(s.msgs,
			llms.TextParts(llms.ChatMessageTypeAI, orDefault(echo, "(no text)")),
			llms.TextParts(llms.ChatMessageTypeHuman, repairRequest(perr.Error(), want)))
	}
	if s.req.Run != nil {
		return nil, fmt.Errorf("%w: the model was still calling tools after %d model calls, so the run review reached no decision", ErrMaxTurns, s.res.Turns)
	}
	return s.reject(fmt.Sprintf("max_turns exhausted: the model was still calling tools after %d model calls, so no decision was reached and this is a rejection.", s.res.Turns)), nil
}

// parse reads the model's final text: in the decision format, and for a
// run review with its ```json block.
func (s *session) parse(text string) (answer, error) {
	if s.req.Run != nil {
		return parseRunAnswer(text, rulesFor(s.req))
	}
	return parseAnswer(text)
}

// accept fills the response from a readable answer. Warnings the
// reviewer made itself (what the model was not shown) come first.
func (s *session) accept(text string, a answer) {
	s.res.Text, s.res.Decision, s.res.Gates, s.res.Notes = text, a.decision, a.gates, a.notes
	if r := a.run; r != nil {
		s.res.Criteria, s.res.Comments = r.criteria, r.comments
		s.res.MissingWork, s.res.NextRoundGuidance = r.missingWork, r.guidance
		s.res.Warnings = append(s.res.Warnings, r.warnings...)
	}
}

// call makes one model call within the turn's deadline and returns the
// model's text and tool calls. Usage is added to the response. With
// tracing on, the call has a span of its own: the model's name and the
// turn, never the prompt or the answer.
func (s *session) call(ctx context.Context) (text string, calls []llms.ToolCall, err error) {
	ctx, span := telemetry.Start(ctx, telemetry.SpanLLMCall, telemetry.KindClient)
	defer func() {
		if span.Recording() {
			span.String(telemetry.AttrModel, s.req.Persona.Model)
			span.Int(telemetry.AttrTurn, int64(s.res.Turns))
		}
		span.End(err)
	}()
	return s.callModel(ctx)
}

func (s *session) callModel(ctx context.Context) (string, []llms.ToolCall, error) {
	tctx, cancel := context.WithTimeout(ctx, s.cfg.TurnTimeout)
	defer cancel()
	s.res.Turns++
	resp, err := s.be.model.GenerateContent(tctx, s.msgs, s.opts...)
	if err != nil {
		// The clients hide the context's error behind their own words; the
		// host needs it to tell a timeout from a failure.
		if cerr := ctx.Err(); cerr != nil {
			return "", nil, fmt.Errorf("model call %d: %w", s.res.Turns, cerr)
		}
		if errors.Is(tctx.Err(), context.DeadlineExceeded) {
			return "", nil, fmt.Errorf("model call %d ran past the %s per-call limit: %w", s.res.Turns, s.cfg.TurnTimeout, context.DeadlineExceeded)
		}
		return "", nil, fmt.Errorf("model call %d to %s: %s", s.res.Turns, s.req.Persona.Model, s.cfg.scrub(err.Error()))
	}
	var texts []string
	var calls []llms.ToolCall
	var prompt, completion int
	for _, c := range resp.Choices {
		if c == nil {
			continue
		}
		if c.Content != "" {
			texts = append(texts, c.Content)
		}
		calls = append(calls, c.ToolCalls...)
		// One call's usage: Anthropic repeats it on every content block.
		prompt = max(prompt, intInfo(c.GenerationInfo, "PromptTokens"), intInfo(c.GenerationInfo, "InputTokens"))
		completion = max(completion, intInfo(c.GenerationInfo, "CompletionTokens"), intInfo(c.GenerationInfo, "OutputTokens"))
	}
	s.res.Tokens.Prompt += prompt
	s.res.Tokens.Completion += completion
	return strings.Join(texts, "\n"), calls, nil
}

// runTools runs the model's tool calls through gated, one at a time, and
// adds each call and its result to the conversation. Each call gets its
// own assistant message, the one shape both providers' clients carry
// faithfully. A refused call is reported to the model as refused; it is
// never retried another way.
func (s *session) runTools(ctx context.Context, calls []llms.ToolCall) error {
	for i, tc := range calls {
		if tc.FunctionCall == nil {
			continue
		}
		if tc.ID == "" {
			tc.ID = fmt.Sprintf("call_%d_%d", s.res.Turns, i)
		}
		tc.Type = "function"
		name := tc.FunctionCall.Name
		args := strings.TrimSpace(tc.FunctionCall.Arguments)
		if args == "" {
			args = "{}"
		}
		var obj map[string]any
		objectArgs := json.Unmarshal([]byte(args), &obj) == nil && obj != nil
		content, err := s.callTool(ctx, name, args)
		if err != nil {
			return err
		}
		echo := args
		if !objectArgs {
			echo = "{}" // what a provider accepts back; the result says what was wrong
		}
		tc.FunctionCall = &llms.FunctionCall{Name: name, Arguments: echo}
		s.msgs = append(s.msgs,
			llms.MessageContent{Role: llms.ChatMessageTypeAI, Parts: []llms.ContentPart{tc}},
			llms.MessageContent{Role: llms.ChatMessageTypeTool, Parts: []llms.ContentPart{
				llms.ToolCallResponse{ToolCallID: tc.ID, Name: name, Content: content},
			}})
	}
	return nil
}

// callTool runs one call through gated and returns what the model is told.
// Only the end of the review's context is an error: a refusal or a failed
// tool is the model's information.
func (s *session) callTool(ctx context.Context, name, args string) (string, error) {
	out, err := s.req.CallTool(ctx, name, json.RawMessage(args))
	switch {
	case err == nil:
		if len(out) > maxToolResultBytes {
			return toolNote(false, fmt.Sprintf("the result was %d bytes; only the first %d are shown", len(out), maxToolResultBytes), clip(string(out), maxToolResultBytes)), nil
		}
		return string(out), nil
	case ctx.Err() != nil:
		return "", fmt.Errorf("calling tool %q: %w", name, ctx.Err())
	case errors.Is(err, sdk.ErrToolDenied), errors.Is(err, sdk.ErrNoTools):
		return toolNote(true, err.Error()+". Treat the evidence as missing; do not try to obtain it another way.", ""), nil
	default:
		return toolNote(false, err.Error()+". Treat the evidence as missing.", ""), nil
	}
}

// toolNote is a tool result that gated wrote instead of the tool.
func toolNote(refused bool, msg, partial string) string {
	v := map[string]any{"gated": msg}
	if refused {
		v["refused"] = true
	}
	if partial != "" {
		v["partial_result"] = partial
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// reject returns the rejection the reviewer writes itself when the model
// gave no usable decision.
func (s *session) reject(notes string) *sdk.Response {
	s.res.Decision = gated.DecisionReject
	s.res.Notes = notes
	s.res.Text = "Decision: reject\nNotes: " + notes + "\n"
	return s.res
}

// toolDefs turns the tool bag into the model's tool list.
func toolDefs(tools []sdk.Tool) ([]llms.Tool, error) {
	out := make([]llms.Tool, 0, len(tools))
	for _, t := range tools {
		var schema map[string]any
		if strings.TrimSpace(t.InputSchema) != "" {
			if err := json.Unmarshal([]byte(t.InputSchema), &schema); err != nil {
				return nil, fmt.Errorf("tool %q: input schema is not a JSON object: %w", t.Name, err)
			}
		}
		if schema == nil {
			schema = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		out = append(out, llms.Tool{Type: "function", Function: &llms.FunctionDefinition{
			Name: t.Name, Description: t.Description, Parameters: schema,
		}})
	}
	return out, nil
}

// intInfo reads a token count from a choice's GenerationInfo.
func intInfo(info map[string]any, key string) int {
	switch v := info[key].(type) {
	case int:
		return v
	case int32:
		return int(v)
	case int64:
		return int(v)
	case float64:
		return int(v)
	}
	return 0
}
