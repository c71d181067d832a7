package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// gate is gated's intake (bustest.StartGated: the real engine and default
// policy, no reviewer plugin) and a fleet client of it.
type gate struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	res    *bus.Resources
	client *fleet.Client
}

func clientOf(t *testing.T, g *bustest.Gated) *gate {
	t.Helper()
	client, err := fleet.NewClient(g.NC)
	if err != nil {
		t.Fatal(err)
	}
	return &gate{nc: g.NC, js: g.JS, res: g.Resources, client: client}
}

// startGate starts gated's intake, its decisions wrapped by wrap when not
// nil, and a client of it.
func startGate(t *testing.T, wrap func(bus.Decider) bus.Decider, cfg bus.Config) *gate {
	t.Helper()
	return clientOf(t, bustest.StartGated(t, wrap, cfg))
}

// startHeldGate is startGate with every proposal held by k until it opens.
func startHeldGate(t *testing.T, k *bustest.Gatekeeper) *gate {
	t.Helper()
	return clientOf(t, bustest.StartHeldGated(t, k))
}

// proposal is a raw proposal of tenant acme; extra is spliced in as more
// top-level fields.
func proposal(id, class, action string, extra string) []byte {
	radius := ""
	if class != "read" {
		radius = `,"blast_radius":"single_device"`
	}
	return fmt.Appendf(nil, `{"v":1,"id":%q,"tenant":"acme","action":%q,"class":%q,"target":{"service":"nginx"}%s%s}`,
		id, action, class, radius, extra)
}

func (g *gate) propose(t *testing.T, data []byte) *engine.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	v, err := g.client.ProposeRaw(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// runVerdict is the verdict on round of run runID that proposal id got:
// a rejection that sends next (engine.NextContinuation or
// engine.NextEscalation).
func runVerdict(id, runID string, round int, next string) *engine.Verdict {
	v := &engine.Verdict{
		V: engine.SchemaVersion, ProposalID: id, Tenant: "acme", Action: "run_review", Kind: engine.KindRun,
		Outcome: engine.OutcomeRejected, Stage: engine.StageReview, Reason: "go test ./... fails",
		DecidedAt: time.Date(2026, 3, 1, 12, round, 0, 0, time.UTC), AuditSeq: uint64(100 + round),
		ProposalSHA256: fmt.Sprintf("%064d", round),
		Run: &engine.RunVerdict{
			RunID: runID, TaskID: "task-7", Worker: "coder-1", Round: round, MaxRounds: 3,
			Criteria: []engine.CriterionEval{
				{ID: "tests", Pass: false, Reason: `"go test ./..." exited 1, expected 0`, Kind: engine.CriterionCommandResult, Required: true, JudgedBy: engine.JudgedByPolicy},
				{ID: "lint", Pass: true, Kind: engine.CriterionCommandResult, JudgedBy: engine.JudgedByPolicy},
			},
			MissingWork:       []string{"make go test ./... pass"},
			NextRoundGuidance: "fix the failing test first",
			Findings:          []engine.Finding{{ID: fmt.Sprintf("r%d-f1", round), Body: "make go test ./... pass", Criterion: "tests"}},
			Next:              next,
		},
	}
	switch next {
	case engine.NextContinuation:
		v.Run.FollowUpSubject = wire.ContinuationSubject("acme", runID)
	case engine.NextEscalation:
		v.Run.FollowUpSubject = wire.EscalationSubject("acme")
	}
	return v
}
