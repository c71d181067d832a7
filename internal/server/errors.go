package server

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gated/gated/internal/natsconn"
)

// UsageError is a configuration New or Build refuses: a flag or a file
// the user must change. gated exits 2 on it.
type UsageError struct{ err error }

func (e *UsageError) Error() string { return e.err.Error() }

// Unwrap returns the error the refusal wraps.
func (e *UsageError) Unwrap() error { return e.err }

func usageError(format string, args ...any) error {
	return &UsageError{err: fmt.Errorf(format, args...)}
}

// asUsage makes a connection flag the natsconn package refuses a usage
// error; other errors stay as they are.
func asUsage(err error) error {
	var ue *natsconn.UsageError
	if errors.As(err, &ue) {
		return usageError("%s", ue.Error())
	}
	return err
}

// ShutdownError is a shutdown that abandoned what it could not finish
// within its bound. Stop has logged it already.
type ShutdownError struct{ Abandoned []string }

func (e *ShutdownError) Error() string {
	return "shutdown abandoned " + strings.Join(e.Abandoned, "; ")
}
