package policies

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gated/gated/policies/internal/plan"
)

// probeRule denies the action named by data.gated.config.probe_action,
// which the default data leaves unset: only a test that sets it with
// `with data...` reaches the rule.
const probeRule = `package gated

deny contains {"rule": "probe", "message": "the probe action is refused"} if input.proposal.action == data.gated.config.probe_action
`

const probeTest = `package probe_test

import data.gated

test_probe_action_denied if {
	p := {"id": "t1", "tenant": "acme", "action": "probe_run", "class": "read", "target": {}, "flags": {}}
	d := gated.decision with input as {"proposal": p, "persona": null, "history": [], "now_ns": 0}
		with data.gated.config.probe_action as "probe_run"
	some entry in d.deny
	entry.rule == "probe"
}
`

// misplan makes Compile plan every bundle with old replaced by new in its
// modules, so that the planned evaluator runs other rules than topdown: a
// stand-in for a defect of the interpreter that the compile-time samples
// do not reach and the bundle's own tests do. Only the planned side
// changes; topdown, the tests and the check are gated's own.
func misplan(t *testing.T, old, new string) {
	t.Helper()
	t.Cleanup(func() { planOf = planBundle })
	planOf = func(ctx context.Context, b *Bundle) (*plan.Plan, error) {
		other := &Bundle{Modules: map[string]string{}, Data: b.Data}
		for name, src := range b.Modules {
			other.Modules[name] = strings.ReplaceAll(src, old, new)
		}
		return planBundle(ctx, other)
	}
}

// misplanProbe makes the planned probe rule read a key nobody sets: it
// agrees with topdown on the default data and disagrees under the test's
// override.
func misplanProbe(t *testing.T) {
	misplan(t, "data.gated.config.probe_action", "data.gated.config.probe_action_unset")
}

func probeDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "probe.rego"), probeRule)
	writeFile(t, filepath.Join(dir, "probe_test.rego"), probeTest)
	return dir
}

