package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/reviewtext"
	"github.com/gated/gated/internal/textcut"
)

// reviewOne runs one reviewer's review under its own id and deadline and
// reads the answer with the host's authority. Every review of a quorum
// runs through it, concurrently with the others.
//
// Its frame is on the goroutine's stack for the whole review, beside the
// frames under it that wait on the reviewer, and a review in flight keeps
// that stack: what comes before the call and after it is in methods of
// its own (reviewStarted, reviewRequest, reviewAnswered), so that their
// locals are not part of the frame that waits.
func (r *pass) reviewOne(ctx context.Context, c *candidate, n int, history []gated.Verdict) reviewResult {
	reviewID := newReviewID()
	// The deadline is wall-clock time: the injected Clock only stamps
	// verdicts and events.
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	deadline, _ := rctx.Deadline()
	r.reviewStarted(ctx, c, n, reviewID, deadline)
	started := time.Now()
	res, err := c.reviewer.Review(rctx, r.reviewRequest(c, reviewID, deadline, history))
	return r.reviewAnswered(ctx, rctx, c, reviewID, res, err, time.Since(started))
}

// reviewStarted records the review_started event of a review. The event
// is held with the others until the verdict seals the trail, not written
// before the reviewer is asked: a reviewer only reads, so a crash in the
// review loses nothing the trail must prove, and the redelivery reviews
// again and records it.
func (r *pass) reviewStarted(ctx context.Context, c *candidate, n int, reviewID string, deadline time.Time) {
	persona := c.persona
	startedData := map[string]any{
		"review_id": reviewID, "persona": persona.Name, "plugin": persona.Plugin,
		"tools": c.pd.ReviewerTools, "deadline": deadline,
	}
	if n > 1 {
		startedData["quorum"] = n
	}
	// Who reviews, as far as the host knows before the review: enough for
	// a replay to tell whether the same reviewer would review again.
	if persona.Revision != "" {
		startedData["persona_revision"] = persona.Revision
	}
	if persona.Model != "" {
		startedData["model"] = persona.Model
	}
	r.log.recordBestEffort(ctx, gated.EventReviewStarted, startedData)
}

// reviewRequest is what the reviewer of c is asked.
func (r *pass) reviewRequest(c *candidate, reviewID string, deadline time.Time, history []gated.Verdict) ReviewRequest {
	return ReviewRequest{
		ReviewID:       reviewID,
		Proposal:       r.p,
		ProposalJSON:   r.d.Data,
		Persona:        c.persona,
		Tools:          c.pd.ReviewerTools,
		DeniedTools:    c.pd.DeniedTools,
		SOP:            c.pd.SOP,
		History:        othersOf(history, r.id),
		PolicyRevision: c.pd.Revision,
		Why:            c.pd.Review.Why,
		Deadline:       deadline,
		Run:            r.runContext(),
		Audit:          r.log.recordBestEffort,
	}
}

// reviewAnswered reads what the reviewer of c answered, or how its review
// failed, records review_done, and returns the review's part of the
// verdict.
func (r *pass) reviewAnswered(ctx, rctx context.Context, c *candidate, reviewID string, res ReviewResult, err error, latency time.Duration) reviewResult {
	persona, timeout := c.persona, c.timeout
	out := reviewResult{name: persona.Name}
	if err != nil {
		// The reviewer's error is the operator's, in the audit record
		// below and in the host's log: the verdict says in gated's own
		// words that the reviewer failed and how, never what the error
		// says (a plugin's panic carries its stack and build paths).
		var failure ReviewFailure
		var plugin string
		out.outcome, failure, plugin = reviewFailure(rctx, err, persona)
		r.log.recordBestEffort(ctx, gated.EventReviewDone, map[string]any{
			"review_id": reviewID, "plugin": plugin, "outcome": out.outcome, "failure": failure,
			"error": textcut.Clip(err.Error(), maxReviewErrorBytes), "latency_ms": ms(latency),
		})
		out.why, out.failure = failureSentence(plugin, persona, failure, timeout)
		// A failed review is listed as a rejection that says what failed:
		// it never counts towards an approval.
		out.review = gated.Review{
			Plugin: plugin, Persona: persona.Name, Decision: gated.DecisionReject,
			Notes: "review failed: " + out.why, LatencyMS: ms(latency),
		}
		return out
	}

	rev, approved, why := Judge(res, persona)
	rev.LatencyMS = ms(latency)
	out.outcome = gated.OutcomeRejected
	if approved {
		out.outcome = gated.OutcomeApproved
	}
	if r.run != nil {
		out.outcome, why = r.run.judgeRun(&rev, approved, why)
		if out.outcome == gated.OutcomeError {
			out.failure = why
		}
	}
	// The reviewer as the verdict names it (Judge): what it reports about
	// itself, bounded.
	done := map[string]any{
		"review_id": reviewID, "plugin": rev.Plugin, "plugin_version": rev.PluginVersion,
		"pid": res.PID, "decision": rev.Decision, "gates": rev.Gates,
		"missing_gates": rev.MissingGates, "latency_ms": rev.LatencyMS, "why": why,
	}
	if rev.Model != "" {
		done["model"] = rev.Model
	}
	if r.run != nil {
		done["outcome"], done["criteria"], done["missing_work"] = out.outcome, rev.Criteria, len(rev.MissingWork)
	}
	r.log.recordBestEffort(ctx, gated.EventReviewDone, done)
	out.review, out.judged, out.why = rev, true, why
	return out
}

