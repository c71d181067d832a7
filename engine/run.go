package engine

import (
	"github.com/gated/gated"
)

// DefaultMaxRounds is how many review rounds a run gets when the policy
// names no maximum.
const DefaultMaxRounds = 5

// StatusAccepted reports whether a run that ended with status may be
// approved under the policy's accepted status: a completed run always, any
// other only when accepted names its status.
func StatusAccepted(status, accepted string) bool {
	return status == gated.RunCompleted || (accepted != "" && accepted == status)
}

// OperatorDecision is an operator's judgement of the manual criteria a
// blocked run verdict waits on, or of an action held for an operator. The bus checks the operator's signature
// before the engine sees it.
type OperatorDecision struct {
	Tenant     string `json:"tenant"`
	ProposalID string `json:"proposal_id"`
	// ProposalSHA256 is the digest of the proposal the operator judged; it
	// must match the verdict's.
	ProposalSHA256 string `json:"proposal_sha256"`
	// Operator is the operator's id from gated's operator list, and Key
	// the public key that signed.
	Operator string `json:"operator"`
	Key      string `json:"key,omitempty"`
	// Criteria judge a held run's manual criteria; Decision, approve or
	// reject, decides a held action. A decision has one or the other.
	Criteria []OperatorFinding `json:"criteria,omitempty"`
	Decision string            `json:"decision,omitempty"`
	Reason   string            `json:"reason,omitempty"`
}

// OperatorFinding is an operator's verdict on one manual criterion.
type OperatorFinding struct {
	ID     string `json:"id"`
	Pass   bool   `json:"pass"`
	Reason string `json:"reason,omitempty"`
}
