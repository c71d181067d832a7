// Package replaytest writes recorded histories for the tests of replay
// and of the command that runs it: scripted proposals decided with the
// default policy, their audit records as a live gated writes them, and a
// candidate policy with one known change.
package replaytest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/policies"
)

// CandidateRule is the known policy change of the scripted histories: it
// denies every cache_purge, which the default bundle lets through.
const CandidateRule = `package gated

deny contains {"rule": "no_cache_purge", "message": "cache purges are frozen"} if {
	input.proposal.action == "cache_purge"
}
`

// ScriptedProposal is proposal i of a scripted history: tenants acme and
// globex in turn; i%10 in 0-5 a read cache_get, 6-7 a write cache_purge,
// 8 a read cache_purge, 9 a write host_restart_service.
func ScriptedProposal(i int) (tenant, action string, data []byte) {
	tenant = []string{"acme", "globex"}[i%2]
	class, action := "read", "cache_get"
	switch i % 10 {
	case 6, 7:
		class, action = "write", "cache_purge"
	case 8:
		action = "cache_purge"
	case 9:
		class, action = "write", "host_restart_service"
	}
	radius := ""
	if class != "read" {
		radius = `,"blast_radius":"single_device"`
	}
	data = fmt.Appendf(nil, `{"v":1,"id":"p%d","tenant":%q,"action":%q,"class":%q,"target":{"service":"svc-%d"}%s,"requested_by":{"agent":"a-%d","session":"s"}}`,
		i, tenant, action, class, i%97, radius, i%13)
	return tenant, action, data
}

