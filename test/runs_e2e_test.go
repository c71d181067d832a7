package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/engine/wire"
)

// runsIn counts the follow-ups GATED_RUNS holds on subject.
func runsIn(t *testing.T, natsURL, subject string) uint64 {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), wire.RunsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// TestOrchestratorExample runs examples/orchestrator against gated: the
// worker's run is sent back twice and accepted in round 3, and each
// rejected round sent exactly one continuation, replays included.
func TestOrchestratorExample(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "orchestrator")
	if out, err := exec.Command("go", "build", "-o", bin, "../examples/orchestrator").CombinedOutput(); err != nil {
		t.Fatalf("building examples/orchestrator: %v\n%s", err, out)
	}
	g := startGated(t)
	out, err := exec.Command(bin, "--nats-url", g.natsURL, "--run-id", "e2e-loop", "--wait", "60s").CombinedOutput()
	if err != nil {
		t.Fatalf("orchestrator: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{
		"round 1: rejected at policy", "round 2: rejected at policy", "round 3: approved at review",
		"finding r1-f1: criterion tests (command_result) failed", "finding r2-f1: criterion changelog (file_contains) failed",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "round 4") {
		t.Errorf("the loop took more than three rounds:\n%s", text)
	}
	subject := wire.ContinuationSubject("acme", "e2e-loop")
	if n := runsIn(t, g.natsURL, subject); n != 2 {
		t.Fatalf("%d continuations stored, want 2", n)
	}

	client := fleetClient(t, g.natsURL)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	v, err := client.Verdict(ctx, "acme", "e2e-loop-r3")
	if err != nil || !v.Approved || v.Run == nil || v.Run.Round != 3 {
		t.Fatalf("round 3 verdict %+v: %v", v, err)
	}
	// Another proposal under round 1's id is refused as a reused id, and
	// sends nothing.
	p := failingRun("e2e-loop", 1)
	p.ID = "e2e-loop-r1"
	if v, err := client.Propose(ctx, p); !errors.Is(err, fleet.ErrIDReused) {
		t.Fatalf("a reused id: %v (%+v)", err, v)
	}
	if n := runsIn(t, g.natsURL, subject); n != 2 {
		t.Fatalf("%d continuations after the reused id, want 2", n)
	}
}

// failingRun is round n of run runID with a failing test suite.
func failingRun(runID string, round int) *gated.Proposal {
	return &gated.Proposal{
		V: 1, ID: fmt.Sprintf("%s-r%d", runID, round), Tenant: "acme", Kind: gated.KindRun, Action: "code_change",
		Class: gated.ClassWrite, BlastRadius: gated.BlastSingleDevice,
		RequestedBy: &gated.RequestedBy{Agent: "orchestrator"},
		Run:         &gated.Run{RunID: runID, Status: gated.RunCompleted, Round: round, Worker: "coder-1", Summary: "tried again"},
		Criteria: []gated.Criterion{{ID: "tests", Description: "tests pass", Required: true, Kind: gated.CriterionCommandResult,
			Evidence: map[string]any{"command": "go test ./...", "exit_code": 1}}},
	}
}

