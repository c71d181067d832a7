package budget

import "errors"

// ErrInvalidConfig is wrapped by every error of ParseConfig and
// LoadConfig: the budgets file, and the line and limit, say what to fix.
var ErrInvalidConfig = errors.New("invalid budgets file")

// ErrCorruptCounters is wrapped by the errors of a counter record that
// is not gated's: it does not decode. Nothing is admitted for its scope
// until it is removed from the bucket (gated budgets reset TENANT).
var ErrCorruptCounters = errors.New("budget counters are not gated's")

// ErrBusy is wrapped by the error of an update of a scope's counters that
// kept losing its compare-and-set to other gated processes until its
// deadline: nothing is admitted, and the delivery is retried.
var ErrBusy = errors.New("budget counters kept changing under concurrent updates")
