package gated

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gated/gated/internal/strictjson"
)

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

// ExecutionRefused is the status of an execution report that says the
// executor refused the grant itself (it did not verify, or gated would
// not let it be used), so the action did not run.
const ExecutionRefused = "refused"

// Bounds of an execution report.
const (
	// MaxExecutionReport bounds a whole report, in bytes.
	MaxExecutionReport = 16 << 10
	// MaxExecutionError bounds a report's error text, in bytes. Clients
	// cut it to 1,024 characters, which UTF-8 may spell in up to four
	// times as many bytes.
	MaxExecutionError = 4096
)

// ExecutionReport is what an executor publishes on
// gated.outcomes.<tenant>.<proposal_id> about the grant of an approved
// proposal: the action started, succeeded or failed, or the executor
// refused the grant (docs/GRANTS.md, outcomes).
type ExecutionReport struct {
	V int `json:"v"`
	// GID is the grant's id; empty only in a refusal of a token that did
	// not decode.
	GID        string `json:"gid"`
	Tenant     string `json:"tenant"`
	ProposalID string `json:"proposal_id"`
	// Status is ExecutionStarted, ExecutionSucceeded, ExecutionFailed or
	// ExecutionRefused.
	Status string `json:"status"`
	// Error is the error of a failed run or the reason of a refusal;
	// required for refused.
	Error string `json:"error,omitempty"`
	// At is when it happened, by the executor's clock.
	At time.Time `json:"at"`
}

// Execution is the report as the history keeps it.
func (r *ExecutionReport) Execution() Execution {
	return Execution{Status: r.Status, At: r.At.UTC(), Error: r.Error}
}

// DecodeExecutionReport decodes an execution report strictly: one JSON
// object with members v (1), gid, tenant, proposal_id, status, at, and
// error, nothing else, each of its type, and no member twice. A refusal
// names the member at fault.
func DecodeExecutionReport(data []byte) (ExecutionReport, error) {
	var r ExecutionReport
	if len(data) > MaxExecutionReport {
		return r, fmt.Errorf("outcome report is %d bytes, more than %d", len(data), MaxExecutionReport)
	}
	seen := map[string]bool{}
	err := strictjson.Object(data, func(key string, value json.RawMessage) error {
		seen[key] = true
		var dst any
		switch key {
		case "v":
			dst = &r.V
		case "gid":
			dst = &r.GID
		case "tenant":
			dst = &r.Tenant
		case "proposal_id":
			dst = &r.ProposalID
		case "status":
			dst = &r.Status
		case "error":
			dst = &r.Error
		case "at":
			var at string
			if err := json.Unmarshal(value, &at); err != nil {
				return fmt.Errorf("outcome report member at: want an RFC 3339 time string")
			}
			t, err := time.Parse(time.RFC3339Nano, at)
			if err != nil {
				return fmt.Errorf("outcome report member at: %q is not an RFC 3339 time", at)
			}
			r.At = t
			return nil
		default:
			return fmt.Errorf("outcome report member %q is unknown", key)
		}
		if bytes.Equal(bytes.TrimSpace(value), []byte("null")) {
			return fmt.Errorf("outcome report member %s is null", key)
		}
		if err := json.Unmarshal(value, dst); err != nil {
			want := "a string"
			if key == "v" {
				want = "an integer"
			}
			return fmt.Errorf("outcome report member %s: want %s", key, want)
		}
		return nil
	})
	if err != nil {
		var me *strictjson.MemberError
		if errors.As(err, &me) {
			return r, fmt.Errorf("outcome report member %q: %w", me.Key, me.Err)
		}
		if strings.HasPrefix(err.Error(), "outcome report") {
			return r, err
		}
		return r, fmt.Errorf("outcome report is not a JSON object: %w", err)
	}
	for _, m := range []string{"v", "gid", "tenant", "proposal_id", "status", "at"} {
		if !seen[m] {
			return r, fmt.Errorf("outcome report member %s is missing", m)
		}
	}
	switch {
	case r.V != 1:
		return r, fmt.Errorf("outcome report member v: %d is not 1", r.V)
	case !ValidTenant(r.Tenant):
		return r, fmt.Errorf("outcome report member tenant: %q must match [a-z0-9_-]{1,64}", r.Tenant)
	case !ValidID(r.ProposalID):
		return r, fmt.Errorf("outcome report member proposal_id: %q must match [A-Za-z0-9_-]{1,128}", r.ProposalID)
	case r.GID != "" && !validGID(r.GID):
		return r, fmt.Errorf("outcome report member gid: %q is not a grant id (22 base64url characters)", r.GID)
	case r.GID == "" && r.Status != ExecutionRefused:
		return r, fmt.Errorf("outcome report member gid is empty; only a refusal of a token that did not decode may omit it")
	case len(r.Error) > MaxExecutionError:
		return r, fmt.Errorf("outcome report member error is %d bytes, more than %d", len(r.Error), MaxExecutionError)
	case !utf8.ValidString(r.Error):
		return r, fmt.Errorf("outcome report member error is not UTF-8")
	case r.At.IsZero():
		return r, fmt.Errorf("outcome report member at is the zero time")
	}
	switch r.Status {
	case ExecutionStarted, ExecutionSucceeded, ExecutionFailed:
	case ExecutionRefused:
		if strings.TrimSpace(r.Error) == "" {
			return r, fmt.Errorf("outcome report member error is empty; a refusal says why")
		}
	default:
		return r, fmt.Errorf("outcome report member status: %q is not started, succeeded, failed or refused", r.Status)
	}
	return r, nil
}

// validGID reports whether s spells 16 bytes in unpadded base64url.
func validGID(s string) bool {
	if len(s) != 22 {
		return false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	return err == nil && len(b) == 16
}
