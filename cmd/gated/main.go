// Command gated is the policy gate for fleets of AI agents.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		code := 1
		var ex *exitError
		if errors.As(err, &ex) {
			code = ex.code
		}
		if ex == nil || !ex.silent {
			fmt.Fprintln(os.Stderr, "gated:", err)
		}
		os.Exit(code)
	}
}

// Exit codes.
const (
	exitFailure     = 1
	exitUsage       = 2
	exitNotApproved = 3
)

// exitError carries a process exit code up to main.
type exitError struct {
	code   int
	err    error
	silent bool // already reported
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}
