package bench

import "fmt"

// UsageError is a setting Run refuses before it starts anything: a flag
// value out of range, or flags that do not go together. Its message names
// the flag, as gated-bench's command line spells it.
type UsageError struct {
	msg string
}

func (e *UsageError) Error() string { return e.msg }

func usageError(format string, args ...any) error {
	return &UsageError{msg: fmt.Sprintf(format, args...)}
}
