package llm_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// The fake providers speak each provider's wire protocol — OpenAI's
// POST /v1/chat/completions and Anthropic's POST /v1/messages — and answer
// from a script, one step per model call. They check what a real provider
// would refuse (a tool result that answers no tool call, roles out of
// order), so the conversations the reviewer builds are ones the real APIs
// accept.

// call is one model call as the fake received it.
type call struct {
	Header http.Header
	Body   map[string]any
	// Raw is the request body as sent.
	Raw string
}

// messages returns the request's messages.
func (c call) messages() []map[string]any {
	var out []map[string]any
	for _, m := range asSlice(c.Body["messages"]) {
		if mm, ok := m.(map[string]any); ok {
			out = append(out, mm)
		}
	}
	return out
}

// step answers one model call: a status and a body, after an optional
// delay (cut short when the client gives up).
type step struct {
	status int
	body   any
	delay  time.Duration
}

// provider is a scripted fake model server.
type provider struct {
	t      *testing.T
	kind   string // "openai" or "anthropic"
	srv    *httptest.Server
	mu     sync.Mutex
	script []step
	calls  []call
}

func newProvider(t *testing.T, kind string, script ...step) *provider {
	t.Helper()
	p := &provider{t: t, kind: kind, script: script}
	path := "/v1/chat/completions"
	if kind == "anthropic" {
		path = "/v1/messages"
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+path, p.serve)
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

// baseURL is what the reviewer's config points at.
func (p *provider) baseURL() string { return p.srv.URL + "/v1" }

func (p *provider) recorded() []call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]call(nil), p.calls...)
}

func (p *provider) serve(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c := call{Header: r.Header.Clone(), Raw: string(raw)}
	if err := json.Unmarshal(raw, &c.Body); err != nil {
		p.t.Errorf("%s fake: request body is not JSON: %v", p.kind, err)
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	if p.kind == "anthropic" {
		err = checkAnthropicRequest(c.Body)
	} else {
		err = checkOpenAIRequest(c.Body)
	}
	if err != nil {
		p.t.Errorf("%s fake: a real provider would refuse this request: %v\n%s", p.kind, err, raw)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": err.Error()}})
		return
	}
	p.mu.Lock()
	n := len(p.calls)
	p.calls = append(p.calls, c)
	var s step
	if n < len(p.script) {
		s = p.script[n]
	}
	p.mu.Unlock()
	if s.body == nil && s.status == 0 {
		p.t.Errorf("%s fake: model call %d is beyond the script of %d", p.kind, n+1, len(p.script))
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": map[string]any{"message": "script exhausted"}})
		return
	}
	if s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-r.Context().Done():
			return
		}
	}
	writeJSON(w, max(s.status, http.StatusOK), s.body)
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// checkOpenAIRequest checks that every tool message answers a tool call of
// an earlier assistant message, once, and that tool calls are answered
// before the conversation moves on.
func checkOpenAIRequest(body map[string]any) error {
	open := map[string]bool{}
	for i, m := range asSlice(body["messages"]) {
		msg, _ := m.(map[string]any)
		role, _ := msg["role"].(string)
		switch role {
		case "tool":
			id, _ := msg["tool_call_id"].(string)
			if !open[id] {
				return fmt.Errorf("message %d: tool result for %q answers no open tool call", i, id)
			}
			delete(open, id)
		case "system", "user", "assistant":
			if len(open) > 0 {
				return fmt.Errorf("message %d (%s): tool calls %v were never answered", i, role, open)
			}
			for _, tc := range asSlice(msg["tool_calls"]) {
				tcm, _ := tc.(map[string]any)
				id, _ := tcm["id"].(string)
				if id == "" || tcm["type"] != "function" {
					return fmt.Errorf("message %d: tool call without id or type: %v", i, tcm)
				}
				open[id] = true
			}
		default:
			return fmt.Errorf("message %d: unknown role %q", i, role)
		}
	}
	if len(open) > 0 {
		return fmt.Errorf("tool calls %v were never answered", open)
	}
	return nil
}

