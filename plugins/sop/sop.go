// Package sop is gated's deterministic reviewer. It approves a proposal
// only when the SOP catalog covers the action and the SOP names a
// rollback, and it never calls a model. It is the default reviewer, so a
// fresh gated needs no API key.
//
// It also reviews runs, from what the policy established alone: it
// approves a run when every required criterion the policy judged passed,
// every finding of the earlier rounds is resolved, and the run completed
// or ended with a status the policy accepts for its task. It cannot judge
// ai_review criteria, so a run that requires one fails its review with
// ErrCannotJudge.
package sop

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/plugins/sdk"
)

// Name is the plugin name the bundled reviewer runs under.
const Name = "sop"

// Reviewer is the deterministic SOP reviewer.
type Reviewer struct {
	// Version is reported by Describe.
	Version string
}

var _ sdk.Reviewer = Reviewer{}

// Describe implements sdk.Reviewer.
func (r Reviewer) Describe(context.Context) (sdk.Description, error) {
	return sdk.Description{Name: Name, Version: r.Version, MaxConcurrency: 64}, nil
}

// Review implements sdk.Reviewer. Its text follows the decision format:
// a decision line, the gates, and notes. The review of a run proposal is
// judged by other gates (see GateCriteriaMet and GatePriorFindingsClosed)
// and its text ends with the fenced JSON answer of a run review.
func (r Reviewer) Review(ctx context.Context, req *sdk.Request) (*sdk.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if runReview(req) {
		return r.reviewRun(req)
	}
	p := req.Proposal
	sop := req.Policy.SOP
	// When the tool bag allows it, read the SOP through the host: the text
	// the catalog holds now, and a record of the lookup in the audit trail.
	// A refused or failed lookup is missing evidence, so the gates that
	// rest on the SOP fail.
	var lookupErr error
	if sop != nil && req.HasTool(sdk.ToolGetSOPText) {
		sop, lookupErr = fetchSOP(ctx, req, sop.ID)
		if lookupErr != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	// The SOP must cover the action as gated reads action patterns (a *
	// is one word of the action), whatever the policy that sent it: an
	// SOP for rotate_*_credentials says nothing about
	// rotate_db_credentials_then_drop_all_credentials.
	var stretched *gated.SOP
	if sop != nil && !sop.Covers(p.Action) {
		stretched, sop = sop, nil
	}
	gates := []gated.GateResult{
		{Name: "sop_covers", Passed: sop != nil},
		parallelGate(req),
		{Name: "rollback_known", Passed: sop != nil && strings.TrimSpace(sop.Rollback) != ""},
	}
	res := &sdk.Response{Gates: gates}
	if stretched != nil {
		gates[0].Detail = fmt.Sprintf("%s was sent as the covering SOP, but none of its action patterns %q covers %s (a * stands for one word of the action)",
			stretched.ID, stretched.Actions, p.Action)
		gates[2].Detail = "no covering SOP, so no known rollback"
	} else if sop != nil {
		gates[0].Detail = fmt.Sprintf("%s (%s) covers %s", sop.ID, sop.Title, p.Action)
		res.SOPID = sop.ID
		if gates[2].Passed {
			gates[2].Detail = sop.Rollback
			res.RollbackPath = sop.Rollback
		} else {
			gates[2].Detail = fmt.Sprintf("%s names no rollback", sop.ID)
		}
	} else if lookupErr != nil {
		gates[0].Detail = "the SOP could not be read: " + lookupErr.Error()
		gates[2].Detail = "the SOP could not be read, so no known rollback"
	} else {
		gates[0].Detail = fmt.Sprintf("no SOP in the catalog covers %s", p.Action)
		gates[2].Detail = "no SOP, so no known rollback"
	}

	// Every gate the persona requires, and every gate this reviewer checks,
	// must pass.
	var failed []string
	for _, g := range gates {
		if !g.Passed {
			failed = append(failed, g.Name)
		}
	}
	if len(failed) == 0 {
		res.Decision = gated.DecisionApprove
		res.Notes = fmt.Sprintf("%s covers %s on this target and its rollback is known.", sop.ID, p.Action)
	} else {
		res.Decision = gated.DecisionReject
		if lookupErr != nil {
			res.Notes = "The SOP could not be read through gated, so it cannot be relied on: " + lookupErr.Error() + "."
		} else if stretched != nil {
			res.Notes = fmt.Sprintf("%s does not cover %s: none of its action patterns matches it word for word; write an SOP for this action or route the change to a human.", stretched.ID, p.Action)
		} else if sop == nil {
			res.Notes = fmt.Sprintf("No SOP covers %s; write one or route the change to a human.", p.Action)
		} else {
			res.Notes = fmt.Sprintf("Gates failed: %s.", strings.Join(failed, ", "))
		}
	}
	res.Text = render(res)
	return res, nil
}

// fetchSOP reads an SOP through the host's get_sop_text tool.
func fetchSOP(ctx context.Context, req *sdk.Request, id string) (*gated.SOP, error) {
	raw, err := req.CallTool(ctx, sdk.ToolGetSOPText, sopArgs{ID: id})
	if err != nil {
		return nil, err
	}
	var s gated.SOP
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("reading %s's answer: %w", sdk.ToolGetSOPText, err)
	}
	if s.ID != id {
		return nil, fmt.Errorf("asked for %s, got %q", id, s.ID)
	}
	return &s, nil
}

// sopArgs are the arguments of get_sop_text.
type sopArgs struct {
	ID string `json:"id"`
}

// ParallelWindow is how far back an approved change on the same target
// fails the no_parallel_operation gate.
const ParallelWindow = 10 * time.Minute

// parallelGate checks the recent verdicts the host sent for the same
// tenant and target: an approval inside ParallelWindow fails the gate.
func parallelGate(req *sdk.Request) gated.GateResult {
	g := gated.GateResult{Name: "no_parallel_operation"}
	var history []gated.Verdict
	if len(req.Policy.History) > 0 {
		if err := json.Unmarshal(req.Policy.History, &history); err != nil {
			g.Detail = "the verdict history could not be read: " + err.Error()
			return g
		}
	}
	now := time.Now()
	for _, v := range history {
		if v.Approved && now.Sub(v.DecidedAt) < ParallelWindow {
			g.Detail = fmt.Sprintf("proposal %s (%s) was approved on this target at %s", v.ProposalID, v.Action, v.DecidedAt.Format(time.RFC3339))
			return g
		}
	}
	g.Passed = true
	g.Detail = fmt.Sprintf("%d recent verdicts on this target, none approved in the last %s", len(history), ParallelWindow)
	return g
}

func render(res *sdk.Response) string {
	n := len(res.Decision) + len(res.Notes) + 32
	for _, g := range res.Gates {
		n += len(g.Name) + len(g.Detail) + 16
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString("Decision: ")
	b.WriteString(string(res.Decision))
	b.WriteString("\nGates:\n")
	for _, g := range res.Gates {
		state := "fail"
		if g.Passed {
			state = "pass"
		}
		b.WriteString("- ")
		b.WriteString(g.Name)
		b.WriteString(": ")
		b.WriteString(state)
		b.WriteString(" — ")
		b.WriteString(g.Detail)
		b.WriteString("\n")
	}
	b.WriteString("Notes: ")
	b.WriteString(res.Notes)
	b.WriteString("\n")
	return b.String()
}
