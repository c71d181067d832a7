package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/plugins/internal/wire"
	"github.com/gated/gated/plugins/pluginv1"
)

// Serve runs the plugin until the host stops it. It does not return: the
// process exits when the host closes the connection, kills the plugin, or
// dies (the watchdog notices a new parent and exits).
func Serve(r Reviewer) {
	logger := hclog.New(&hclog.LoggerOptions{
		Name:       "plugin",
		Output:     os.Stderr,
		JSONFormat: true,
		Level:      hclog.Info,
	})
	go watchParent(os.Getppid(), time.Second)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  wire.Handshake,
		VersionedPlugins: wire.PluginSets(&server{impl: r}),
		Logger:           logger,
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			opts = append(opts,
				grpc.MaxRecvMsgSize(wire.MaxMessageBytes),
				grpc.MaxSendMsgSize(wire.MaxMessageBytes))
			return grpc.NewServer(opts...)
		},
	})
}

// watchParent exits the plugin when its parent goes away: a plugin never
// outlives its host, even when the host is killed with SIGKILL.
func watchParent(parent int, every time.Duration) {
	for range time.Tick(every) {
		if os.Getppid() != parent {
			fmt.Fprintf(os.Stderr, "gated plugin: host process %d is gone; exiting\n", parent)
			os.Exit(3)
		}
	}
}

// server adapts a Reviewer to the generated gRPC interface.
type server struct {
	pluginv1.UnimplementedReviewerServer
	impl Reviewer
}

func (s *server) Describe(ctx context.Context, _ *pluginv1.DescribeRequest) (out *pluginv1.DescribeResponse, err error) {
	defer recoverInto(&err)
	d, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, err
	}
	return &pluginv1.DescribeResponse{
		Name: d.Name, Version: d.Version, Personas: d.Personas, Models: d.Models,
		MaxConcurrency: uint32(max(d.MaxConcurrency, 0)),
	}, nil
}

func (s *server) Review(ctx context.Context, in *pluginv1.ReviewRequest) (out *pluginv1.ReviewResponse, err error) {
	defer recoverInto(&err)
	req, err := requestFromWire(in)
	if err != nil {
		return nil, err
	}
	res, err := s.impl.Review(ctx, req)
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, fmt.Errorf("reviewer returned no response")
	}
	return responseToWire(res), nil
}

// recoverInto turns a panic in the reviewer into an error for this one
// review; the host reads it as an error verdict.
func recoverInto(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("reviewer panicked: %v\n%s", r, debug.Stack())
	}
}

func requestFromWire(in *pluginv1.ReviewRequest) (*Request, error) {
	var p engine.Proposal
	if err := json.Unmarshal(in.GetProposalJson(), &p); err != nil {
		return nil, fmt.Errorf("decoding proposal: %w", err)
	}
	req := &Request{
		ReviewID:     in.GetReviewId(),
		Proposal:     &p,
		ProposalJSON: in.GetProposalJson(),
		Deadline:     time.UnixMilli(in.GetDeadlineUnixMs()),
	}
	if pp := in.GetPersona(); pp != nil {
		req.Persona = Persona{
			Name: pp.GetName(), SystemPrompt: pp.GetSystemPrompt(), Model: pp.GetModel(),
			MaxTurns: int(pp.GetMaxTurns()), RequiredGates: pp.GetRequiredGates(),
			PermissionMode: pp.GetPermissionMode(),
		}
		for _, t := range pp.GetTools() {
			req.Persona.Tools = append(req.Persona.Tools, Tool{Name: t.GetName(), Description: t.GetDescription(), InputSchema: t.GetInputSchemaJson()})
		}
	}
	if pc := in.GetPolicy(); pc != nil {
		req.Policy = Policy{Revision: pc.GetRevision(), Why: pc.GetWhy(), DeniedTools: pc.GetDeniedTools(), History: pc.GetHistoryJson()}
		req.Policy.SOP = SOPFromWire(pc.GetSop())
	}
	return req, nil
}

// SOPFromWire converts a wire SOP; nil stays nil.
func SOPFromWire(s *pluginv1.Sop) *engine.SOP {
	if s == nil {
		return nil
	}
	return &engine.SOP{ID: s.GetId(), Title: s.GetTitle(), Actions: s.GetActions(), Rollback: s.GetRollback(), Steps: s.GetSteps()}
}

func responseToWire(r *Response) *pluginv1.ReviewResponse {
	out := &pluginv1.ReviewResponse{
		Text: r.Text, SopId: r.SOPID, RollbackPath: r.RollbackPath, Notes: r.Notes, Model: r.Model,
		Turns: uint32(max(r.Turns, 0)), MissingWork: r.MissingWork, NextRoundGuidance: r.NextRoundGuidance,
		Confidence: r.Confidence,
		Usage:      &pluginv1.Usage{PromptTokens: uint32(max(r.Tokens.Prompt, 0)), CompletionTokens: uint32(max(r.Tokens.Completion, 0))},
	}
	switch r.Decision {
	case engine.DecisionApprove:
		out.Decision = pluginv1.Decision_DECISION_APPROVE
	case engine.DecisionReject:
		out.Decision = pluginv1.Decision_DECISION_REJECT
	}
	for _, g := range r.Gates {
		out.Gates = append(out.Gates, &pluginv1.Gate{Name: g.Name, Passed: g.Passed, Detail: g.Detail})
	}
	for _, c := range r.Criteria {
		out.Criteria = append(out.Criteria, &pluginv1.CriterionResult{Id: c.ID, Pass: c.Pass, Confidence: c.Confidence, Reason: c.Reason, Refs: c.Refs})
	}
	for _, c := range r.Comments {
		out.Comments = append(out.Comments, &pluginv1.Comment{Path: c.Path, Line: uint32(max(c.Line, 0)), Body: c.Body})
	}
	return out
}