// checkAnthropicRequest checks the Messages API's rules: roles alternate
// starting with user, max_tokens is set, and every tool_result answers a
// tool_use of the assistant message just before it.
func checkAnthropicRequest(body map[string]any) error {
	if mt, _ := body["max_tokens"].(float64); mt <= 0 {
		return fmt.Errorf("max_tokens is required")
	}
	prevRole := "assistant"
	prevToolUses := map[string]bool{}
	for i, m := range asSlice(body["messages"]) {
		msg, _ := m.(map[string]any)
		role, _ := msg["role"].(string)
		if role == prevRole || (role != "user" && role != "assistant") {
			return fmt.Errorf("message %d: role %q after %q", i, role, prevRole)
		}
		uses := map[string]bool{}
		for _, b := range asSlice(msg["content"]) {
			block, _ := b.(map[string]any)
			switch block["type"] {
			case "tool_use":
				id, _ := block["id"].(string)
				uses[id] = true
			case "tool_result":
				id, _ := block["tool_use_id"].(string)
				if !prevToolUses[id] {
					return fmt.Errorf("message %d: tool_result for %q follows no tool_use of that id", i, id)
				}
			case "text":
				if t, _ := block["text"].(string); t == "" {
					return fmt.Errorf("message %d: empty text block", i)
				}
			}
		}
		prevRole, prevToolUses = role, uses
	}
	if prevRole != "user" {
		return fmt.Errorf("the last message must be the user's")
	}
	return nil
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// toolCall is one tool call a scripted model makes.
type toolCall struct {
	id, name, args string
}

// usage is what a scripted turn reports.
type usage struct{ prompt, completion int }

// textTurn is a model answer without tool calls.
func textTurn(kind, text string, u usage) step {
	if kind == "anthropic" {
		return step{body: map[string]any{
			"id": "msg_" + fmt.Sprint(u.prompt), "type": "message", "role": "assistant", "model": "claude-test",
			"content":     []any{map[string]any{"type": "text", "text": text}},
			"stop_reason": "end_turn",
			"usage":       map[string]any{"input_tokens": u.prompt, "output_tokens": u.completion},
		}}
	}
	return step{body: map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
		"choices": []any{map[string]any{
			"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": text},
		}},
		"usage": map[string]any{"prompt_tokens": u.prompt, "completion_tokens": u.completion, "total_tokens": u.prompt + u.completion},
	}}
}

// textTurns is a script of one text turn an answer, each with the same
// small usage.
func textTurns(kind string, answers []string) []step {
	var script []step
	for _, a := range answers {
		script = append(script, textTurn(kind, a, usage{10, 5}))
	}
	return script
}

// toolTurn is a model answer that calls tools, with a line of text first.
func toolTurn(kind string, u usage, calls ...toolCall) step {
	if kind == "anthropic" {
		content := []any{map[string]any{"type": "text", "text": "Let me check."}}
		for _, c := range calls {
			var input map[string]any
			if err := json.Unmarshal([]byte(c.args), &input); err != nil {
				panic(err)
			}
			content = append(content, map[string]any{"type": "tool_use", "id": c.id, "name": c.name, "input": input})
		}
		return step{body: map[string]any{
			"id": "msg_tools", "type": "message", "role": "assistant", "model": "claude-test",
			"content": content, "stop_reason": "tool_use",
			"usage": map[string]any{"input_tokens": u.prompt, "output_tokens": u.completion},
		}}
	}
	var tcs []any
	for _, c := range calls {
		tcs = append(tcs, map[string]any{"id": c.id, "type": "function", "function": map[string]any{"name": c.name, "arguments": c.args}})
	}
	return step{body: map[string]any{
		"id": "chatcmpl-2", "object": "chat.completion", "created": 1, "model": "gpt-test",
		"choices": []any{map[string]any{
			"index": 0, "finish_reason": "tool_calls",
			"message": map[string]any{"role": "assistant", "content": nil, "tool_calls": tcs},
		}},
		"usage": map[string]any{"prompt_tokens": u.prompt, "completion_tokens": u.completion, "total_tokens": u.prompt + u.completion},
	}}
}

// errorTurn is a provider failure with the provider's error body.
func errorTurn(kind string, status int, msg string) step {
	if kind == "anthropic" {
		return step{status: status, body: map[string]any{"type": "error", "error": map[string]any{"type": "api_error", "message": msg}}}
	}
	return step{status: status, body: map[string]any{"error": map[string]any{"message": msg, "type": "server_error"}}}
}

// toolResults returns the tool results of a request, in order, as
// "name-or-id=content".
func toolResults(kind string, c call) []string {
	var out []string
	for _, m := range c.messages() {
		if kind == "openai" {
			if m["role"] == "tool" {
				content, _ := m["content"].(string)
				out = append(out, content)
			}
			continue
		}
		for _, b := range asSlice(m["content"]) {
			block, _ := b.(map[string]any)
			if block["type"] == "tool_result" {
				content, _ := block["content"].(string)
				out = append(out, content)
			}
		}
	}
	return out
}

// systemText is the request's system prompt.
func systemText(kind string, c call) string {
	if kind == "anthropic" {
		s, _ := c.Body["system"].(string)
		return s
	}
	for _, m := range c.messages() {
		if m["role"] == "system" {
			s, _ := m["content"].(string)
			return s
		}
	}
	return ""
}

// toolNames lists the tools offered in a request.
func toolNames(kind string, c call) []string {
	var out []string
	for _, t := range asSlice(c.Body["tools"]) {
		tm, _ := t.(map[string]any)
		if kind == "anthropic" {
			name, _ := tm["name"].(string)
			out = append(out, name)
			continue
		}
		fn, _ := tm["function"].(map[string]any)
		name, _ := fn["name"].(string)
		out = append(out, name)
	}
	return out
}
