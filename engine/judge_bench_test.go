package engine

import (
	"testing"

	"github.com/gated/gated"
)

// scriptedReview is a reviewer's approval as a plugin writes one.
const scriptedReview = "Decision: approve\n" +
	"Gates:\n" +
	"- sop_covers: pass — SOP-001 covers restarting a web service\n" +
	"- no_parallel_operation: pass — nothing else is under way on the device\n" +
	"- rollback_known: pass — a restart is undone by the previous unit state\n" +
	"Notes: the service stopped answering after a config reload; restarting it is what SOP-001 says to do first."

func BenchmarkJudge(b *testing.B) {
	persona := &Persona{Name: "reviewer", RequiredGates: []string{"sop_covers", "no_parallel_operation", "rollback_known"}}
	res := ReviewResult{Plugin: "llm", Text: scriptedReview, Decision: gated.DecisionApprove, Gates: []gated.GateResult{
		{Name: "sop_covers", Passed: true}, {Name: "no_parallel_operation", Passed: true}, {Name: "rollback_known", Passed: true},
	}}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, why := Judge(res, persona); !ok {
			b.Fatal(why)
		}
	}
}
