package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/policies"
)

// candidateRule is the known policy change of the scripted histories: it
// denies every cache_purge, which the default bundle lets through.
const candidateRule = `package gated

deny contains {"rule": "no_cache_purge", "message": "cache purges are frozen"} if {
	input.proposal.action == "cache_purge"
}
`

// scriptedProposal is proposal i of a scripted history: tenants acme and
// globex in turn; i%10 in 0-5 a read cache_get, 6-7 a write cache_purge,
// 8 a read cache_purge, 9 a write host_restart_service.
func scriptedProposal(i int) (tenant, action string, data []byte) {
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

// writeScriptedHistory decides n scripted proposals with the default
// policy, as the engine decides (EvaluateRouted, PolicyOutcome; a review
// the policy asks for is answered approved), and writes each one's
// policy.decided and verdict.decided records through the audit writer.
// It returns how many proposals the candidate rule must flip.
func writeScriptedHistory(tb testing.TB, w *audit.Writer, n int) (flips int) {
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
				tenant, action, data := scriptedProposal(i)
				p, err := engine.DecodeProposal(data, tenant, action, engine.Limits{})
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
					outcome, stage, reason = engine.OutcomeApproved, engine.StageReview, "the reviewer approved"
				}
				if action == "cache_purge" && outcome != engine.OutcomeRejected {
					mu.Lock()
					flips++
					mu.Unlock()
				}
				decided := map[string]any{
					"action": action, "denies": settled.Denies, "review": pd.Review,
					"input": engine.ReplayInput{Proposal: data, Persona: "reviewer", Now: now},
				}
				v := engine.Verdict{V: 1, ProposalID: p.ID, Tenant: tenant, Action: action, Kind: p.Kind, Outcome: outcome,
					Approved: outcome == engine.OutcomeApproved, Stage: stage, Reason: reason, DecidedAt: now}
				tr := w.Trail()
				ev := func(name string, d any) engine.AuditEvent {
					raw, _ := json.Marshal(d)
					return engine.AuditEvent{V: 1, Event: name, Tenant: tenant, ProposalID: p.ID, At: now, PolicyRevision: pd.Revision, Data: raw}
				}
				if err := tr.Record(ctx, ev(engine.EventPolicyDecided, decided)); err != nil {
					errs <- err
					return
				}
				// gated stores what it recorded before a review as a record
				// of its own.
				if stage == engine.StageReview {
					if err := tr.Flush(ctx); err != nil {
						errs <- err
						return
					}
				}
				if _, err := tr.Seal(ctx, ev(engine.EventVerdict, v)); err != nil {
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

// candidate compiles the default bundle plus candidateRule.
func candidate(tb testing.TB) (*policies.Evaluator, string) {
	tb.Helper()
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "freeze.rego"), []byte(candidateRule), 0o600); err != nil {
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

func replayServer(tb testing.TB) jetstream.JetStream {
	tb.Helper()
	s := bustest.Server(tb)
	_, js := bustest.Connect(tb, s)
	if _, err := bus.Setup(tb.Context(), js, bus.Config{}); err != nil {
		tb.Fatal(err)
	}
	return js
}

// TestReplayCountsTheKnownChange: on a scripted history of 100,000
// decisions, replay under a candidate that freezes cache_purge flips
// exactly the cache_purge proposals the default let through, and nothing
// else; under the default bundle itself nothing flips.
func TestReplayCountsTheKnownChange(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100,000 decisions")
	}
	const n = 100_000
	js := replayServer(t)
	// 100,000 decisions take minutes on a loaded machine: a publish is
	// given more than its 10 s default before the writing fails.
	want := writeScriptedHistory(t, bustest.AuditWriter(t, js, audit.Config{PublishTimeout: 2 * time.Minute}), n)
	if want != 30_000 {
		t.Fatalf("the script let %d cache_purge proposals through, want 30000 (the default bundle changed?)", want)
	}
	reg, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	cand, _ := candidate(t)
	tests := []struct {
		name  string
		ev    *policies.Evaluator
		flips int
	}{
		{name: "candidate freezes cache_purge", ev: cand, flips: want},
		{name: "default bundle", ev: bustest.Policy(t), flips: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := replayHistory(t.Context(), js, audit.Query{}, tc.ev, reg, replayConfig{show: 3})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("read %d records at %.0f/s, decided %d at %.0f/s", rep.Records, rep.ReadRate, rep.Replayed, rep.DecideRate)
			switch {
			case !rep.Intact:
				t.Fatalf("range not intact: %+v", rep.Problems)
			case rep.Verdicts != n || rep.Replayed != n || rep.Unrebuildable != 0:
				t.Fatalf("verdicts %d, replayed %d, unrebuildable %d; want %d, %d, 0", rep.Verdicts, rep.Replayed, rep.Unrebuildable, n, n)
			case rep.Flips != tc.flips:
				t.Fatalf("flips = %d, want %d; outcomes %v", rep.Flips, tc.flips, rep.Outcomes)
			}
			if tc.flips == 0 {
				return
			}
			wantRules := map[string]int{"no_cache_purge": tc.flips}
			// acme has the even proposals: two of the three cache_purge
			// slots of every ten (6 and 8).
			wantTenants := map[string]int{"acme": tc.flips * 2 / 3, "globex": tc.flips / 3}
			wantActions := map[string]int{"cache_purge": tc.flips}
			for _, c := range []struct {
				what      string
				got, want map[string]int
			}{{"rule", rep.FlipsByRule, wantRules}, {"tenant", rep.FlipsByTenant, wantTenants}, {"action", rep.FlipsByAction, wantActions}} {
				if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
					t.Errorf("flips by %s = %v, want %v", c.what, c.got, c.want)
				}
			}
			if got := rep.Outcomes["approved -> rejected"]; got != tc.flips {
				t.Errorf("approved -> rejected = %d, want %d (%v)", got, tc.flips, rep.Outcomes)
			}
			if len(rep.Shown) != 3 || rep.Shown[0].New.Denies[0].Rule != "no_cache_purge" {
				t.Errorf("first flips = %+v, want 3 naming no_cache_purge", rep.Shown)
			}
		})
	}
}

