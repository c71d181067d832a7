package console

import "errors"

// Errors of the console.
var (
	// ErrInvalidConfig is wrapped by New's error when a required part of
	// Config is missing.
	ErrInvalidConfig = errors.New("invalid console configuration")
	// ErrBadRequest is wrapped by the errors of the request decoders
	// (DecodeSignIn, DecodeDecision): the message names the field.
	ErrBadRequest = errors.New("malformed console request")
)
