package policies

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/gated/gated/engine"
)

// TestReadsBudget: a bundle is taken to read input.budget whenever a rule
// can reach it; the engine skips reading the counters only for one that
// cannot.
func TestReadsBudget(t *testing.T) {
	def := mustDefault(t)
	e, err := Compile(context.Background(), def)
	if err != nil {
		t.Fatal(err)
	}
	if e.ReadsBudget() {
		t.Fatal("the default bundle reads no input.budget, yet is said to")
	}
	for _, tc := range []struct {
		note, rule string
		reads      bool
	}{
		{"input.budget", `budget_deny contains "x" if input.budget.tenant.reads.used > 10`, true},
		{"input whole, bound", `whole := x if { x := input }`, true},
		{"input whole, to a function", `got := object.get(input, "budget", {})`, true},
		{"input under a variable key", `some_keys contains k if { some k; input[k] }`, true},
		{"input under a key that is a reference", `keyed := input[data.gated.config.which]`, true},
		{"inside another reference's key", `nested := data.gated.config[input.budget.agent]`, true},
		{"an import of input.budget", "", true},
		{"the value of a with", `w if { decision with input as {"b": input} }`, true},
		{"other members of input", `acts contains a if { a := input.proposal.action; input.persona.name }`, false},
		{"only the target of a with", `test_w if { decision with input as {"proposal": {}} }`, false},
	} {
		b := &Bundle{Modules: maps.Clone(def.Modules), Data: def.Data}
		if tc.rule != "" {
			b.Modules["extra.rego"] = "package gated\n\n" + tc.rule + "\n"
		} else {
			b.Modules["extra.rego"] = "package gated\n\nimport input.budget as b\n\nimported := b.tenant\n"
		}
		e, err := Compile(context.Background(), b)
		if err != nil {
			t.Fatalf("%s: %v", tc.note, err)
		}
		if e.ReadsBudget() != tc.reads {
			t.Errorf("%s: ReadsBudget() = %v, want %v", tc.note, e.ReadsBudget(), tc.reads)
		}
		in := engine.PolicyInput{Proposal: writeProposal(), Persona: reviewerPersona, BudgetUnread: true}
		_, err = e.Evaluate(context.Background(), in)
		if tc.reads != errors.Is(err, engine.ErrBudgetUnread) {
			t.Errorf("%s: Evaluate of an input without its budget: %v", tc.note, err)
		}
	}
}
