package gated

import (
	"slices"
	"time"
)

// ExecutedAction is one approved action an agent executed, as gated keeps
// it in the agent's flow state: its labels joined the state when its
// grant was used (docs/POLICIES.md#flows).
type ExecutedAction struct {
	ProposalID string    `json:"proposal_id"`
	Action     string    `json:"action"`
	Labels     []string  `json:"labels"`
	At         time.Time `json:"at"`
}

// SessionState is what gated keeps of an agent's executed actions, the
// policy's input.session: the labelled actions the agent executed over
// the flow window, newest last, whatever requested_by.session they were
// proposed under. Labels are the labels of Recent, sorted; Since is when
// the oldest of Recent ran (zero when there is none).
type SessionState struct {
	Labels []string         `json:"labels"`
	Recent []ExecutedAction `json:"recent"`
	Since  time.Time        `json:"since"`
	// Error says why the state could not be read (the bucket unreachable,
	// the record corrupt): the flow rules, when on, deny on it rather
	// than judge an empty state. Empty when the state was read.
	Error string `json:"error,omitempty"`
}

// NewSessionState is the state of recent: its labels and since derived.
func NewSessionState(recent []ExecutedAction) SessionState {
	st := SessionState{Recent: recent, Labels: []string{}}
	for i, a := range recent {
		if i == 0 || a.At.Before(st.Since) {
			st.Since = a.At
		}
		st.Labels = append(st.Labels, a.Labels...)
	}
	slices.Sort(st.Labels)
	st.Labels = slices.Compact(st.Labels)
	if st.Recent == nil {
		st.Recent = []ExecutedAction{}
	}
	return st
}