// WriteScriptedHistory decides n scripted proposals with the default
// policy, as the engine decides (EvaluateRouted, PolicyOutcome; a review
// the policy asks for is answered approved), and writes each one's
// policy.decided and verdict.decided records through the audit writer.
// It returns how many proposals the candidate rule must flip.
func WriteScriptedHistory(tb testing.TB, w *audit.Writer, n int) (flips int) {
	tb.Helper()
	ctx := tb.Context()
	pol := bustest.Policy(tb)
	reg, err := personas.Builtin()
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	const workers = 64
	errs := make(chan error, workers)
	for g := range workers {
		wg.Go(func() {
			for i := g; i < n; i += workers {
				tenant, action, data := ScriptedProposal(i)
				p, err := gated.DecodeProposal(data, tenant, action, gated.Limits{})
				if err != nil {
					errs <- err
					return
				}
				in := engine.PolicyInput{Proposal: p, Now: now}
				pd, routed, err := engine.EvaluateRouted(ctx, pol.Evaluate, reg, in, "reviewer", true)
				if err != nil {
					errs <- err
					return
				}
				settled, done := engine.PolicyOutcome(p, pd, routed)
				outcome, stage, reason := settled.Outcome, settled.Stage, settled.Reason
				if !done {
					outcome, stage, reason = gated.OutcomeApproved, gated.StageReview, "the reviewer approved"
				}
				if action == "cache_purge" && outcome != gated.OutcomeRejected {
					mu.Lock()
					flips++
					mu.Unlock()
				}
				decided := map[string]any{
					"action": action, "denies": settled.Denies, "review": pd.Review,
					"input": gated.ReplayInput{Proposal: data, Persona: "reviewer", Now: now},
				}
				v := gated.Verdict{V: 1, ProposalID: p.ID, Tenant: tenant, Action: action, Kind: p.Kind, Outcome: outcome,
					Approved: outcome == gated.OutcomeApproved, Stage: stage, Reason: reason, DecidedAt: now}
				tr := w.Trail()
				ev := func(name string, d any) gated.AuditEvent {
					raw, _ := json.Marshal(d)
					return gated.AuditEvent{V: 1, Event: name, Tenant: tenant, ProposalID: p.ID, At: now, PolicyRevision: pd.Revision, Data: raw}
				}
				if err := tr.Record(ctx, ev(gated.EventPolicyDecided, decided)); err != nil {
					errs <- err
					return
				}
				// gated stores what it recorded before a review as a record
				// of its own.
				if stage == gated.StageReview {
					if err := tr.Flush(ctx); err != nil {
						errs <- err
						return
					}
				}
				if _, err := tr.Seal(ctx, ev(gated.EventVerdict, v)); err != nil {
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
	return flips
}

// Candidate compiles the default bundle plus CandidateRule, and returns
// the directory that holds the rule, for a command's --policies.
func Candidate(tb testing.TB) (*policies.Evaluator, string) {
	tb.Helper()
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "freeze.rego"), []byte(CandidateRule), 0o600); err != nil {
		tb.Fatal(err)
	}
	b, _, err := policies.LoadFiles(policies.Sources{Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	ev, err := policies.Compile(tb.Context(), b)
	if err != nil {
		tb.Fatal(err)
	}
	return ev, dir
}

// Server is a test server with gated's streams and bucket set up, and
// JetStream on a connection to it.
func Server(tb testing.TB) jetstream.JetStream {
	tb.Helper()
	s := bustest.Server(tb)
	_, js := bustest.Connect(tb, s)
	if _, err := bus.Setup(tb.Context(), js, bus.Config{}); err != nil {
		tb.Fatal(err)
	}
	return js
}

// WriteTrailHistory writes n scripted proposals as a live gated records
// them: proposal.received, policy.decided with the replay input,
// review.started and review.finished for those the policy sends to review
// (answered approved), and verdict.decided. Proposals are decided with the
// default policy as WriteScriptedHistory decides them; the records are
// those of engine's trails, so a replay reads what it reads in production
// (five records a proposal here).
func WriteTrailHistory(tb testing.TB, w *audit.Writer, n int) {
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
	tenant, action, data := ScriptedProposal(i)
	p, err := gated.DecodeProposal(data, tenant, action, gated.Limits{})
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
		outcome, stage, reason = gated.OutcomeApproved, gated.StageReview, "the reviewer approved"
	}
	sum := sha256.Sum256(data)
	// policy.decided names the SOP by its id, as the engine records it.
	sop := ""
	if pd.SOP != nil {
		sop = pd.SOP.ID
	}
	tr := w.Trail()
	ev := func(name string, d any) gated.AuditEvent {
		raw, _ := json.Marshal(d)
		return gated.AuditEvent{V: 1, Event: name, Tenant: tenant, ProposalID: p.ID, At: now, PolicyRevision: pd.Revision, Data: raw}
	}
	records := []gated.AuditEvent{
		ev(gated.EventReceived, map[string]any{"bytes": len(data), "sha256": hex.EncodeToString(sum[:]), "subject": wire.ProposalSubject(tenant, action)}),
		ev(gated.EventPolicyDecided, map[string]any{
			"action": action, "denied_tools": pd.DeniedTools, "denies": settled.Denies, "eval_us": 41, "review": pd.Review,
			"reviewer_tools": pd.ReviewerTools, "run": nil, "sop": sop,
			"input": gated.ReplayInput{Proposal: data, Persona: "reviewer", Now: now},
		}),
	}
	if !done {
		records = append(records,
			ev(gated.EventReviewStarted, map[string]any{"action": action, "review_id": "r" + p.ID, "persona": routed.Name, "plugin": "sop", "tools": pd.ReviewerTools, "deadline": now.Add(time.Minute)}),
			ev(gated.EventReviewDone, map[string]any{"action": action, "review_id": "r" + p.ID, "plugin": "sop", "plugin_version": "1.0.0", "decision": "approve", "latency_ms": 3, "why": reason}))
	}
	for _, r := range records {
		if err := tr.Record(ctx, r); err != nil {
			return err
		}
	}
	v := gated.Verdict{V: 1, ProposalID: p.ID, Tenant: tenant, Action: action, Kind: p.Kind, Outcome: outcome,
		Approved: outcome == gated.OutcomeApproved, Stage: stage, Reason: reason, DecidedAt: now}
	_, err = tr.Seal(ctx, ev(gated.EventVerdict, v))
	return err
}
