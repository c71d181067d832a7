package engine

import "time"

// Statuses of an Execution: what an executor reports about an approved
// action it ran on a grant. Started comes before the action runs;
// succeeded and failed are final.
const (
	ExecutionStarted   = "started"
	ExecutionSucceeded = "succeeded"
	ExecutionFailed    = "failed"
)

// Execution is the outcome of an approved action, as its executor
// reported it, kept on the approval's entry of its target's history.
type Execution struct {
	// Status is ExecutionStarted, ExecutionSucceeded or ExecutionFailed.
	Status string `json:"status"`
	// At is when the executor says it happened.
	At time.Time `json:"at"`
	// Error is the executor's error text of a failed run.
	Error string `json:"error,omitempty"`
}

// Final reports whether the status ends the run: succeeded or failed.
func (e *Execution) Final() bool {
	return e != nil && (e.Status == ExecutionSucceeded || e.Status == ExecutionFailed)
}
