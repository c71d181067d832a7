package mcpgate

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
)

// forward sends an allowed call upstream, over the upstream session of
// the agent session that sent req, within the call timeout. v is gated's approval,
// whose grant takeGrant has used, or nil for a read that passed without
// a round trip.
func (g *Gate) forward(ctx context.Context, req *mcp.CallToolRequest, m Mapping, c Call, v *gated.Verdict) (*mcp.CallToolResult, error) {
	ctx, cancel := g.withDeadline(ctx)
	defer cancel()
	up, err := g.up.of(ctx, req.Session)
	if err != nil {
		return upstreamFailure(m.Tool, v, timedOut(ctx, err)), nil
	}
	defer g.up.during(req.Session, ctx)()
	params := &mcp.CallToolParams{Name: m.Tool, Arguments: c.Forward}
	if token := req.Params.GetProgressToken(); token != nil {
		// The upstream's progress comes back under the agent's token
		// (clientOptions). Set as read: SetProgressToken panics on a
		// number, which JSON decodes as float64.
		params.Meta = mcp.Meta{"progressToken": token}
	}
	res, err := up.CallTool(ctx, params)
	if err != nil {
		return upstreamFailure(m.Tool, v, timedOut(ctx, err)), nil
	}
	if v != nil {
		res = withMeta(res, verdictMeta(v))
	}
	return res, nil
}

// withMeta is res with verdict as its _meta["gated/verdict"].
func withMeta(res *mcp.CallToolResult, verdict map[string]any) *mcp.CallToolResult {
	if res == nil {
		return nil
	}
	out := *res
	meta := mcp.Meta{}
	for k, x := range res.Meta {
		meta[k] = x
	}
	meta[VerdictMetaKey] = verdict
	out.Meta = meta
	return &out
}

// upstreamFailure is the tool result of a call the upstream failed on
// after gated's approval v, or after the policy let a read pass (v nil).
func upstreamFailure(tool string, v *gated.Verdict, err error) *mcp.CallToolResult {
	what := "a read call gated's policy allows"
	if v != nil {
		what = "gated's approval (verdict " + v.Tenant + "." + v.ProposalID + ")"
	}
	return refusal(fmt.Sprintf("the upstream server failed on %s after %s: %v", tool, what, err), v)
}

// notApproved is the tool result of a call gated did not approve.
func notApproved(tool, key string, v *gated.Verdict, err error) *mcp.CallToolResult {
	var text string
	switch {
	case v != nil && v.Outcome != gated.OutcomeApproved:
		text = fmt.Sprintf("gated did not approve %s: %s at stage %s: %s (verdict %s.%s). The call was not made.",
			tool, v.Outcome, v.Stage, v.Reason, v.Tenant, v.ProposalID)
	case errors.Is(err, fleet.ErrNoVerdict):
		text = fmt.Sprintf("gated gave no verdict on %s in time (proposal %s): the call was not made.", tool, key)
	default:
		text = fmt.Sprintf("gated could not decide %s (proposal %s): %v. The call was not made.", tool, key, err)
	}
	return refusal(text, v)
}

// refusal is an isError tool result with text, and the verdict in its
// _meta when there is one.
func refusal(text string, v *gated.Verdict) *mcp.CallToolResult {
	res := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	if v != nil {
		res.Meta = mcp.Meta{VerdictMetaKey: verdictMeta(v)}
	}
	return res
}

func verdictMeta(v *gated.Verdict) map[string]any {
	return map[string]any{
		"tenant":      v.Tenant,
		"proposal_id": v.ProposalID,
		"outcome":     string(v.Outcome),
		"stage":       string(v.Stage),
		"reason":      v.Reason,
	}
}

// progressReporter returns a function that sends a progress
// notification with msg to the caller, or nil when the call carries no
// progress token.
func progressReporter(ctx context.Context, req *mcp.CallToolRequest) func(msg string) {
	if req == nil || req.Session == nil || req.Params == nil {
		return nil
	}
	token := req.Params.GetProgressToken()
	if token == nil {
		return nil
	}
	var n atomic.Int64
	return func(msg string) {
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: token,
			Message:       "gated: " + msg,
			Progress:      float64(n.Add(1)),
		})
	}
}

// statusLine words one status event for a progress notification.
func statusLine(st *gated.Status) string {
	switch {
	case st.Stage == gated.StatusReviewStarted:
		s := "review started by " + st.Reviewer
		if st.Deadline != nil {
			s += ", deadline " + st.Deadline.UTC().Format(time.RFC3339)
		}
		return s
	case st.Stage == gated.StatusAwaitingOperator:
		s := "awaiting an operator's decision"
		if st.Deadline != nil {
			s += " until " + st.Deadline.UTC().Format(time.RFC3339)
		}
		if st.Reason != "" {
			s += ": " + st.Reason
		}
		return s
	case st.Verdict != nil:
		return fmt.Sprintf("decided: %s", st.Verdict.Outcome)
	}
	return string(st.Stage)
}
