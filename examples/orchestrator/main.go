// Command orchestrator runs the loop gated's run reviews are made for: a
// worker agent does a task, the orchestrator asks gated to review the
// finished run, and a rejection comes back as a continuation that tells
// the worker what is missing, until gated accepts the run or hands it to a
// human.
//
//	go run ./examples/orchestrator --nats-url nats://127.0.0.1:4222
//
// The task is to fix a flaky test in a small simulated repository. The
// worker fixes at most --fixes-per-round of the findings it is sent each
// round (one by default), so the loop takes three rounds with the default
// policy: the tests fail, then the changelog entry is missing, then the
// run is accepted. The acceptance criteria are checked as a fleet would
// check them (the worker runs the tests, the orchestrator reads the
// files) and sent to gated as evidence; gated's policy judges them, and
// the bundled run reviewer checks that every earlier finding is resolved.
//
// It exits 0 when the run is accepted, 1 otherwise.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		// -h or --help: the flag package printed the usage, as asked.
	case err != nil:
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(1)
	}
}

type options struct {
	natsURL  string
	tenant   string
	runID    string
	worker   string
	fixes    int
	maxLoops int
	wait     time.Duration
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("orchestrator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.natsURL, "nats-url", nats.DefaultURL, "NATS server gated listens on")
	fs.StringVar(&o.tenant, "tenant", "acme", "tenant the run belongs to")
	fs.StringVar(&o.runID, "run-id", "", "run id (default: fix-flaky-<unix seconds>, so every start is a new run)")
	fs.StringVar(&o.worker, "worker", "coder-1", "the worker agent's name; it never reviews its own run")
	fs.IntVar(&o.fixes, "fixes-per-round", 1, "findings the worker resolves per round")
	fs.IntVar(&o.maxLoops, "max-loops", 10, "rounds the orchestrator runs at most, whatever gated says")
	fs.DurationVar(&o.wait, "wait", 90*time.Second, "how long one review may take, continuation included")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.runID == "" {
		o.runID = fmt.Sprintf("fix-flaky-%d", time.Now().Unix())
	}
	switch {
	case !gated.ValidTenant(o.tenant):
		return o, fmt.Errorf("--tenant %q is not a tenant token ([a-z0-9_-]{1,64})", o.tenant)
	case !gated.ValidID(o.runID) || len(o.runID) > 100:
		return o, fmt.Errorf("--run-id %q must match [A-Za-z0-9_-]{1,100}", o.runID)
	case o.fixes < 1:
		return o, fmt.Errorf("--fixes-per-round %d must be at least 1", o.fixes)
	case o.maxLoops < 1:
		return o, fmt.Errorf("--max-loops %d must be at least 1", o.maxLoops)
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(o.natsURL, nats.Name("gated-example-orchestrator"))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", o.natsURL, err)
	}
	defer nc.Close()
	client, err := fleet.NewClient(nc, fleet.WithDefaultWait(o.wait))
	if err != nil {
		return err
	}
	res, err := orchestrate(ctx, client, o, stdout)
	if err != nil {
		return err
	}
	if !res.accepted {
		return fmt.Errorf("run %s was not accepted: %s", o.runID, res.why)
	}
	return nil
}

// Gated is the part of fleet.Client the orchestrator uses.
type Gated interface {
	Propose(ctx context.Context, p *gated.Proposal) (*gated.Verdict, error)
	Continuations(ctx context.Context, tenant, runID string) (*fleet.FollowUpFeed[gated.Continuation], error)
}

// result is how a run ended.
type result struct {
	accepted bool
	rounds   int
	why      string
}

// orchestrate runs the worker and the reviews until gated accepts the run,
// rejects it for good, or escalates it.
func orchestrate(ctx context.Context, g Gated, o options, out io.Writer) (result, error) {
	feed, err := g.Continuations(ctx, o.tenant, o.runID)
	if err != nil {
		return result{}, err
	}
	defer feed.Stop()

	repo := newRepo()
	w := &worker{name: o.worker, fixes: o.fixes}
	var cont *gated.Continuation
	for round := 1; round <= o.maxLoops; round++ {
		w.work(repo, cont)
		p := proposal(o, round, repo, w, cont)
		fmt.Fprintf(out, "round %d: %s\n", round, w.lastSummary)
		v, err := g.Propose(ctx, p)
		if v == nil {
			return result{rounds: round}, fmt.Errorf("round %d: %w", round, err)
		}
		fmt.Fprintf(out, "round %d: %s at %s: %s\n", round, v.Outcome, v.Stage, v.Reason)
		if v.Run != nil {
			for _, w := range v.Run.Warnings {
				fmt.Fprintf(out, "round %d: warning: %s\n", round, w)
			}
		}
		switch {
		case v.Approved:
			return result{accepted: true, rounds: round, why: v.Reason}, nil
		case v.Run == nil || v.Run.Next == "":
			return result{rounds: round, why: v.Reason}, nil
		case v.Run.Next == gated.NextEscalation:
			return result{rounds: round, why: "escalated to a human on " + v.Run.FollowUpSubject}, nil
		}
		cctx, cancel := context.WithTimeout(ctx, o.wait)
		cont, err = nextContinuation(cctx, feed, round+1)
		cancel()
		if err != nil {
			return result{rounds: round}, fmt.Errorf("waiting for the continuation of round %d: %w", round, err)
		}
		for _, f := range cont.Findings {
			fmt.Fprintf(out, "round %d: finding %s: %s\n", round, f.ID, f.Body)
		}
	}
	return result{rounds: o.maxLoops, why: fmt.Sprintf("still not accepted after %d rounds", o.maxLoops)}, nil
}

// nextContinuation reads the feed up to the continuation that asks for
// round; the feed starts at the run's first continuation.
func nextContinuation(ctx context.Context, feed *fleet.FollowUpFeed[gated.Continuation], round int) (*gated.Continuation, error) {
	for {
		c, err := feed.Next(ctx)
		switch {
		case errors.Is(err, fleet.ErrMalformedFollowUp):
			continue
		case err != nil:
			return nil, err
		case c.Round == round:
			return c, nil
		}
	}
}

// proposal is the run review of one round.
func proposal(o options, round int, r *repo, w *worker, cont *gated.Continuation) *gated.Proposal {
	p := &gated.Proposal{
		V: gated.SchemaVersion, ID: fmt.Sprintf("%s-r%d", o.runID, round), Tenant: o.tenant,
		Kind: gated.KindRun, Action: "code_change", Class: gated.ClassWrite, BlastRadius: gated.BlastSingleDevice,
		Reason:      "fix the flaky TestDrain",
		RequestedBy: &gated.RequestedBy{Agent: "orchestrator"},
		Run: &gated.Run{
			RunID: o.runID, TaskID: "T-311", Status: gated.RunCompleted, Round: round, Worker: w.name,
			Summary: w.lastSummary, Diff: r.diff(), TestOutput: r.testOutput(),
		},
		Criteria: r.criteria(),
	}
	if cont != nil {
		p.Run.PriorReviews = []gated.PriorReview{{
			ProposalID: cont.Review.ProposalID, Round: cont.Review.Round, Findings: w.report(cont.Findings),
		}}
	}
	return p
}

// repo is the simulated repository the worker changes.
type repo struct {
	files map[string]string
	// flaky is true while TestDrain still sleeps instead of waiting.
	flaky bool
}

func newRepo() *repo {
	return &repo{
		files: map[string]string{
			"drain_test.go": "time.Sleep(10 * time.Millisecond)\n",
			"CHANGELOG.md":  "# Changelog\n",
		},
		flaky: true,
	}
}

// exitCode is what `go test ./...` returns on the repo.
func (r *repo) exitCode() int {
	if r.flaky {
		return 1
	}
	return 0
}

func (r *repo) testOutput() string {
	if r.flaky {
		return "--- FAIL: TestDrain (0.01s)\n    drain_test.go:41: 3 items left after Drain\nFAIL"
	}
	return "ok  \texample.com/drain\t0.41s"
}

func (r *repo) diff() string {
	return "--- a/drain_test.go\n+++ b/drain_test.go\n" + r.files["drain_test.go"]
}

// criteria are the task's acceptance criteria with the evidence the
// fleet collected for them.
func (r *repo) criteria() []gated.Criterion {
	return []gated.Criterion{
		{
			ID: "tests", Description: "the test suite passes", Required: true, Kind: gated.CriterionCommandResult,
			Params:   map[string]any{"exit_code": 0},
			Evidence: map[string]any{"command": "go test ./...", "exit_code": r.exitCode(), "output": r.testOutput()},
		},
		{
			ID: "changelog", Description: "the changelog mentions the fix", Required: true, Kind: gated.CriterionFileContains,
			Params:   map[string]any{"path": "CHANGELOG.md", "text": "TestDrain"},
			Evidence: map[string]any{"path": "CHANGELOG.md", "content": r.files["CHANGELOG.md"]},
		},
		{
			ID: "idiomatic", Description: "the fix waits on a channel rather than sleeping", Required: false, Kind: gated.CriterionAIReview,
		},
	}
}

// worker is the simulated worker agent. Each round it resolves up to
// fixes of the findings it was sent, in order, and reports on all of them.
type worker struct {
	name        string
	fixes       int
	resolved    map[string]string
	lastSummary string
}

func (w *worker) work(r *repo, cont *gated.Continuation) {
	if w.resolved == nil {
		w.resolved = map[string]string{}
	}
	if cont == nil {
		// The first attempt changes the sleep's length: the test is still
		// flaky, and the changelog is forgotten.
		r.files["drain_test.go"] = "time.Sleep(50 * time.Millisecond)\n"
		w.lastSummary = "made TestDrain sleep longer"
		return
	}
	var done []string
	for _, f := range cont.Findings {
		if len(done) == w.fixes {
			break
		}
		if fix := w.fix(r, f); fix != "" {
			w.resolved[f.ID] = fix
			done = append(done, fix)
		}
	}
	w.lastSummary = strings.Join(done, "; ")
	if w.lastSummary == "" {
		w.lastSummary = "found nothing to change"
	}
}

// fix resolves one finding and says how, or returns "" when it cannot.
func (w *worker) fix(r *repo, f gated.Finding) string {
	switch {
	case f.Criterion == "tests" || strings.Contains(f.Body, "tests"):
		r.flaky = false
		r.files["drain_test.go"] = "<-done // wait for the drain to finish\n"
		return "TestDrain waits on the done channel instead of sleeping"
	case f.Criterion == "changelog" || strings.Contains(f.Body, "changelog"):
		r.files["CHANGELOG.md"] += "- TestDrain no longer sleeps; it waits for the drain to finish\n"
		return "added a changelog entry for TestDrain"
	}
	return ""
}

// report is the worker's status on each finding it was sent.
func (w *worker) report(findings []gated.Finding) []gated.Finding {
	out := slices.Clone(findings)
	for i := range out {
		out[i].Status, out[i].Resolution = gated.FindingOpen, ""
		if how, ok := w.resolved[out[i].ID]; ok {
			out[i].Status, out[i].Resolution = gated.FindingResolved, how
		}
	}
	return out
}
