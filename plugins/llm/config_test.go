package llm_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/plugins/llm"
)

func TestConfigErrorsNameWhatIsMissing(t *testing.T) {
	tests := []struct {
		note  string
		model string
		is    error
		names string
	}{
		{note: "no model", model: "", is: llm.ErrNoModel, names: "provider/name"},
		{note: "no provider", model: "gpt-4o", is: llm.ErrUnknownProvider, names: "gpt-4o"},
		{note: "unknown provider", model: "azure/gpt-4o", is: llm.ErrUnknownProvider, names: `"azure"`},
		{note: "openai without a key", model: "openai/gpt-4o", is: llm.ErrMissingAPIKey, names: llm.EnvOpenAIAPIKey},
		{note: "anthropic without a key", model: "anthropic/claude-3-5-haiku-latest", is: llm.ErrMissingAPIKey, names: llm.EnvAnthropicAPIKey},
		{note: "openai-compatible without a base URL", model: "openai-compatible/llama", is: llm.ErrMissingBaseURL, names: llm.EnvCompatibleBaseURL},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			req := newRequest("openai", "x", newFakeTools())
			req.Persona.Model = tc.model
			res, err := llm.New(llm.Config{}).Review(t.Context(), req)
			if !errors.Is(err, tc.is) || res != nil {
				t.Fatalf("err = %v, response %+v; want %v", err, res, tc.is)
			}
			if !strings.Contains(err.Error(), tc.names) {
				t.Errorf("error %q does not name %q", err, tc.names)
			}
		})
	}
}

// Ollama and OpenAI-compatible servers get the OpenAI wire protocol at
// their own address, with their own key or none — never OpenAI's key from
// the environment.
func TestOpenAICompatibleProviders(t *testing.T) {
	t.Setenv(llm.EnvOpenAIAPIKey, "sk-from-the-environment")
	t.Setenv(llm.EnvOpenAIBaseURLAlt, "http://127.0.0.1:1/v1")
	tests := []struct {
		note     string
		model    string
		cfg      func(base string) llm.Config
		wantAuth string
		wantName string
	}{
		{
			note: "ollama", model: "ollama/llama3.1:8b",
			cfg:      func(base string) llm.Config { return llm.Config{OllamaBaseURL: base} },
			wantAuth: "Bearer no-key", wantName: "llama3.1:8b",
		},
		{
			note: "openai-compatible with a key", model: "openai-compatible/meta-llama/Llama-3.1-8B-Instruct",
			cfg:      func(base string) llm.Config { return llm.Config{CompatibleBaseURL: base, CompatibleAPIKey: "vllm-key"} },
			wantAuth: "Bearer vllm-key", wantName: "meta-llama/Llama-3.1-8B-Instruct",
		},
		{
			note: "openai-compatible without a key", model: "openai-compatible/qwen2.5",
			cfg:      func(base string) llm.Config { return llm.Config{CompatibleBaseURL: base} },
			wantAuth: "Bearer no-key", wantName: "qwen2.5",
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			p := newProvider(t, "openai", textTurn("openai", approval, usage{7, 3}))
			req := newRequest("openai", "nginx is wedged", newFakeTools())
			req.Persona.Model = tc.model
			res, err := llm.New(tc.cfg(p.baseURL())).Review(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if _, approved, why := judge(res); !approved || res.Tokens != (gated.Tokens{Prompt: 7, Completion: 3}) {
				t.Fatalf("approved %v (%s), tokens %+v", approved, why, res.Tokens)
			}
			c := p.recorded()[0]
			if got := c.Header.Get("Authorization"); got != tc.wantAuth {
				t.Errorf("Authorization = %q, want %q", got, tc.wantAuth)
			}
			if c.Body["model"] != tc.wantName {
				t.Errorf("model = %v, want %q", c.Body["model"], tc.wantName)
			}
			// These servers read max_tokens.
			if _, ok := c.Body["max_tokens"]; !ok {
				t.Errorf("no max_tokens in %s", c.Raw)
			}
		})
	}
}

func TestKeysStayOutOfErrorsAndOutput(t *testing.T) {
	for _, kind := range providers {
		t.Run(kind, func(t *testing.T) {
			key := openAIKey
			if kind == "anthropic" {
				key = anthropicKey
			}
			p := newProvider(t, kind, errorTurn(kind, 401, "Incorrect API key provided: "+key))
			_, err := reviewerFor(kind, p).Review(t.Context(), newRequest(kind, "x", newFakeTools()))
			if err == nil || strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "[redacted]") {
				t.Fatalf("err = %v; want it without the key", err)
			}
		})
	}
	cfg := llm.Config{OpenAIAPIKey: openAIKey, AnthropicAPIKey: anthropicKey, CompatibleAPIKey: "vllm-secret"}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		out := fmt.Sprintf(verb, cfg)
		for _, k := range []string{openAIKey, anthropicKey, "vllm-secret"} {
			if strings.Contains(out, k) {
				t.Errorf("%s of a Config prints a key: %s", verb, out)
			}
		}
	}
}

