// Package sdk is what a reviewer plugin imports. Implement Reviewer and call
// Serve from main; the SDK owns the go-plugin handshake, protocol
// versioning, message limits, logging to the host and the parent-death
// watchdog.
//
//	func main() { sdk.Serve(myReviewer{}) }
//
// Serve runs the plugin's Go code on one processor unless the plugin's
// environment sets GOMAXPROCS: a reviewer mostly waits, and one processor
// makes its round trips with gated cheaper (see Serve).
//
// A plugin never approves anything by itself: the host reads the first
// line of Response.Text ("Decision: approve" or "Decision: reject") and
// the lines after it, checks that Response.Decision agrees, that the
// text's gate lines agree with Response.Gates, and that every gate the
// persona requires is reported as passed. Anything else is a rejection.
//
// # Reviewing runs
//
// A proposal of kind run asks gated to accept a finished agent run or send
// it back for another round. Its review carries Request.Run (nil for an
// action review); Request.Proposal.Run holds what the worker reports (its
// summary, diff and test output) and Request.Proposal.Criteria the
// acceptance criteria. A reviewer of a run:
//
//   - judges every criterion named in Run.AIReview and reports each in
//     Response.Criteria, by id, with a confidence in [0, 1]. Criteria the
//     policy judged (Run.Criteria) and manual ones (Run.Manual) are not
//     the reviewer's to judge: the host ignores results for them, with a
//     warning. An unknown or repeated id, or a confidence outside [0, 1],
//     fails the review.
//   - checks the findings of earlier rounds (Run.PriorFindings). gated
//     takes them from its own record, so a worker cannot drop one; one the
//     worker marks resolved is a claim to check against the diff.
//   - approves only when every required ai_review criterion passes and
//     nothing is missing: an approval has no MissingWork (the host turns an
//     approval with missing work into a rejection).
//   - on rejection, says what the next round must do: at least one
//     MissingWork item or NextRoundGuidance, or the review fails. Each
//     MissingWork item and Comment becomes a finding the worker must report
//     back on; a Comment with a nil Line is about the file as a whole.
//   - puts remarks that should not change the verdict in Warnings.
//
// Output beyond Run.Limits is cut by gated, with a warning; a cut never
// turns a rejection into an approval. The persona's required gates apply
// to runs as to actions: the built-in run-reviewer requires criteria_met
// and prior_findings_closed. A reviewer that cannot judge a run (the
// deterministic sop reviewer facing ai_review criteria, for one) should
// return an error saying so, which the host records as an error verdict.
package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/gated/gated"
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
	Proposal     *gated.Proposal
	ProposalJSON []byte
	Persona      Persona
	Policy       Policy
	Deadline     time.Time
	// Run is what the host tells the reviewer of a kind run proposal: the
	// policy's judgement of the deterministic criteria, the criteria the
	// reviewer must judge, and the findings of earlier rounds. Nil for an
	// action review. See "Reviewing runs" in the package documentation.
	Run *gated.RunContext

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
	SOP         *gated.SOP
	DeniedTools []string
	// History is the JSON array of recent verdicts on the same target.
	History json.RawMessage
}

// Response is the reviewer's answer.
type Response struct {
	// Text must start with the decision line: "Decision: approve" or
	// "Decision: reject" (see gated.ParseDecision). No later line may
	// change or take back an approval, or say no or not sure, and a line
	// in Text about a gate must agree with Gates (see
	// gated.CheckGateLines).
	Text string
	// Decision must agree with Text.
	Decision     gated.ReviewDecision
	Gates        []gated.GateResult
	SOPID        string
	RollbackPath string
	Notes        string
	Model        string
	Turns        int
	Tokens       gated.Tokens
	// Criteria are the reviewer's judgements of the run's ai_review
	// criteria (Request.Run.AIReview), by id. Kind, Required and JudgedBy
	// are filled in by the host.
	Criteria []gated.CriterionEval
	// Comments are remarks on the run's diff. A nil Line, or one below 1,
	// is a remark on the file as a whole.
	Comments []gated.Comment
	// MissingWork lists what the worker must still do; it must be empty in
	// an approval of a run. NextRoundGuidance is advice for the next round.
	// A rejected run needs at least one of the two.
	MissingWork       []string
	NextRoundGuidance string
	// Warnings are remarks that never change the verdict.
	Warnings   []string
	Confidence float64
}

// ErrMalformedRun means the host sent a run context the SDK cannot read:
// the review fails rather than going ahead without it. The plugin and
// gated disagree about the protocol; rebuild the plugin against the SDK
// of the gated that runs it.
var ErrMalformedRun = errors.New("the run context gated sent is malformed")
