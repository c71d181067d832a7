package mcpgate

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/engine/grant"
)

// takeGrant verifies v's grant against p, the proposal of the call, and
// uses it, then reports the call started. It returns the grant's gid
// when the call may be forwarded, else the refusal to return instead:
// the call is not made.
func (g *Gate) takeGrant(ctx context.Context, m Mapping, p *gated.Proposal, v *gated.Verdict) (string, *mcp.CallToolResult) {
	if g.cfg.NoGrantCheck {
		return "", nil
	}
	refuse := func(err error) *mcp.CallToolResult {
		g.cfg.Log.Info("approved call's grant refused", zap.String("tool", m.Tool), zap.String("proposal", p.Tenant+"."+p.ID), zap.Error(err))
		return refusal(fmt.Sprintf("gated approved %s (verdict %s.%s), but its grant was refused: %v. The call was not made.",
			m.Tool, v.Tenant, v.ProposalID, err), v)
	}
	if v.Grant == "" {
		err := &grant.Error{Member: "grant", Reason: "is missing from the approval"}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportWait)
		_ = g.cfg.Grants.Report(rctx, p.Tenant, p.ID, "", gated.ExecutionRefused, err.Error())
		cancel()
		return "", refuse(err)
	}
	want, err := fleet.GrantExpect(p)
	if err != nil {
		return "", refuse(err)
	}
	c, err := g.cfg.Grants.Check(ctx, v.Grant, want, "gated mcp/"+g.cfg.Agent)
	if err != nil {
		return "", refuse(err)
	}
	if err := g.cfg.Grants.Report(ctx, c.Tenant, c.ProposalID, c.GID, gated.ExecutionStarted, ""); err != nil {
		return "", refuse(err)
	}
	return c.GID, nil
}

// refuseArguments logs and audits the refusal of a call whose arguments
// Read refused: no proposal is made, and gated records the refusal as
// the executor's (grant.refused, by executor), under id, the proposal id
// the call would have had.
func (g *Gate) refuseArguments(ctx context.Context, m Mapping, id string, why error) {
	g.cfg.Log.Info("refused a malformed call", zap.String("tool", m.Tool), zap.String("call", g.cfg.Tenant+"."+id), zap.Error(why))
	if g.cfg.Grants == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportWait)
	defer cancel()
	if err := g.cfg.Grants.Report(rctx, g.cfg.Tenant, id, "", gated.ExecutionRefused, "gated mcp refused the call of "+m.Tool+": "+why.Error()); err != nil {
		g.cfg.Log.Warn("auditing a refused call", zap.String("call", g.cfg.Tenant+"."+id), zap.Error(err))
	}
}

// reportWait bounds an outcome report sent after the call, which
// outlives the caller's cancellation by that much.
const reportWait = 5 * time.Second

// finish reports the end of a forwarded approval: succeeded, or failed
// when the upstream failed or answered isError.
func (g *Gate) finish(ctx context.Context, p *gated.Proposal, gid string, res *mcp.CallToolResult) {
	if gid == "" {
		return
	}
	status, text := gated.ExecutionSucceeded, ""
	if res == nil || res.IsError {
		status, text = gated.ExecutionFailed, "the tool result is an error"
		if res != nil {
			for _, c := range res.Content {
				if tc, ok := c.(*mcp.TextContent); ok && tc.Text != "" {
					text = tc.Text
					break
				}
			}
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportWait)
	defer cancel()
	if err := g.cfg.Grants.Report(rctx, p.Tenant, p.ID, gid, status, text); err != nil {
		g.cfg.Log.Warn("reporting a call's outcome", zap.String("proposal", p.Tenant+"."+p.ID), zap.Error(err))
	}
}
