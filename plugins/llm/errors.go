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

// Errors of Review for a run review that reached no decision. An action
// review gets a rejection in these cases instead; a run review cannot,
// because a rejection of a run must say what the worker has to do.
var (
	// ErrUnreadableAnswer means the model's answer to a run review was not
	// in the decision format with its ```json block, even after one
	// repair turn. The error says what was wrong and quotes the start of
	// the answer. A stronger model, or one that follows formats more
	// closely, is the fix.
	ErrUnreadableAnswer = errors.New("the model's answer could not be read")
	// ErrMaxTurns means the model was still calling tools when the
	// persona's max_turns ran out. Raise max_turns, or give the persona
	// fewer tools.
	ErrMaxTurns = errors.New("max_turns exhausted")
)
