package gated

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gated/gated/internal/strictjson"
)

// A local decision is a call a gateway of the tenant decided itself,
// with the same policy bundle gated evaluates, without a round trip:
// gated mcp's reads the policy approves at its own stage. The gateway
// cannot write the audit stream (its key and chain are gated's), so it
// reports its decisions in batches on the tenant's subject
// (wire.LocalDecisionSubject), and gated records one local.decided event
// per call.

// MaxLocalDecisions bounds the calls of one batch, and MaxLocalBatch its
// bytes.
const (
	MaxLocalDecisions = 256
	MaxLocalBatch     = 256 << 10
)

// LocalBatch is one report of local decisions, all of Tenant.
type LocalBatch struct {
	V         int             `json:"v"`
	Tenant    string          `json:"tenant"`
	Decisions []LocalDecision `json:"decisions"`
}

// LocalDecision is one call decided locally, and the data of its
// local.decided audit event. Its members are in the order of their
// names.
type LocalDecision struct {
	Action string `json:"action"`
	// Agent is requested_by.agent of the call's proposal; As, on the
	// audit event alone, the agent whose subject the batch came on.
	Agent string `json:"agent"`
	// ArgumentsSHA256 is the hex SHA-256 of the call's arguments as the
	// agent sent them.
	ArgumentsSHA256 string    `json:"arguments_sha256"`
	As              string    `json:"as,omitempty"`
	At              time.Time `json:"at"`
	Class           Class     `json:"class"`
	// ID is the id the call's proposal had, unique within the tenant;
	// the audit event is recorded under it.
	ID string `json:"id"`
	// Method is the MCP method (tools/call, resources/read,
	// prompts/get) and Name the tool, resource or prompt it named.
	Method  string  `json:"method"`
	Name    string  `json:"name"`
	Outcome Outcome `json:"outcome"`
	// PolicyRevision is the revision of the bundle that decided.
	PolicyRevision string `json:"policy_revision"`
	Stage          Stage  `json:"stage"`
}

// DecodeLocalBatch decodes a batch strictly: members v (1), tenant and
// decisions (1 to MaxLocalDecisions), each decision with every member of
// LocalDecision but as, nothing else, no member twice or null, and only
// approvals at the policy stage: a gateway decides nothing else alone.
// A refusal names the member at fault.
func DecodeLocalBatch(data []byte) (LocalBatch, error) {
	var b LocalBatch
	if len(data) > MaxLocalBatch {
		return b, fmt.Errorf("local decisions are %d bytes, more than %d", len(data), MaxLocalBatch)
	}
	var raw []json.RawMessage
	seen := map[string]bool{}
	err := strictjson.Object(data, func(key string, value json.RawMessage) error {
		seen[key] = true
		if bytes.Equal(bytes.TrimSpace(value), []byte("null")) {
			return fmt.Errorf("local decisions member %s is null", key)
		}
		var err error
		switch key {
		case "v":
			err = json.Unmarshal(value, &b.V)
		case "tenant":
			err = json.Unmarshal(value, &b.Tenant)
		case "decisions":
			err = json.Unmarshal(value, &raw)
		default:
			return fmt.Errorf("local decisions member %q is unknown", key)
		}
		if err != nil {
			return fmt.Errorf("local decisions member %s is not of its type", key)
		}
		return nil
	})
	if err != nil {
		return b, err
	}
	for _, k := range []string{"v", "tenant", "decisions"} {
		if !seen[k] {
			return b, fmt.Errorf("local decisions member %s is missing", k)
		}
	}
	switch {
	case b.V != SchemaVersion:
		return b, fmt.Errorf("local decisions member v: %d is not %d", b.V, SchemaVersion)
	case !ValidTenant(b.Tenant):
		return b, fmt.Errorf("local decisions member tenant: %q is not a tenant", b.Tenant)
	case len(raw) == 0 || len(raw) > MaxLocalDecisions:
		return b, fmt.Errorf("local decisions member decisions: %d decisions, want 1 to %d", len(raw), MaxLocalDecisions)
	}
	b.Decisions = make([]LocalDecision, len(raw))
	for i, r := range raw {
		d, err := decodeLocalDecision(r)
		if err != nil {
			return LocalBatch{}, fmt.Errorf("local decision %d: %w", i, err)
		}
		b.Decisions[i] = d
	}
	return b, nil
}

func decodeLocalDecision(data []byte) (LocalDecision, error) {
	var d LocalDecision
	var at string
	seen := map[string]bool{}
	err := strictjson.Object(data, func(key string, value json.RawMessage) error {
		seen[key] = true
		var dst any
		switch key {
		case "action":
			dst = &d.Action
		case "agent":
			dst = &d.Agent
		case "arguments_sha256":
			dst = &d.ArgumentsSHA256
		case "at":
			dst = &at
		case "class":
			dst = &d.Class
		case "id":
			dst = &d.ID
		case "method":
			dst = &d.Method
		case "name":
			dst = &d.Name
		case "outcome":
			dst = &d.Outcome
		case "policy_revision":
			dst = &d.PolicyRevision
		case "stage":
			dst = &d.Stage
		default:
			return fmt.Errorf("member %q is unknown", key)
		}
		var s string
		if err := json.Unmarshal(value, &s); err != nil || bytes.Equal(bytes.TrimSpace(value), []byte("null")) {
			return fmt.Errorf("member %s: want a string", key)
		}
		return json.Unmarshal(value, dst)
	})
	if err != nil {
		return d, err
	}
	for _, k := range []string{"action", "agent", "arguments_sha256", "at", "class", "id", "method", "name", "outcome", "policy_revision", "stage"} {
		if !seen[k] {
			return d, fmt.Errorf("member %s is missing", k)
		}
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return d, fmt.Errorf("member at: %q is not an RFC 3339 time", at)
	}
	d.At = t.UTC()
	switch {
	case !ValidID(d.ID):
		return d, fmt.Errorf("member id: %q is not an id", d.ID)
	case !ValidID(d.Agent):
		return d, fmt.Errorf("member agent: %q is not an agent id", d.Agent)
	case d.Action == "" || len(d.Action) > 128:
		return d, fmt.Errorf("member action: want 1 to 128 bytes")
	case d.Class != ClassRead:
		return d, fmt.Errorf("member class: %q: a gateway decides reads alone", d.Class)
	case d.Outcome != OutcomeApproved || d.Stage != StagePolicy:
		return d, fmt.Errorf("outcome %q at stage %q: a gateway decides alone only approvals at the policy stage", d.Outcome, d.Stage)
	case !validHex256(d.ArgumentsSHA256):
		return d, fmt.Errorf("member arguments_sha256: want 64 lower-case hex digits")
	case d.Method != "tools/call" && d.Method != "resources/read" && d.Method != "prompts/get":
		return d, fmt.Errorf("member method: %q is not tools/call, resources/read or prompts/get", d.Method)
	case d.Name == "" || len(d.Name) > 1024 || len(d.PolicyRevision) > 128:
		return d, fmt.Errorf("member name: want 1 to 1024 bytes, and a policy_revision of at most 128")
	}
	return d, nil
}

func validHex256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// LocalRefusedData is the data of local.refused: a batch of local
// decisions gated did not record, the subject it came on, the agent of
// that subject when it was an agent's, the hex SHA-256 of its bytes, and
// why.
type LocalRefusedData struct {
	As      string `json:"as,omitempty"`
	Reason  string `json:"reason"`
	SHA256  string `json:"sha256"`
	Subject string `json:"subject"`
}