func TestConfigFromEnv(t *testing.T) {
	for _, k := range llm.EnvVars {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	if env := llm.Environ(); len(env) != 0 {
		t.Fatalf("Environ with nothing set = %q", env)
	}
	t.Setenv(llm.EnvOpenAIAPIKey, "k1")
	t.Setenv(llm.EnvOpenAIBaseURLAlt, "http://fallback/v1")
	t.Setenv(llm.EnvOpenAIBaseURL, "http://preferred/v1")
	t.Setenv(llm.EnvOllamaBaseURL, "http://gpu-box:11434/v1")
	cfg := llm.ConfigFromEnv()
	if cfg.OpenAIAPIKey != "k1" || cfg.OpenAIBaseURL != "http://preferred/v1" || cfg.OllamaBaseURL != "http://gpu-box:11434/v1" || cfg.AnthropicAPIKey != "" {
		t.Errorf("ConfigFromEnv = %s", cfg)
	}
	env := llm.Environ()
	slices.Sort(env)
	want := []string{"GATED_OLLAMA_BASE_URL=http://gpu-box:11434/v1", "GATED_OPENAI_BASE_URL=http://preferred/v1", "OPENAI_API_KEY=k1", "OPENAI_BASE_URL=http://fallback/v1"}
	if !slices.Equal(env, want) {
		t.Errorf("Environ = %q, want %q", env, want)
	}
}

// The plugin starts with no key at all: keys are needed to review, not to
// describe itself.
func TestDescribeNeedsNoKey(t *testing.T) {
	d, err := llm.New(llm.Config{Version: "v9"}).Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != llm.Name || d.Version != "v9" || !slices.Equal(d.Models, []string{"ollama/*"}) {
		t.Errorf("Describe = %+v", d)
	}
	d, _ = llm.New(llm.Config{OpenAIAPIKey: "k", AnthropicAPIKey: "k", CompatibleBaseURL: "http://x/v1"}).Describe(t.Context())
	if !slices.Equal(d.Models, []string{"ollama/*", "openai/*", "anthropic/*", "openai-compatible/*"}) {
		t.Errorf("Describe with every provider = %+v", d.Models)
	}
}

// Concurrent reviews keep their connections to the provider for the next
// ones: a second round of as many reviews at once opens no new
// connection. (With Go's default of two idle connections per host, all
// but two would be dialed again.)
func TestConcurrentReviewsReuseConnections(t *testing.T) {
	const concurrent = 12
	script := make([]step, 2*concurrent)
	for i := range script {
		script[i] = textTurn("openai", approval, usage{1, 1})
		script[i].delay = 50 * time.Millisecond // every review of a round holds a connection at once
	}
	p := &provider{t: t, kind: "openai", script: script}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", p.serve)
	var dialed atomic.Int64
	p.srv = httptest.NewUnstartedServer(mux)
	p.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialed.Add(1)
		}
	}
	p.srv.Start()
	t.Cleanup(p.srv.Close)

	r := reviewerFor("openai", p)
	for round := 1; round <= 2; round++ {
		var wg sync.WaitGroup
		for range concurrent {
			wg.Go(func() {
				res, err := r.Review(t.Context(), newRequest("openai", "nginx is wedged", newFakeTools()))
				if err != nil {
					t.Error(err)
					return
				}
				if _, approved, why := judge(res); !approved {
					t.Errorf("not approved: %s", why)
				}
			})
		}
		wg.Wait()
		if got := dialed.Load(); got > concurrent {
			t.Fatalf("after round %d: %d connections dialed for %d reviews at once", round, got, concurrent)
		}
	}
	if n := len(p.recorded()); n != 2*concurrent {
		t.Fatalf("%d model calls, want %d", n, 2*concurrent)
	}
}

// The default client keeps small buffers per connection; a request, a
// header line and an answer each many times their size still go through
// whole, with both providers.
func TestLargeExchangesPassTheConnectionBuffers(t *testing.T) {
	notes := strings.Repeat("The change is covered and the rollback is known. ", 1000) // about 49 KB, under the answer limit
	answer := strings.Replace(approval, "Notes: Covered by SOP-001 with a known rollback.", "Notes: "+notes, 1)
	reason := strings.Repeat("nginx is wedged on web-1; ", 300) // the request is about 8 KB
	for _, kind := range providers {
		t.Run(kind, func(t *testing.T) {
			p := newProvider(t, kind, textTurn(kind, answer, usage{1, 1}))
			inner := p.srv.Config.Handler
			p.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Long", strings.Repeat("x", 8<<10))
				inner.ServeHTTP(w, r)
			})
			res, err := reviewerFor(kind, p).Review(t.Context(), newRequest(kind, reason, newFakeTools()))
			if err != nil {
				t.Fatal(err)
			}
			if _, approved, why := judge(res); !approved {
				t.Fatalf("not approved: %s", why)
			}
			if strings.TrimSpace(res.Notes) != strings.TrimSpace(notes) {
				t.Errorf("notes came back %d bytes, want %d", len(res.Notes), len(notes))
			}
			calls := p.recorded()
			if len(calls) != 1 || !strings.Contains(calls[0].Raw, reason[:len(reason)-2]) {
				t.Errorf("the model did not get the whole request")
			}
		})
	}
}