// TestReplayRefusesABrokenRange: a forged message in the range, a record
// without its input, and a verdict whose policy.decided is outside the
// range are reported, never replayed as if complete.
func TestReplayRefusesABrokenRange(t *testing.T) {
	js := replayServer(t)
	writeScriptedHistory(t, bustest.AuditWriter(t, js, audit.Config{}), 20)
	reg, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	ev := bustest.Policy(t)
	t.Run("from-seq cuts a trail", func(t *testing.T) {
		// Start at the first record that holds a verdict without its
		// policy.decided (a reviewed proposal's second record): the
		// proposals whose policy.decided is before it cannot be rebuilt.
		policyAt := map[string]uint64{}
		var start uint64
		cut := map[string]bool{}
		err := audit.Read(t.Context(), js, audit.Query{}, func(e audit.Entry) error {
			for _, ev := range e.Record.Events() {
				key := ev.Tenant + "." + ev.ProposalID
				switch ev.Event {
				case engine.EventPolicyDecided:
					policyAt[key] = e.Seq
				case engine.EventVerdict:
					if start == 0 && policyAt[key] < e.Seq {
						start = e.Seq
					}
					if start != 0 && policyAt[key] < start {
						cut[key] = true
					}
				}
			}
			return nil
		})
		if err != nil || start == 0 {
			t.Fatalf("no verdict apart from its policy.decided in the history (%v)", err)
		}
		rep, err := replayHistory(t.Context(), js, audit.Query{StartSeq: start}, ev, reg, replayConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Unrebuildable != len(cut) || len(rep.UnrebuildableNamed) != len(cut) || !strings.Contains(rep.UnrebuildableNamed[0].Why, "no policy.decided") {
			t.Fatalf("unrebuildable %d %+v, want the %d proposals whose policy.decided is before seq %d", rep.Unrebuildable, rep.UnrebuildableNamed, len(cut), start)
		}
		if !rep.Intact {
			t.Fatalf("a range that starts mid-chain is intact; problems %+v", rep.Problems)
		}
	})
	t.Run("forged record", func(t *testing.T) {
		if _, err := js.Publish(t.Context(), wire.AuditSubject("acme", engine.EventVerdict), []byte(`{"v":1}`)); err != nil {
			t.Fatal(err)
		}
		rep, err := replayHistory(t.Context(), js, audit.Query{}, ev, reg, replayConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Intact || len(rep.Problems) != 1 || rep.Problems[0].Kind != audit.ProblemForged {
			t.Fatalf("intact %v, problems %+v; want the forged record reported", rep.Intact, rep.Problems)
		}
		code, out, err := runGated(t, "policy", "replay", "--policies", mustCandidateDir(t), "--nats-url", natsURL(t, js))
		if code != exitFailure || !strings.Contains(out, "RANGE NOT INTACT") {
			t.Fatalf("exit %d, err %v; want exit %d naming the broken range\n%s", code, err, exitFailure, out)
		}
	})
}

func mustCandidateDir(t *testing.T) string {
	_, dir := candidate(t)
	return dir
}

func natsURL(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	return js.Conn().ConnectedUrl()
}

// TestPolicyReplayCommand runs the command on a deployment and on the
// embedded server's data dir.
func TestPolicyReplayCommand(t *testing.T) {
	js := replayServer(t)
	writeScriptedHistory(t, bustest.AuditWriter(t, js, audit.Config{}), 40)
	dir := mustCandidateDir(t)
	url := natsURL(t, js)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{name: "text", args: []string{"--nats-url", url}, code: 0, want: "flipped: 12"},
		{name: "json", args: []string{"--nats-url", url, "--format", "json"}, code: 0, want: `"flips": 12`},
		{name: "one tenant", args: []string{"--nats-url", url, "--tenant", "acme"}, code: 0, want: "flipped: 8"},
		{name: "fail on flip", args: []string{"--nats-url", url, "--fail-on-flip"}, code: exitFlipped, want: "no_cache_purge"},
		{name: "both ranges", args: []string{"--nats-url", url, "--since", "1h", "--from-seq", "3"}, code: exitUsage, want: ""},
		{name: "no candidate", args: []string{"--nats-url", url, "--policies", ""}, code: exitUsage, want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"policy", "replay", "--policies", dir}, tc.args...)
			code, out, err := runGated(t, args...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d (err %v), want %d with %q\n%s", code, err, tc.code, tc.want, out)
			}
		})
	}
}

// TestPolicyReplayDataDir replays the files of a stopped embedded server.
func TestPolicyReplayDataDir(t *testing.T) {
	dataDir := t.TempDir()
	s, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: dataDir}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	_, js := bustest.Connect(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if _, err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	w, err := audit.NewWriter(ctx, js, audit.Config{Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	writeScriptedHistory(t, w, 20)
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	js.Conn().Close()
	s.Shutdown()
	s.WaitForShutdown()
	code, out, err := runGated(t, "policy", "replay", "--policies", mustCandidateDir(t), "--data-dir", dataDir)
	if code != 0 || !strings.Contains(out, "flipped: 6") {
		t.Fatalf("exit %d (err %v), want 0 with 6 flips\n%s", code, err, out)
	}
	lock, err := bus.LockDataDir(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	code, out, err = runGated(t, "policy", "replay", "--policies", mustCandidateDir(t), "--data-dir", dataDir)
	if code != exitFailure || err == nil || !strings.Contains(err.Error(), "stop the gated that holds it") {
		t.Fatalf("exit %d (err %v), want the held data dir refused\n%s", code, err, out)
	}
}
