package llm

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/tmc/langchaingo/httputil"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/anthropic"
	"github.com/tmc/langchaingo/llms/openai"
)

// Providers, the part of a persona's model before the first slash.
const (
	ProviderOpenAI           = "openai"
	ProviderAnthropic        = "anthropic"
	ProviderOllama           = "ollama"
	ProviderOpenAICompatible = "openai-compatible"
)

// Environment variables ConfigFromEnv reads.
const (
	EnvOpenAIAPIKey         = "OPENAI_API_KEY"
	EnvOpenAIBaseURL        = "GATED_OPENAI_BASE_URL"
	EnvOpenAIBaseURLAlt     = "OPENAI_BASE_URL"
	EnvAnthropicAPIKey      = "ANTHROPIC_API_KEY"
	EnvAnthropicBaseURL     = "GATED_ANTHROPIC_BASE_URL"
	EnvOllamaBaseURL        = "GATED_OLLAMA_BASE_URL"
	EnvCompatibleBaseURL    = "GATED_OPENAI_COMPATIBLE_BASE_URL"
	EnvCompatibleAPIKey     = "GATED_OPENAI_COMPATIBLE_API_KEY"
	DefaultOpenAIBaseURL    = "https://api.openai.com/v1"
	DefaultAnthropicBaseURL = "https://api.anthropic.com/v1"
	DefaultOllamaBaseURL    = "http://127.0.0.1:11434/v1"
)

// EnvVars lists every environment variable ConfigFromEnv reads. A plugin
// process starts with a minimal environment, so gated passes exactly these
// from its own environment to the bundled reviewer (see Environ).
var EnvVars = []string{
	EnvOpenAIAPIKey, EnvOpenAIBaseURL, EnvOpenAIBaseURLAlt,
	EnvAnthropicAPIKey, EnvAnthropicBaseURL,
	EnvOllamaBaseURL,
	EnvCompatibleBaseURL, EnvCompatibleAPIKey,
}

