package server

import (
	"context"
	"errors"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/flow"
	"github.com/gated/gated/bus/grants"
)

// startFlows opens the flow state every gated shares (bus/flow): the
// grant endpoints add each executed action to it, and the engine reads it
// for the policy when the policy can read input.session.
func (s *Server) startFlows(ctx context.Context) error {
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kv, err := flow.Setup(setupCtx, s.js, s.cfg.Replicas)
	if err != nil {
		return err
	}
	s.flows = flow.New(kv)
	return nil
}

// recordExecuted adds an action whose grant is being used to its agent's
// flow state, with the labels the policy served gives its action and
// those its proposal added; an action with none is not recorded.
func (s *Server) recordExecuted(ctx context.Context, use grants.Executed) error {
	cfg := s.live.Flows()
	if cfg == nil {
		return errors.New("no policy is loaded")
	}
	labels := cfg.LabelsOf(use.Action, use.Labels)
	if len(labels) == 0 {
		return nil
	}
	a := gated.ExecutedAction{ProposalID: use.ProposalID, Action: use.Action, Labels: labels, At: use.At}
	return s.flows.Record(ctx, use.Tenant, use.Agent, a, cfg.Window, cfg.MaxRecent)
}

// policyReadsSession says whether the policy served, or the shadow, can
// read input.session now.
func (s *Server) policyReadsSession() bool {
	return s.live.ReadsSession() || (s.shadow != nil && s.shadow.ReadsSession())
}
