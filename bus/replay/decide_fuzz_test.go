package replay

import (
	"slices"
	"testing"

	"github.com/gated/gated"

	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/replay/replaytest"
	"github.com/gated/gated/personas"
)

// FuzzReplayRecords feeds replay a policy.decided and a verdict.decided
// record of arbitrary data: the verdict is counted exactly once, as
// replayed, not decided by the policy, or not rebuildable with a reason;
// a flip names a difference of outcome; nothing panics.
func FuzzReplayRecords(f *testing.F) {
	_, _, seed := replaytest.ScriptedProposal(6)
	f.Add([]byte(`{"action":"cache_purge","denies":[],"review":{"required":true},"input":{"proposal":`+string(seed)+`,"persona":"reviewer","now":"2026-11-01T09:00:00Z"}}`),
		[]byte(`{"v":1,"proposal_id":"p6","tenant":"acme","outcome":"approved","stage":"review","reason":"ok"}`), true)
	f.Add([]byte(`{"error":"boom"}`), []byte(`{"outcome":"error","stage":"policy"}`), true)
	f.Add([]byte(`{"input":{"proposal":{"v":1}}}`), []byte(`{"stage":"validation"}`), false)
	f.Add([]byte(`[`), []byte(`{"outcome":7}`), true)
	ev := bustest.Policy(f)
	reg, err := personas.Builtin()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, policyData, verdictData []byte, withPolicy bool) {
		rep := newReport("")
		r := &replayEvent{Seq: 2, Event: gated.AuditEvent{V: 1, Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p6", Data: verdictData}}
		var p *recordedPolicy
		if withPolicy {
			p = decodeRecordedPolicy(policyData)
		}
		rep.verdict(t.Context(), ev, reg, r, p, 1)
		if n := rep.Replayed + rep.Unrebuildable + sumCounts(rep.NotPolicy); rep.Verdicts != 1 || n != 1 {
			t.Fatalf("verdicts %d, counted %d times; want once", rep.Verdicts, n)
		}
		if rep.Unrebuildable == 1 && (len(rep.UnrebuildableNamed) != 1 || rep.UnrebuildableNamed[0].Why == "") {
			t.Fatalf("an unrebuildable verdict is not named with a reason: %+v", rep.UnrebuildableNamed)
		}
		if rep.Flips > rep.Replayed {
			t.Fatalf("%d flips of %d replayed", rep.Flips, rep.Replayed)
		}
		for _, fl := range rep.Shown {
			if !slices.Contains(fl.Kinds, gated.ShadowDiffOutcome) || fl.New.Reason == "" {
				t.Fatalf("flip %+v does not name a difference of outcome and a reason", fl)
			}
		}
		if rep.ReviewChanged+rep.ReviewReused > rep.Replayed {
			t.Fatalf("%d review changes and %d reused of %d replayed", rep.ReviewChanged, rep.ReviewReused, rep.Replayed)
		}
	})
}