// Environ returns the EnvVars that are set in this process's environment,
// as KEY=value pairs for a plugin's environment.
func Environ() []string {
	var env []string
	for _, k := range EnvVars {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// Defaults of Config.
const (
	// IdleConnsPerHost is how many idle connections the default
	// HTTPClient keeps to one provider: the most reviews one reviewer
	// process is expected to have waiting on a model at once.
	IdleConnsPerHost = 2048

	DefaultTurnTimeout     = 30 * time.Second
	DefaultMaxTurns        = 5
	DefaultMaxOutputTokens = 4096
)

// Config says how the reviewer reaches model providers. The zero value
// reaches only Ollama on its default address; ConfigFromEnv fills it from
// the environment. Keys are only ever sent to their own provider: they
// are kept out of errors, responses and String.
type Config struct {
	// Version is what Describe reports.
	Version string

	// OpenAIAPIKey authenticates openai/... models. Required for them.
	OpenAIAPIKey string
	// OpenAIBaseURL is the OpenAI API. Default DefaultOpenAIBaseURL.
	OpenAIBaseURL string

	// AnthropicAPIKey authenticates anthropic/... models. Required for
	// them.
	AnthropicAPIKey string
	// AnthropicBaseURL is the Anthropic API, up to and including /v1.
	// Default DefaultAnthropicBaseURL.
	AnthropicBaseURL string

	// OllamaBaseURL is Ollama's OpenAI-compatible endpoint, ending in /v1.
	// Default DefaultOllamaBaseURL. Ollama needs no key.
	OllamaBaseURL string

	// CompatibleBaseURL is the OpenAI-compatible server (vLLM, the
	// llama.cpp server) for openai-compatible/... models, ending in /v1.
	// Required for them: there is no default.
	CompatibleBaseURL string
	// CompatibleAPIKey is sent to that server when set; many need none.
	CompatibleAPIKey string

	// TurnTimeout caps one model call; a call also ends at the review's
	// deadline, whichever comes first. Default DefaultTurnTimeout.
	TurnTimeout time.Duration
	// MaxTurns is the number of model calls a review may make when the
	// persona sets no max_turns. Default DefaultMaxTurns.
	MaxTurns int
	// MaxOutputTokens caps what the model may write in one call. Default
	// DefaultMaxOutputTokens.
	MaxOutputTokens int
	// HTTPClient makes the requests. Default: one client per reviewer
	// that keeps up to IdleConnsPerHost idle connections to each provider,
	// so that concurrent reviews reuse connections (and TLS sessions)
	// instead of dialing anew for nearly every call, as a client keeping
	// Go's default of two would. A timeout set on it applies too, besides
	// the per-call deadlines.
	HTTPClient *http.Client
}

// connBufferSize is the default HTTPClient's read and write buffer per
// connection, in place of net/http's 4 KB each. Over HTTP/1.1 (the plain
// http:// servers: vLLM, llama.cpp, Ollama) every review waiting on its
// model holds a connection of its own for the whole call, and with it
// both buffers; the request was written long before and the answer has
// not begun. At 2,000 reviews in flight 1 KB buffers hold 12 MB less. A
// body larger than the buffer is written past it, and a header line or
// answer larger than it is read in more than one piece, so nothing
// changes but the number of system calls on a large answer.
const connBufferSize = 1 << 10

// newHTTPClient is the default HTTPClient: Go's default transport, with
// an idle pool sized for many concurrent reviews and small connection
// buffers, behind langchaingo's User-Agent.
func newHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0 // no limit over all hosts; each host has its own
	t.MaxIdleConnsPerHost = IdleConnsPerHost
	t.ReadBufferSize, t.WriteBufferSize = connBufferSize, connBufferSize
	return &http.Client{Transport: &httputil.Transport{Transport: t}}
}

// ConfigFromEnv reads the providers' keys and addresses from the
// environment: OPENAI_API_KEY, GATED_OPENAI_BASE_URL (or OPENAI_BASE_URL),
// ANTHROPIC_API_KEY, GATED_ANTHROPIC_BASE_URL, GATED_OLLAMA_BASE_URL,
// GATED_OPENAI_COMPATIBLE_BASE_URL and GATED_OPENAI_COMPATIBLE_API_KEY.
func ConfigFromEnv() Config {
	openAIBase := os.Getenv(EnvOpenAIBaseURL)
	if openAIBase == "" {
		openAIBase = os.Getenv(EnvOpenAIBaseURLAlt)
	}
	return Config{
		OpenAIAPIKey:      os.Getenv(EnvOpenAIAPIKey),
		OpenAIBaseURL:     openAIBase,
		AnthropicAPIKey:   os.Getenv(EnvAnthropicAPIKey),
		AnthropicBaseURL:  os.Getenv(EnvAnthropicBaseURL),
		OllamaBaseURL:     os.Getenv(EnvOllamaBaseURL),
		CompatibleBaseURL: os.Getenv(EnvCompatibleBaseURL),
		CompatibleAPIKey:  os.Getenv(EnvCompatibleAPIKey),
	}
}

// String describes the configuration without its keys, so that printing
// a Config by accident does not leak them.
func (c Config) String() string {
	set := func(s string) string {
		if s == "" {
			return "unset"
		}
		return "set"
	}
	return fmt.Sprintf("llm.Config{openai key %s, openai %q, anthropic key %s, anthropic %q, ollama %q, openai-compatible %q (key %s), turn timeout %s, max turns %d}",
		set(c.OpenAIAPIKey), c.OpenAIBaseURL, set(c.AnthropicAPIKey), c.AnthropicBaseURL, c.OllamaBaseURL,
		c.CompatibleBaseURL, set(c.CompatibleAPIKey), c.TurnTimeout, c.MaxTurns)
}

// GoString is String, for %#v.
func (c Config) GoString() string { return c.String() }

// secrets are the configured keys, for scrubbing provider errors.
func (c *Config) secrets() []string {
	var out []string
	for _, k := range []string{c.OpenAIAPIKey, c.AnthropicAPIKey, c.CompatibleAPIKey} {
		if k != "" {
			out = append(out, k)
		}
	}
	return out
}

// scrub removes the configured keys from a message that may have come
// from a provider: some echo a rejected key back.
func (c *Config) scrub(msg string) string {
	for _, k := range c.secrets() {
		msg = strings.ReplaceAll(msg, k, "[redacted]")
	}
	return msg
}

// noKey is sent to OpenAI-compatible servers that need no key. The openai
// client refuses an empty token and would otherwise fall back to
// OPENAI_API_KEY, sending OpenAI's key to another server.
const noKey = "no-key"

// backend is a model ready for one review.
type backend struct {
	model llms.Model
	// name is the model's name at its provider.
	name string
	// extra are call options the provider needs on every call.
	extra []llms.CallOption
}

// open returns the model a persona's model field names, provider/model.
func (c *Config) open(spec string) (*backend, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, ErrNoModel
	}
	provider, name, ok := strings.Cut(spec, "/")
	if !ok || name == "" || provider == "" {
		return nil, fmt.Errorf("model %q: want provider/model: %w", spec, ErrUnknownProvider)
	}
	var openaiOpts []openai.Option
	if c.HTTPClient != nil {
		openaiOpts = append(openaiOpts, openai.WithHTTPClient(c.HTTPClient))
	}
	openAI := func(base, key string, legacyMaxTokens bool) (*backend, error) {
		m, err := openai.New(append(openaiOpts, openai.WithBaseURL(base), openai.WithToken(key), openai.WithModel(name))...)
		if err != nil {
			return nil, fmt.Errorf("model %q: %s", spec, c.scrub(err.Error()))
		}
		b := &backend{model: m, name: name}
		if legacyMaxTokens {
			// Servers other than OpenAI's read max_tokens, not OpenAI's newer
			// max_completion_tokens.
			b.extra = append(b.extra, openai.WithLegacyMaxTokensField())
		}
		return b, nil
	}
	switch provider {
	case ProviderOpenAI:
		if c.OpenAIAPIKey == "" {
			return nil, fmt.Errorf("model %q: set %s: %w", spec, EnvOpenAIAPIKey, ErrMissingAPIKey)
		}
		return openAI(orDefault(c.OpenAIBaseURL, DefaultOpenAIBaseURL), c.OpenAIAPIKey, false)
	case ProviderOllama:
		return openAI(orDefault(c.OllamaBaseURL, DefaultOllamaBaseURL), noKey, true)
	case ProviderOpenAICompatible:
		if c.CompatibleBaseURL == "" {
			return nil, fmt.Errorf("model %q: set %s to the server's /v1 address: %w", spec, EnvCompatibleBaseURL, ErrMissingBaseURL)
		}
		return openAI(c.CompatibleBaseURL, orDefault(c.CompatibleAPIKey, noKey), true)
	case ProviderAnthropic:
		if c.AnthropicAPIKey == "" {
			return nil, fmt.Errorf("model %q: set %s: %w", spec, EnvAnthropicAPIKey, ErrMissingAPIKey)
		}
		opts := []anthropic.Option{
			anthropic.WithBaseURL(orDefault(c.AnthropicBaseURL, DefaultAnthropicBaseURL)),
			anthropic.WithToken(c.AnthropicAPIKey), anthropic.WithModel(name),
		}
		if c.HTTPClient != nil {
			opts = append(opts, anthropic.WithHTTPClient(c.HTTPClient))
		}
		m, err := anthropic.New(opts...)
		if err != nil {
			return nil, fmt.Errorf("model %q: %s", spec, c.scrub(err.Error()))
		}
		return &backend{model: m, name: name}, nil
	}
	return nil, fmt.Errorf("model %q: provider %q: %w", spec, provider, ErrUnknownProvider)
}

// providers lists the providers this configuration has what it needs
// for (Ollama needs nothing), as provider/* patterns for Describe.
func (c *Config) providers() []string {
	out := []string{ProviderOllama + "/*"}
	if c.OpenAIAPIKey != "" {
		out = append(out, ProviderOpenAI+"/*")
	}
	if c.AnthropicAPIKey != "" {
		out = append(out, ProviderAnthropic+"/*")
	}
	if c.CompatibleBaseURL != "" {
		out = append(out, ProviderOpenAICompatible+"/*")
	}
	return out
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