// TestLiveRefusesBundleTheEvaluatorsDisagreeOn: start-up refuses a bundle
// whose own test input the planned evaluator decides differently from
// topdown, and names the input and both decisions.
func TestLiveRefusesBundleTheEvaluatorsDisagreeOn(t *testing.T) {
	misplanProbe(t)
	_, err := NewLive(t.Context(), Sources{Dir: probeDir(t)}, nil)
	if !errors.Is(err, ErrEvaluatorsDisagree) || !errors.Is(err, ErrInvalidBundle) {
		t.Fatalf("NewLive: %v, want a refusal wrapping ErrEvaluatorsDisagree", err)
	}
	for _, want := range []string{"data.probe_test.test_probe_action_denied", `"probe_run"`, "data.gated.config.probe_action = \"probe_run\"", `"rule": "probe"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not show %s:\n%v", want, err)
		}
	}
}

// TestLiveAcceptsBundleOnTopdown: with --policy-evaluator topdown the
// planned evaluator decides nothing, so it is not compared.
func TestLiveAcceptsBundleOnTopdown(t *testing.T) {
	misplanProbe(t)
	l, err := NewLive(t.Context(), Sources{Dir: probeDir(t), Topdown: true}, nil)
	if err != nil {
		t.Fatalf("NewLive on topdown: %v", err)
	}
	if st := l.State(); st.Evaluator.Evaluator != EvaluatorTopdown {
		t.Fatalf("evaluator %+v", st.Evaluator)
	}
}

// TestReloadKeepsPolicyTheEvaluatorsDisagreeOn: a reload to such a bundle
// fails, is reported, and the running policy stays.
func TestReloadKeepsPolicyTheEvaluatorsDisagreeOn(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "local_test.rego"), readTest)
	var heard []Reload
	l, err := NewLive(t.Context(), Sources{Dir: dir}, func(r Reload) { heard = append(heard, r) })
	if err != nil {
		t.Fatal(err)
	}
	before := l.Revision()
	misplanProbe(t)
	writeFile(t, filepath.Join(dir, "probe.rego"), probeRule)
	writeFile(t, filepath.Join(dir, "probe_test.rego"), probeTest)
	r := l.Reload(t.Context())
	if r.OK || !strings.Contains(r.Error, ErrEvaluatorsDisagree.Error()) {
		t.Fatalf("reload %+v, want a refusal because the evaluators disagree", r)
	}
	if l.Revision() != before || !l.State().Stale || len(heard) != 1 || heard[0].OK {
		t.Fatalf("after the refused reload: revision %s (was %s), state %+v, heard %+v", l.Revision(), before, l.State(), heard)
	}
}

// TestCheckParityReplaysDataOverrides: the check finds the disagreement
// only by replaying the test's `with data...` override; without the
// override both evaluators agree.
func TestCheckParityReplaysDataOverrides(t *testing.T) {
	misplanProbe(t)
	b, err := Load(Sources{Dir: probeDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	e := mustPlanned(t, b)
	rep, err := CheckParity(t.Context(), e, b.UserTests(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Disagreements) != 1 {
		t.Fatalf("%d disagreements, want 1: %+v", len(rep.Disagreements), rep)
	}
	d := rep.Disagreements[0]
	if d.Test != "data.probe_test.test_probe_action_denied" || len(d.Overrides) != 1 ||
		!strings.Contains(d.Topdown, `"probe"`) || strings.Contains(d.Planned, `"probe"`) {
		t.Fatalf("disagreement %+v", d)
	}
	if rep.Err() == nil {
		t.Fatal("a report with a disagreement has no error")
	}
}

// TestCheckParityOnShippedBundles: the default bundle and the examples
// decide every input of their tests alike on both evaluators, and the
// tests give the check many inputs to compare.
func TestCheckParityOnShippedBundles(t *testing.T) {
	for _, tc := range []struct {
		note  string
		src   Sources
		tests func(*Bundle) *Bundle
		min   int
	}{
		{note: "default", src: Sources{}, tests: func(b *Bundle) *Bundle { return b }, min: 100},
		{note: "examples", src: Sources{Dir: filepath.Join("..", "examples", "policies")}, tests: (*Bundle).UserTests, min: 10},
	} {
		t.Run(tc.note, func(t *testing.T) {
			b, err := Load(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			e := mustPlanned(t, b)
			rep, err := CheckParity(t.Context(), e, tc.tests(b), "")
			if err != nil {
				t.Fatal(err)
			}
			if err := rep.Err(); err != nil {
				t.Fatal(err)
			}
			if rep.Compared < tc.min {
				t.Fatalf("%d inputs compared, want at least %d", rep.Compared, tc.min)
			}
			t.Logf("%d inputs compared, %d skipped", rep.Compared, rep.Skipped)
		})
	}
}

// TestTestInputsSkipsMocks: an evaluation under a mocked function or rule
// cannot be replayed as a decision; it is counted, not compared.
func TestTestInputsSkipsMocks(t *testing.T) {
	b := mustDefault(t)
	b.Modules = map[string]string{
		"p.rego": `package gated

decision := {"deny": [], "big": big, "glob": glob.match("a*", [], input.x)}

big if input.n > 3
`,
		"p_test.rego": `package p_test

import data.gated

test_plain if gated.decision.big with input as {"n": 5, "x": "ab"}

test_rule_mocked if gated.decision.big with input as {"n": 1, "x": "b"} with data.gated.big as true

test_function_mocked if gated.decision.glob with input as {"n": 1, "x": "b"} with glob.match as true
`,
	}
	ins, skipped, err := TestInputs(t.Context(), b, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 1 || skipped != 2 {
		t.Fatalf("%d inputs %+v, %d skipped; want 1 and 2", len(ins), ins, skipped)
	}
	if got := ins[0].Input.String(); got != `{"n": 5, "x": "ab"}` || ins[0].Test != "data.p_test.test_plain" {
		t.Fatalf("input %s of %s", got, ins[0].Test)
	}
	// The filter selects tests as --run does.
	if ins, skipped, err = TestInputs(t.Context(), b, "mocked"); err != nil || len(ins) != 0 || skipped != 2 {
		t.Fatalf("filtered: %d inputs, %d skipped, %v", len(ins), skipped, err)
	}
}
