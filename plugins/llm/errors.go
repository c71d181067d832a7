package llm

import "errors"

// Errors of Review that come before any model call. Each says how to fix
// the problem; the host turns every one of them into an error verdict.
var (
	// ErrNoModel means the persona names no model. Set its model field to
	// provider/model, for example openai/gpt-4o-mini.
	ErrNoModel = errors.New("the persona names no model; set model: provider/name (openai, anthropic, ollama or openai-compatible)")
	// ErrUnknownProvider means the persona's model names a provider this
	// reviewer does not speak. Use openai, anthropic, ollama or
	// openai-compatible.
	ErrUnknownProvider = errors.New("unknown model provider; use openai/..., anthropic/..., ollama/... or openai-compatible/...")
	// ErrMissingAPIKey means the provider needs a key and none is
	// configured. The error names the environment variable to set.
	ErrMissingAPIKey = errors.New("no API key configured for the model provider")
	// ErrMissingBaseURL means the provider has no default address and none
	// is configured. The error names the environment variable to set.
	ErrMissingBaseURL = errors.New("no base URL configured for the model provider")
)
