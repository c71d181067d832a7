package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// ScriptedAnswer is what the scripted model answers every review with: an
// approval that reports the built-in reviewer's three gates as passed.
const ScriptedAnswer = "Decision: approve\n" +
	"Gates:\n" +
	"- sop_covers: pass — SOP-001 covers restarting a web service\n" +
	"- no_parallel_operation: pass — nothing else is under way on the device\n" +
	"- rollback_known: pass — a restart is undone by the previous unit state\n" +
	"Notes: scripted answer of gated bench."

// LLMServer is a scripted model behind OpenAI's chat completions API
// (POST /v1/chat/completions), so the llm reviewer reaches it through its
// real provider client. Every call is answered with ScriptedAnswer after
// Latency.
type LLMServer struct {
	Latency time.Duration
	srv     *http.Server
	ln      net.Listener
	calls   atomic.Int64
	bad     atomic.Int64
	// first and last are when the first and the latest well-formed
	// call arrived (Unix nanoseconds, 0 before any).
	first, last atomic.Int64
}

// ServeLLM starts a scripted model on addr (":0" picks a port).
func ServeLLM(addr string, latency time.Duration) (*LLMServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("scripted model: %w", err)
	}
	s := &LLMServer{Latency: latency, ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.complete)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// BaseURL is the address a provider client is given: http://host:port/v1.
func (s *LLMServer) BaseURL() string { return "http://" + s.ln.Addr().String() + "/v1" }

// Calls is the number of model calls answered; Bad the number refused.
func (s *LLMServer) Calls() (answered, bad int64) { return s.calls.Load(), s.bad.Load() }

// Arrivals is how long the well-formed calls took to arrive, from the
// first to the last: how fast gated got its reviews to the model. Zero
// before two calls.
func (s *LLMServer) Arrivals() time.Duration {
	first, last := s.first.Load(), s.last.Load()
	if first == 0 || last <= first {
		return 0
	}
	return time.Duration(last - first)
}

// arrived notes a call's arrival at now.
func (s *LLMServer) arrived(now int64) {
	s.first.CompareAndSwap(0, now)
	for {
		last := s.last.Load()
		if now <= last || s.last.CompareAndSwap(last, now) {
			return
		}
	}
}

// Close stops the server.
func (s *LLMServer) Close() error {
	err := s.srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (s *LLMServer) complete(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string            `json:"model"`
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&req); err != nil || len(req.Messages) == 0 {
		s.bad.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"message":"want a JSON chat completion request with messages","type":"invalid_request_error"}}`))
		return
	}
	s.arrived(time.Now().UnixNano())
	select {
	case <-time.After(s.Latency):
	case <-r.Context().Done():
		return
	}
	n := s.calls.Add(1)
	resp := map[string]any{
		"id": fmt.Sprintf("chatcmpl-bench-%d", n), "object": "chat.completion",
		"created": time.Now().Unix(), "model": req.Model,
		"choices": []any{map[string]any{
			"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": ScriptedAnswer},
		}},
		"usage": map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}
