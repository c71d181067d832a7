package notify

import "errors"

// ErrInvalidConfig is wrapped by every error of ParseConfig and
// LoadConfig: the notify file, and the line and field, say what to fix.
var ErrInvalidConfig = errors.New("invalid notify file")

// ErrNoStream is returned by Start when the audit stream does not exist:
// bus.Setup creates it, so start the notifier after it.
var ErrNoStream = errors.New("the audit stream does not exist; set up gated's streams first")