// Judge applies the host's decision authority to a reviewer's answer. It
// approves only when the text approves (ParseDecision), the structured
// decision agrees, the text's gate lines agree with the structured gates
// (CheckGateLines), and every gate the persona requires is reported as
// passed. The returned reason is one sentence for the verdict.
//
// The review names the reviewer by res.Plugin, and keeps what the reviewer
// reports about itself (res.PluginVersion, res.Model) as one short line of
// printable ASCII (at most 128 bytes), as it does res.Plugin: the
// verdict and its grant carry them, and a tenant reads both.
func Judge(res ReviewResult, persona *Persona) (gated.Review, bool, string) {
	text := res.Text
	if len(text) > gated.MaxDecisionTextBytes {
		text = strings.ToValidUTF8(text[:gated.MaxDecisionTextBytes], "")
	}
	decision, parsed, overruled := readDecision(res.Text)
	rev := gated.Review{
		Plugin: reviewtext.SelfReported(res.Plugin), PluginVersion: reviewtext.SelfReported(res.PluginVersion), Persona: persona.Name,
		Model: reviewtext.SelfReported(res.Model), DecisionText: text, Decision: decision, Gates: res.Gates,
		SOPID: res.SOPID, RollbackPath: res.RollbackPath, Notes: res.Notes,
		Criteria: res.Criteria, Comments: res.Comments, MissingWork: res.MissingWork,
		NextRoundGuidance: res.NextRoundGuidance, Warnings: res.Warnings, Confidence: res.Confidence,
		Turns: res.Turns, Tokens: res.Tokens,
	}
	who := fmt.Sprintf("reviewer %s (persona %s)", rev.Plugin, persona.Name)
	if decision != gated.DecisionApprove {
		// A text whose first line approves and a later line overrules is
		// named by that line: the reviewer's notes may say "approved".
		if note := firstSentence(res.Notes); note != "" && !overruled {
			return rev, false, fmt.Sprintf("%s rejected: %s", who, note)
		}
		return rev, false, fmt.Sprintf("%s did not approve: %s", who, parsed)
	}
	if res.Decision != gated.DecisionApprove {
		rev.Decision = gated.DecisionReject
		return rev, false, fmt.Sprintf("%s wrote an approval but reported decision %q; a disagreement is a rejection", who, res.Decision)
	}
	// A gate passes only if every report of it passed: a reviewer that
	// says both pass and fail has not said pass.
	passed := make(map[string]bool, len(res.Gates))
	for _, g := range res.Gates {
		prev, seen := passed[g.Name]
		passed[g.Name] = g.Passed && (!seen || prev)
	}
	for _, g := range persona.RequiredGates {
		if !passed[g] {
			rev.MissingGates = append(rev.MissingGates, g)
		}
	}
	if len(rev.MissingGates) > 0 {
		rev.Decision = gated.DecisionReject
		return rev, false, fmt.Sprintf("%s approved without passing required gates: %s", who, strings.Join(rev.MissingGates, ", "))
	}
	if err := gated.CheckGateLines(res.Text, res.Gates); err != nil {
		rev.Decision = gated.DecisionReject
		return rev, false, fmt.Sprintf("%s approved, but its text and its gates disagree: %v; a disagreement is a rejection", who, err)
	}
	return rev, true, fmt.Sprintf("%s approved with all %d required gates passed", who, len(persona.RequiredGates))
}

func firstSentence(s string) string {
	s = reviewtext.FirstLine(s)
	if len(s) > 240 {
		s = s[:240] + "…"
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func newReviewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "rv_" + hex.EncodeToString(b[:])
}

// othersOf is history without the entries of proposal id. An entry of the
// proposal under review is what a decision of it left before crashing
// short of storing its verdict; the policy already passes over it
// (parallel_operation compares proposal ids), and a reviewer shown it
// would judge the proposal to collide with itself.
func othersOf(history []gated.Verdict, id string) []gated.Verdict {
	if !slices.ContainsFunc(history, func(v gated.Verdict) bool { return v.ProposalID == id }) {
		return history
	}
	return slices.DeleteFunc(slices.Clone(history), func(v gated.Verdict) bool { return v.ProposalID == id })
}

// readDecision is ParseDecision that also reports whether the first line
// approved and a later line turned the text into a rejection, so that the
// verdict can name that line rather than the reviewer's notes.
func readDecision(text string) (d gated.ReviewDecision, why string, overruled bool) {
	approve, why, overruled := reviewtext.Read(text)
	if approve {
		return gated.DecisionApprove, why, overruled
	}
	return gated.DecisionReject, why, overruled
}
