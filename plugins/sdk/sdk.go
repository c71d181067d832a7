// Package sdk is what a reviewer plugin imports. Implement Reviewer and call
// Serve from main; the SDK owns the go-plugin handshake, protocol
// versioning, message limits, logging to the host and the parent-death
// watchdog.
//
//	func main() { sdk.Serve(myReviewer{}) }
//
// A plugin never approves anything by itself: the host reads the first
// line of Response.Text ("Decision: approve" or "Decision: reject"), checks
// that Response.Decision agrees and that every gate the persona requires
// is reported as passed. Anything else is a rejection.
package sdk

import (
	"context"
	"encoding/json"
	"time"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/plugins/pluginv1"
)

// Reviewer is the interface a plugin implements.
type Reviewer interface {
	// Describe says who the plugin is. It is called once after launch.
	Describe(ctx context.Context) (Description, error)
	// Review judges one proposal. ctx carries the review deadline and is
	// cancelled when the host gives up; return promptly when it is done.
	Review(ctx context.Context, req *Request) (*Response, error)
}

// Description identifies a plugin.
type Description struct {
	Name    string
	Version string
	// Personas this plugin serves; empty means any persona.
	Personas []string
	// Models it can run, as provider/model.
	Models []string
	// MaxConcurrency is how many reviews it takes at once; 0 lets the host
	// decide.
	MaxConcurrency int
}

// Request is one review.
type Request struct {
	ReviewID string
	// Proposal is the decoded proposal; ProposalJSON the bytes the agent
	// published.
	Proposal     *engine.Proposal
	ProposalJSON []byte
	Persona      Persona
	Policy       Policy
	Deadline     time.Time
	// Run is what the host tells the reviewer of a kind run proposal: the
	// policy's judgement of the deterministic criteria, the criteria the
	// reviewer must judge, and the findings of earlier rounds. Nil for an
	// action review.
	Run *engine.RunContext

	tools pluginv1.ToolHostClient
	// caller replaces tools in tests (NewRequest).
	caller ToolCaller
}

// Persona is the reviewer persona the host composed for this review.
type Persona struct {
	Name string
	// SystemPrompt is the composed prompt: base, body, critical reminder.
	SystemPrompt   string
	Model          string
	MaxTurns       int
	Tools          []Tool
	RequiredGates  []string
	PermissionMode string
}

// Tool is one tool of the effective tool bag.
type Tool struct {
	Name        string
	Description string
	// InputSchema is the JSON schema of the tool's arguments.
	InputSchema string
}

// Policy is what the policy established before review.
type Policy struct {
	Revision string
	Why      string
	// SOP is the catalog entry covering the action, nil when none does.
	SOP         *engine.SOP
	DeniedTools []string
	// History is the JSON array of recent verdicts on the same target.
	History json.RawMessage
}

// Response is the reviewer's answer.
type Response struct {
	// Text must start with the decision line: "Decision: approve" or
	// "Decision: reject".
	Text string
	// Decision must agree with Text.
	Decision          engine.Decision
	Gates             []engine.Gate
	SOPID             string
	RollbackPath      string
	Notes             string
	Model             string
	Turns             int
	Tokens            engine.Tokens
	Criteria          []engine.CriterionEval
	Comments          []engine.Comment
	MissingWork       []string
	NextRoundGuidance string
	// Warnings are remarks that never change the verdict.
	Warnings   []string
	Confidence float64
}
