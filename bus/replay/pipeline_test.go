package replay

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/replay/replaytest"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/policies"
)

// TestReplayCountsTheKnownChange: on a scripted history of 100,000
// decisions, replay under a candidate that freezes cache_purge flips
// exactly the cache_purge proposals the default let through, and nothing
// else; under the default bundle itself nothing flips.
func TestReplayCountsTheKnownChange(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100,000 decisions")
	}
	const n = 100_000
	js := replaytest.Server(t)
	// 100,000 decisions take minutes on a loaded machine: a publish is
	// given more than its 10 s default before the writing fails.
	want := replaytest.WriteScriptedHistory(t, bustest.AuditWriter(t, js, audit.Config{PublishTimeout: 2 * time.Minute}), n)
	if want != 30_000 {
		t.Fatalf("the script let %d cache_purge proposals through, want 30000 (the default bundle changed?)", want)
	}
	reg, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	cand, _ := replaytest.Candidate(t)
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
			rep, err := Run(t.Context(), js, audit.Query{}, tc.ev, reg, Config{Show: 3})
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
	js := replaytest.Server(t)
	replaytest.WriteScriptedHistory(t, bustest.AuditWriter(t, js, audit.Config{}), 20)
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
				case gated.EventPolicyDecided:
					policyAt[key] = e.Seq
				case gated.EventVerdict:
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
		rep, err := Run(t.Context(), js, audit.Query{StartSeq: start}, ev, reg, Config{})
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
		if _, err := js.Publish(t.Context(), wire.AuditSubject("acme", gated.EventVerdict), []byte(`{"v":1}`)); err != nil {
			t.Fatal(err)
		}
		rep, err := Run(t.Context(), js, audit.Query{}, ev, reg, Config{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Intact || len(rep.Problems) != 1 || rep.Problems[0].Kind != audit.ProblemForged {
			t.Fatalf("intact %v, problems %+v; want the forged record reported", rep.Intact, rep.Problems)
		}
	})
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
		ev := func(name string, d any) gated.AuditEvent {
			raw, _ := json.Marshal(d)
			return gated.AuditEvent{V: 1, Event: name, Tenant: tenant, ProposalID: id, At: now, Data: raw}
		}
		stage, outcome := gated.StagePolicy, gated.OutcomeApproved
		switch i % 4 {
		case 0:
			err := tr.Record(ctx, ev(gated.EventPolicyDecided, map[string]any{"action": "cache_get", "denies": []gated.Deny{}}))
			if err != nil {
				tb.Fatal(err)
			}
		case 1:
			in := gated.ReplayInput{Proposal: json.RawMessage(`{"v":1,"id":"` + id + `","tenant":"` + tenant + `","class":"loud"}`), Persona: "reviewer", Now: now}
			if err := tr.Record(ctx, ev(gated.EventPolicyDecided, map[string]any{"action": "cache_get", "input": in})); err != nil {
				tb.Fatal(err)
			}
		case 2:
			stage, outcome = gated.StageValidation, gated.OutcomeInvalid
		}
		v := gated.Verdict{V: 1, ProposalID: id, Tenant: tenant, Action: "cache_get", Outcome: outcome, Stage: stage, Reason: "odd", DecidedAt: now}
		if _, err := tr.Seal(ctx, ev(gated.EventVerdict, v)); err != nil {
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
	js := replaytest.Server(t)
	w := bustest.AuditWriter(t, js, audit.Config{})
	replaytest.WriteTrailHistory(t, w, 3000)
	writeOddTrails(t, w, 40)
	replaytest.WriteTrailHistory(t, w, 500)
	reg, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	_, dir := replaytest.Candidate(t)
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
	replay := func(workers int) *Report {
		t.Helper()
		rep, err := Run(t.Context(), js, audit.Query{}, cand, reg, Config{Show: 25, Workers: workers})
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
	case !slices.IsSortedFunc(one.Shown, func(a, b Flip) int { return cmp.Compare(a.Seq, b.Seq) }):
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
