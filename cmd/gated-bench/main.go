// Command gated-bench is gated's load generator: it measures throughput
// and the latency gated adds, path by path, against bare JetStream on the
// same server. It is a command of its own so that gated's binary does not
// carry it; it starts a gated binary (--gated) or measures a running
// deployment (--nats-url).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes, as gated's.
const (
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gated-bench:", err)
		code := exitFailure
		var ue *usageErr
		if errors.As(err, &ue) {
			code = exitUsage
		}
		os.Exit(code)
	}
}

// usageErr is a command line gated-bench refuses: it exits 2.
type usageErr struct{ err error }

func (e *usageErr) Error() string { return e.err.Error() }
func (e *usageErr) Unwrap() error { return e.err }

func usageError(format string, args ...any) error {
	return &usageErr{err: fmt.Errorf(format, args...)}
}
