package bustest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	gaudit "github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/policies"
)

// Fleet is gated's intake (StartGated) and a fleet client of it: what an
// agent fleet sees of gated.
type Fleet struct {
	*Gated
	// Client is a fleet client on the Gated's connection.
	Client *fleet.Client
}

// StartFleet starts gated's intake as StartGated does, its decisions
// wrapped by wrap when not nil, and a fleet client of it.
func StartFleet(t *testing.T, wrap func(intake.Decider) intake.Decider, cfg bus.Config) *Fleet {
	t.Helper()
	return fleetOf(t, StartGated(t, wrap, cfg))
}

// StartHeldFleet is StartFleet with every proposal held by k until it
// opens (StartHeldGated).
func StartHeldFleet(t *testing.T, k *Gatekeeper) *Fleet {
	t.Helper()
	return fleetOf(t, StartHeldGated(t, k))
}

func fleetOf(t *testing.T, g *Gated) *Fleet {
	t.Helper()
	client, err := fleet.NewClient(g.NC)
	if err != nil {
		t.Fatal(err)
	}
	return &Fleet{Gated: g, Client: client}
}

// Propose sends the raw proposal data through the fleet client and returns
// its verdict; the test fails if none comes within 20 s.
func (f *Fleet) Propose(t *testing.T, data []byte) *gated.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	v, err := f.Client.ProposeRaw(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Proposal is a raw proposal of tenant acme on target service nginx, with
// a single-device blast radius unless class is read; extra is spliced in
// as more top-level fields (`,"flags":{...}`).
func Proposal(id, class, action string, extra string) []byte {
	radius := ""
	if class != "read" {
		radius = `,"blast_radius":"single_device"`
	}
	return fmt.Appendf(nil, `{"v":1,"id":%q,"tenant":"acme","action":%q,"class":%q,"target":{"service":"nginx"}%s%s}`,
		id, action, class, radius, extra)
}

// AuditEvents returns the names of the events recorded in the audit stream
// for proposal id of tenant, in stream order.
func AuditEvents(t *testing.T, audit jetstream.Stream, tenant, id string) []string {
	t.Helper()
	var events []string
	for _, ev := range AuditRecords(t, audit, tenant, id) {
		events = append(events, ev.Event)
	}
	return events
}

// AuditRecords returns the events recorded in the audit stream for
// proposal id of tenant, in stream order.
func AuditRecords(t *testing.T, audit jetstream.Stream, tenant, id string) []gated.AuditEvent {
	t.Helper()
	var events []gated.AuditEvent
	for _, rec := range TenantAuditRecords(t, audit, tenant) {
		if rec.ProposalID == id {
			events = append(events, rec.Events()...)
		}
	}
	return events
}

// TenantAuditRecords returns every record the audit stream holds for
// tenant, in stream order.
func TenantAuditRecords(t *testing.T, audit jetstream.Stream, tenant string) []*gaudit.Record {
	t.Helper()
	ctx := t.Context()
	cons, err := audit.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{wire.AuditSubjectPrefix + tenant + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := audit.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var recs []*gaudit.Record
	if info.State.Msgs == 0 {
		return nil
	}
	batch, err := cons.FetchNoWait(int(info.State.Msgs))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		rec, err := gaudit.DecodeRecord(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			t.Fatalf("audit message %s is not a record: %v", m.Subject(), err)
		}
		recs = append(recs, rec)
	}
	return recs
}

// runEpoch is when round 0 of RunVerdict's runs was decided.
var runEpoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// RunVerdict is the verdict of tenant acme on round of run runID that
// proposal id got: a rejection that sends next (gated.NextContinuation or
// gated.NextEscalation), or an approval when next is empty.
func RunVerdict(id, runID string, round int, next string) *gated.Verdict {
	v := &gated.Verdict{
		V: gated.SchemaVersion, ProposalID: id, Tenant: "acme", Action: "run_review", Kind: gated.KindRun,
		Outcome: gated.OutcomeRejected, Stage: gated.StageReview, Reason: "go test ./... fails",
		DecidedAt: runEpoch.Add(time.Duration(round) * time.Minute), AuditSeq: uint64(100 + round),
		ProposalSHA256: fmt.Sprintf("%064d", round),
		Run: &gated.RunVerdict{
			RunID: runID, TaskID: "task-7", Worker: "coder-1", Round: round, MaxRounds: 3,
			Criteria: []gated.CriterionEval{
				{ID: "tests", Pass: false, Reason: `"go test ./..." exited 1, expected 0`, Kind: gated.CriterionCommandResult, Required: true, JudgedBy: gated.JudgedByPolicy},
				{ID: "lint", Pass: true, Kind: gated.CriterionCommandResult, JudgedBy: gated.JudgedByPolicy},
			},
			MissingWork:       []string{"make go test ./... pass"},
			NextRoundGuidance: "fix the failing test first",
			Findings:          []gated.Finding{{ID: fmt.Sprintf("r%d-f1", round), Body: "make go test ./... pass", Criterion: "tests"}},
			Next:              next,
		},
	}
	switch next {
	case gated.NextContinuation:
		v.Run.FollowUpSubject = wire.ContinuationSubject("acme", runID)
	case gated.NextEscalation:
		v.Run.FollowUpSubject = wire.EscalationSubject("acme")
	case "":
		v.Outcome, v.Approved, v.Reason = gated.OutcomeApproved, true, "every criterion passes"
		v.Run.MissingWork, v.Run.Findings, v.Run.NextRoundGuidance = nil, nil, ""
	}
	return v
}

// skipReviewPolicy is the default bundle configured to approve
// host_restart_service without review (config skip_review_actions), so
// that a write is approved, with its grant, with no reviewer plugin
// running.
var skipReviewPolicy = sync.OnceValues(func() (*policies.Evaluator, error) {
	b, err := policies.Default()
	if err != nil {
		return nil, err
	}
	b.Data["gated"].(map[string]any)["config"].(map[string]any)["skip_review_actions"] = []any{"host_restart_service"}
	return policies.Compile(context.Background(), b)
})

// StartGrantingFleet starts an in-process gated that signs grants valid
// for five minutes and approves host_restart_service without review, and
// a fleet client on its connection.
func StartGrantingFleet(t *testing.T) (*Gated, *fleet.Client) {
	t.Helper()
	pol, err := skipReviewPolicy()
	if err != nil {
		t.Fatal(err)
	}
	g := StartGrantingGated(t, bus.Config{}, 5*time.Minute, pol)
	c, err := fleet.NewClient(g.NC)
	if err != nil {
		t.Fatal(err)
	}
	return g, c
}
