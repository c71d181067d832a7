package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
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
	// arrivals counts the well-formed calls, answered or still waiting.
	arrivals atomic.Int64
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

// Arrived is the number of well-formed calls that reached the model,
// those it is still holding included.
func (s *LLMServer) Arrived() int64 { return s.arrivals.Load() }

// arrived notes a call's arrival at now.
func (s *LLMServer) arrived(now int64) {
	s.arrivals.Add(1)
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

// chatRequest is what the scripted model reads of a request: the model to
// echo and whether there are messages. The messages are checked to be
// objects and skipped, not kept: the model answers every one alike, and
// the bench shares the machine with gated, so its model does no more work
// than it must.
type chatRequest struct {
	Model    string     `json:"model"`
	Messages []struct{} `json:"messages"`
}

// answerHead and answerTail frame the scripted answer's JSON around its
// id, creation time and model, which differ by call.
var answerHead, answerTail = func() (string, string) {
	content, err := json.Marshal(ScriptedAnswer)
	if err != nil {
		panic(err)
	}
	return `{"id":"chatcmpl-bench-`, `,"object":"chat.completion","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":` +
		string(content) + `}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}` + "\n"
}()

func (s *LLMServer) complete(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&req); err != nil || len(req.Messages) == 0 {
		s.bad.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"message":"want a JSON chat completion request with messages","type":"invalid_request_error"}}`))
		return
	}
	s.arrived(time.Now().UnixNano())
	t := time.NewTimer(s.Latency)
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
		return
	}
	n := s.calls.Add(1)
	model, err := json.Marshal(req.Model)
	if err != nil {
		model = []byte(`""`)
	}
	b := make([]byte, 0, len(answerHead)+len(answerTail)+len(model)+64)
	b = append(b, answerHead...)
	b = strconv.AppendInt(b, n, 10)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, time.Now().Unix(), 10)
	b = append(b, `,"model":`...)
	b = append(b, model...)
	b = append(b, answerTail...)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
