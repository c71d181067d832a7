package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/policies"
)

// writeTrailHistory writes n scripted proposals as a live gated records
// them: proposal.received, policy.decided with the replay input,
// review.started and review.finished for those the policy sends to review
// (answered approved), and verdict.decided. Proposals are decided with the
// default policy as writeScriptedHistory decides them; the records are
// those of engine's trails, so a replay reads what it reads in production
// (five records a proposal here).
func writeTrailHistory(tb testing.TB, w *audit.Writer, n int) {
	tb.Helper()
	pol := bustest.Policy(tb)
	reg, err := personas.Builtin()
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	const workers = 64
	errs := make(chan error, workers)
	for g := range workers {
		wg.Go(func() {
			for i := g; i < n; i += workers {
				if err := writeTrail(tb, w, pol.Evaluate, reg, i, now); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}

// writeTrail writes the trail of scripted proposal i.
func writeTrail(tb testing.TB, w *audit.Writer, evaluate func(context.Context, engine.PolicyInput) (engine.PolicyDecision, error), reg engine.Personas, i int, now time.Time) error {
	ctx := tb.Context()
	tenant, action, data := scriptedProposal(i)
	p, err := engine.DecodeProposal(data, tenant, action, engine.Limits{})
	if err != nil {
		return err
	}
	in := engine.PolicyInput{Proposal: p, Now: now}
	pd, routed, err := engine.EvaluateRouted(ctx, evaluate, reg, in, "reviewer", true)
	if err != nil {
		return err
	}
	settled, done := engine.PolicyOutcome(p, pd, routed)
	outcome, stage, reason := settled.Outcome, settled.Stage, settled.Reason
	if !done {
		outcome, stage, reason = engine.OutcomeApproved, engine.StageReview, "the reviewer approved"
	}
	sum := sha256.Sum256(data)
	// policy.decided names the SOP by its id, as the engine records it.
	sop := ""
	if pd.SOP != nil {
		sop = pd.SOP.ID
	}
	tr := w.Trail()
	ev := func(name string, d any) engine.AuditEvent {
		raw, _ := json.Marshal(d)
		return engine.AuditEvent{V: 1, Event: name, Tenant: tenant, ProposalID: p.ID, At: now, PolicyRevision: pd.Revision, Data: raw}
	}
	records := []engine.AuditEvent{
		ev(engine.EventReceived, map[string]any{"bytes": len(data), "sha256": hex.EncodeToString(sum[:]), "subject": wire.ProposalSubject(tenant, action)}),
		ev(engine.EventPolicyDecided, map[string]any{
			"action": action, "denied_tools": pd.DeniedTools, "denies": settled.Denies, "eval_us": 41, "review": pd.Review,
			"reviewer_tools": pd.ReviewerTools, "run": nil, "sop": sop,
			"input": engine.ReplayInput{Proposal: data, Persona: "reviewer", Now: now},
		}),
	}
	if !done {
		records = append(records,
			ev(engine.EventReviewStarted, map[string]any{"action": action, "review_id": "r" + p.ID, "persona": routed.Name, "plugin": "sop", "tools": pd.ReviewerTools, "deadline": now.Add(time.Minute)}),
			ev(engine.EventReviewDone, map[string]any{"action": action, "review_id": "r" + p.ID, "plugin": "sop", "plugin_version": "1.0.0", "decision": "approve", "latency_ms": 3, "why": reason}))
	}
	for _, r := range records {
		if err := tr.Record(ctx, r); err != nil {
			return err
		}
	}
	v := engine.Verdict{V: 1, ProposalID: p.ID, Tenant: tenant, Action: action, Kind: p.Kind, Outcome: outcome,
		Approved: outcome == engine.OutcomeApproved, Stage: stage, Reason: reason, DecidedAt: now}
	_, err = tr.Seal(ctx, ev(engine.EventVerdict, v))
	return err
}

// replayProposals is the size of BenchmarkReplay's history: 20,000
// proposals unless -replay.proposals says otherwise, as for a history of a
// million:
//
//	go test ./cmd/gated -run '^$' -bench '^BenchmarkReplay$/workers=2' -benchtime 1x -args -replay.proposals 1000000
var replayProposals = flag.Int("replay.proposals", 20_000, "proposals in BenchmarkReplay's history")

// BenchmarkReplay replays a recorded history of 20,000 proposals (their
// whole trails: 100,000 records) under the candidate that freezes
// cache_purge, reading included, on one worker and on GOMAXPROCS. It
// reports the proposals decided per second end to end, the records read
// per second, the records per second the reader sustained on its own
// (replayReport.ReadRate), and the process's CPU time per proposal.
func BenchmarkReplay(b *testing.B) {
	n := *replayProposals
	js := replayServer(b)
	writeTrailHistory(b, bustest.AuditWriter(b, js, audit.Config{}), n)
	reg, err := personas.Builtin()
	if err != nil {
		b.Fatal(err)
	}
	cand, _ := candidate(b)
	defer replayGC()() // as the command does
	for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			var (
				records  uint64
				readRate float64
			)
			b.ReportAllocs()
			cpu := bustest.ProcessCPU(b)
			for b.Loop() {
				rep, err := replayHistory(b.Context(), js, audit.Query{}, cand, reg, replayConfig{show: 10, workers: workers})
				if err != nil {
					b.Fatal(err)
				}
				if rep.Replayed != n || !rep.Intact {
					b.Fatalf("replayed %d of %d, intact %v", rep.Replayed, n, rep.Intact)
				}
				records += rep.Records
				readRate += rep.ReadRate
			}
			// The process's CPU time per proposal holds on a shared machine,
			// where the rates depend on what else runs; it counts the
			// in-process NATS server's work for the read too.
			cpu = bustest.ProcessCPU(b) - cpu
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(n*b.N)/secs, "proposals/s")
			b.ReportMetric(float64(records)/secs, "records/s")
			// The rate the reader sustained on its own wall time, its waits
			// for the workers left out: reading and decoding, apart from
			// the decisions.
			b.ReportMetric(readRate/float64(b.N), "read-records/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(n*b.N), "cpu-µs/proposal")
		})
	}
}

// writeOddTrails writes n trails of each kind replay cannot decide
// again, in turn: a policy.decided without its input, a recorded
// proposal that does not decode, a verdict of a proposal that failed
// validation (no policy.decided), and a verdict at policy without its
// policy.decided.
func writeOddTrails(tb testing.TB, w *audit.Writer, n int) {
	tb.Helper()
	ctx := tb.Context()
	now := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	for i := range 4 * n {
		tenant, id := []string{"acme", "globex"}[i%2], fmt.Sprintf("odd%d", i)
		tr := w.Trail()
		ev := func(name string, d any) engine.AuditEvent {
			raw, _ := json.Marshal(d)
			return engine.AuditEvent{V: 1, Event: name, Tenant: tenant, ProposalID: id, At: now, Data: raw}
		}
		stage, outcome := engine.StagePolicy, engine.OutcomeApproved
		switch i % 4 {
		case 0:
			err := tr.Record(ctx, ev(engine.EventPolicyDecided, map[string]any{"action": "cache_get", "denies": []engine.Deny{}}))
			if err != nil {
				tb.Fatal(err)
			}
		case 1:
			in := engine.ReplayInput{Proposal: json.RawMessage(`{"v":1,"id":"` + id + `","tenant":"` + tenant + `","class":"loud"}`), Persona: "reviewer", Now: now}
			if err := tr.Record(ctx, ev(engine.EventPolicyDecided, map[string]any{"action": "cache_get", "input": in})); err != nil {
				tb.Fatal(err)
			}
		case 2:
			stage, outcome = engine.StageValidation, engine.OutcomeInvalid
		}
		v := engine.Verdict{V: 1, ProposalID: id, Tenant: tenant, Action: "cache_get", Outcome: outcome, Stage: stage, Reason: "odd", DecidedAt: now}
		if _, err := tr.Seal(ctx, ev(engine.EventVerdict, v)); err != nil {
			tb.Fatal(err)
		}
	}
}

// erroringRule makes the candidate fail on some inputs: two values of one
// complete rule for the proposals on svc-5 are a conflict, an evaluation
// error, which replay counts as a flip to error.
const erroringRule = `package gated

svc_mark := 1 if input.proposal.target.service == "svc-5"

svc_mark := 2 if input.proposal.target.service == "svc-5"

deny contains {"rule": "svc_mark", "message": "marked"} if svc_mark == 1
`

// TestReplayWorkersGiveOneReport: a replay on many workers reports exactly
// what a replay on one reports, on a history with flips, evaluation errors
// and inputs that cannot be rebuilt, the lists of first flips and of
// inputs not rebuildable included, whatever the scheduling.
func TestReplayWorkersGiveOneReport(t *testing.T) {
	js := replayServer(t)
	w := bustest.AuditWriter(t, js, audit.Config{})
	writeTrailHistory(t, w, 3000)
	writeOddTrails(t, w, 40)
	writeTrailHistory(t, w, 500)
	reg, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	_, dir := candidate(t)
	if err := os.WriteFile(filepath.Join(dir, "conflict.rego"), []byte(erroringRule), 0o600); err != nil {
		t.Fatal(err)
	}
	b, _, err := policies.LoadFiles(policies.Sources{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cand, err := policies.Compile(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	replay := func(workers int) *replayReport {
		t.Helper()
		rep, err := replayHistory(t.Context(), js, audit.Query{}, cand, reg, replayConfig{show: 25, workers: workers})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Workers != workers {
			t.Fatalf("the report says %d workers, want %d", rep.Workers, workers)
		}
		// The timings are the only thing that may differ.
		rep.Workers, rep.Seconds, rep.Rate, rep.ReadSeconds, rep.DecideSeconds, rep.ReadRate, rep.DecideRate = 0, 0, 0, 0, 0, 0, 0
		return rep
	}
	one := replay(1)
	switch {
	case !one.Intact || one.Verdicts != 3660:
		t.Fatalf("intact %v, verdicts %d; want an intact range of 3660 verdicts", one.Intact, one.Verdicts)
	case one.Outcomes["approved -> error"] == 0 || one.Flips <= 25:
		t.Fatalf("outcomes %v, flips %d; want errors and more flips than the 25 listed", one.Outcomes, one.Flips)
	case one.Unrebuildable != 120 || len(one.UnrebuildableNamed) != maxNamed || one.NotPolicy["validation"] != 40:
		t.Fatalf("unrebuildable %d (%d named), not policy %v; want 120 (%d named) and 40 at validation",
			one.Unrebuildable, len(one.UnrebuildableNamed), one.NotPolicy, maxNamed)
	case !slices.IsSortedFunc(one.Shown, func(a, b replayFlip) int { return cmp.Compare(a.Seq, b.Seq) }):
		t.Fatalf("the first flips are not in stream order: %+v", one.Shown)
	}
	want, _ := json.MarshalIndent(one, "", " ")
	for _, workers := range []int{2, 3, 8} {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) {
			for range 3 {
				got, _ := json.MarshalIndent(replay(workers), "", " ")
				if !bytes.Equal(got, want) {
					t.Fatalf("the report on %d workers differs from the one on one worker:\n%s\nwant\n%s", workers, got, want)
				}
			}
		})
	}
}

// TestPolicyReplayWorkersFlag: --workers takes 1 or more and the summary
// names how many decided.
func TestPolicyReplayWorkersFlag(t *testing.T) {
	js := replayServer(t)
	writeTrailHistory(t, bustest.AuditWriter(t, js, audit.Config{}), 40)
	dir := mustCandidateDir(t)
	tests := []struct {
		note    string
		workers string
		code    int
		want    string
	}{
		{note: "one worker", workers: "1", code: 0, want: "on 1 worker(s)"},
		{note: "three workers", workers: "3", code: 0, want: "on 3 worker(s)"},
		{note: "none", workers: "0", code: exitUsage, want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			code, out, err := runGated(t, "policy", "replay", "--policies", dir, "--nats-url", natsURL(t, js), "--workers", tc.workers)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d (err %v), want %d with %q\n%s", code, err, tc.code, tc.want, out)
			}
			if tc.code == 0 && !strings.Contains(out, "flipped: 12") {
				t.Fatalf("want 12 flips whatever the workers\n%s", out)
			}
		})
	}
}