// TestRunEscalatesAfterItsLastRound: with run_review.max_rounds 2 the
// second rejection escalates instead of continuing, once, and the run is
// closed to further rounds.
func TestRunEscalatesAfterItsLastRound(t *testing.T) {
	data := filepath.Join(t.TempDir(), "runs.yaml")
	if err := os.WriteFile(data, []byte("gated:\n  config:\n    run_review:\n      max_rounds: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGated(t, "--policy-data", data)
	client := fleetClient(t, g.natsURL)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	escalations, err := client.Escalations(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	defer escalations.Stop()

	v, err := client.Propose(ctx, failingRun("esc-1", 1))
	if !errors.Is(err, fleet.ErrReviewRejected) || v.Run.Next != gated.NextContinuation {
		t.Fatalf("round 1: %v, run %+v", err, v.Run)
	}
	// The same proposal again is a replay: the stored verdict, no second
	// continuation.
	again, err := client.Propose(ctx, failingRun("esc-1", 1))
	if !errors.Is(err, fleet.ErrReviewRejected) || again.AuditSeq != v.AuditSeq {
		t.Fatalf("replay of round 1: %v, audit seq %d, want %d", err, again.AuditSeq, v.AuditSeq)
	}
	v, err = client.Propose(ctx, failingRun("esc-1", 2))
	if !errors.Is(err, fleet.ErrReviewRejected) || v.Run.Next != gated.NextEscalation {
		t.Fatalf("round 2: %v, run %+v", err, v.Run)
	}
	esc, err := escalations.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if esc.RunID != "esc-1" || esc.Rounds != 2 || esc.MaxRounds != 2 || esc.Review.ProposalID != "esc-1-r2" || len(esc.Findings) == 0 {
		t.Errorf("escalation %+v", esc)
	}
	v, err = client.Propose(ctx, failingRun("esc-1", 3))
	if !errors.Is(err, fleet.ErrReviewRejected) || v.Run == nil || v.Run.Next != "" || !strings.Contains(v.Reason, "run_closed") {
		t.Fatalf("round 3: %v, %s", err, v.Reason)
	}
	if n := runsIn(t, g.natsURL, wire.EscalationSubject("acme")); n != 1 {
		t.Errorf("%d escalations stored, want 1", n)
	}
	if n := runsIn(t, g.natsURL, wire.ContinuationSubject("acme", "esc-1")); n != 1 {
		t.Errorf("%d continuations stored, want 1", n)
	}
}

// TestRunManualCriterionWaitsForAnOperator: a run with a required manual
// criterion is held at blocked until an operator's signed decision,
// sent with gated operator decide, approves it.
func TestRunManualCriterionWaitsForAnOperator(t *testing.T) {
	dir := t.TempDir()
	seed := filepath.Join(dir, "alice.seed")
	code, stdout, stderr := gatedCLI(t, "operator", "keygen", "--out", seed, "--id", "alice")
	if code != 0 {
		t.Fatalf("keygen: exit %d\n%s%s", code, stdout, stderr)
	}
	entry := stdout[strings.Index(stdout, "operators:"):]
	operators := filepath.Join(dir, "operators.yaml")
	if err := os.WriteFile(operators, []byte(entry), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGated(t, "--review-service", "--operators", operators)
	client := fleetClient(t, g.natsURL)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	p := failingRun("manual-1", 1)
	p.ID = "manual-1-r1"
	p.Criteria = []gated.Criterion{
		{ID: "tests", Description: "tests pass", Required: true, Kind: gated.CriterionCommandResult,
			Evidence: map[string]any{"command": "go test ./...", "exit_code": 0}},
		{ID: "signoff", Description: "the release manager agrees", Required: true, Kind: gated.CriterionManual},
	}
	v, err := client.Propose(ctx, p)
	if !errors.Is(err, fleet.ErrReviewBlocked) || v.Run == nil || len(v.Run.AwaitingOperator) != 1 {
		t.Fatalf("proposal: %v, %+v", err, v)
	}
	code, stdout, stderr = gatedCLI(t, "operator", "decide", "acme", p.ID, "--criterion", "signoff=pass",
		"--operator", "alice", "--seed-file", seed, "--nats-url", g.natsURL)
	if code != 0 {
		t.Fatalf("decide: exit %d\n%s%s", code, stdout, stderr)
	}
	v, err = client.Verdict(ctx, "acme", p.ID)
	if err != nil || v.Outcome != gated.OutcomeApproved || v.Stage != gated.StageOperator {
		t.Fatalf("stored verdict %+v: %v", v, err)
	}
	// A second decision is refused: the verdict is no longer held.
	code, stdout, stderr = gatedCLI(t, "operator", "decide", "acme", p.ID, "--criterion", "signoff=fail:changed my mind",
		"--operator", "alice", "--seed-file", seed, "--nats-url", g.natsURL)
	if code != 3 {
		t.Fatalf("second decide: exit %d, want 3\n%s%s", code, stdout, stderr)
	}
}

// strictRunsPersona is a tenant's configured run reviewer: it requires a
// gate the bundled reviewer never reports, so no run it reviews is
// approved.
const strictRunsPersona = `---
name: strict-runs
description: The run reviewer a tenant configures.
permission_mode: read-only
plugin: sop
tools:
  - get_proposal
required_gates:
  - criteria_met
  - prior_findings_closed
  - release_signoff
---
Accept a run only with a release sign-off.
`

// lenientRunsPersona is a run reviewer an orchestrator might prefer for
// its own runs: it requires one gate only.
const lenientRunsPersona = `---
name: lenient-runs
description: A lenient run reviewer an orchestrator might pick.
permission_mode: read-only
plugin: sop
tools:
  - get_proposal
required_gates:
  - criteria_met
---
Accept a run when its criteria pass.
`

// TestRunReviewerNamedByTheProposalAddsScrutiny: a run that names its own
// reviewer is still reviewed by the run reviewer the tenant configures;
// the named one reviews beside it and must approve too. Only
// run_review.reviewer_overrides lets the named reviewer replace it.
func TestRunReviewerNamedByTheProposalAddsScrutiny(t *testing.T) {
	personas := t.TempDir()
	writeFile(t, personas, "strict-runs.md", strictRunsPersona)
	writeFile(t, personas, "lenient-runs.md", lenientRunsPersona)
	run := func(id, reviewer string) *gated.Proposal {
		p := endedRun(id, "T-1", gated.RunCompleted)
		p.Reviewer = reviewer
		return p
	}
	names := func(v *gated.Verdict) string {
		var out []string
		for _, r := range v.Reviews {
			out = append(out, r.Persona)
		}
		return strings.Join(out, ",")
	}

	t.Run("configured reviewer stays", func(t *testing.T) {
		data := writeFile(t, t.TempDir(), "runs.yaml", `gated:
  config:
    run_review:
      tenants:
        acme: {personas: [strict-runs]}
`)
		g := startGated(t, "--personas", personas, "--policy-data", data)
		client := fleetClient(t, g.natsURL)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		for _, tc := range []struct{ note, id, reviewer, want string }{
			{note: "not named", id: "pick-run-1", want: "strict-runs"},
			{note: "lenient named", id: "pick-run-2", reviewer: "lenient-runs", want: "strict-runs,lenient-runs"},
		} {
			t.Run(tc.note, func(t *testing.T) {
				v, err := client.Propose(ctx, run(tc.id, tc.reviewer))
				if v == nil {
					t.Fatalf("no verdict: %v", err)
				}
				if v.Approved || v.Stage != gated.StageReview || names(v) != tc.want {
					t.Fatalf("%v: %s at %s: %s, reviewed by %q; want no approval, reviewed by %s", err, v.Outcome, v.Stage, v.Reason, names(v), tc.want)
				}
			})
		}
	})
	t.Run("override allowed", func(t *testing.T) {
		data := writeFile(t, t.TempDir(), "runs.yaml", `gated:
  config:
    run_review:
      tenants:
        acme: {personas: [strict-runs], reviewer_overrides: [lenient-runs]}
`)
		g := startGated(t, "--personas", personas, "--policy-data", data)
		client := fleetClient(t, g.natsURL)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		v, err := client.Propose(ctx, run("pick-run-3", "lenient-runs"))
		if v == nil {
			t.Fatalf("no verdict: %v", err)
		}
		if err != nil || !v.Approved || names(v) != "lenient-runs" {
			t.Fatalf("%v: %s at %s: %s, reviewed by %q; want approved by lenient-runs alone", err, v.Outcome, v.Stage, v.Reason, names(v))
		}
	})
}
