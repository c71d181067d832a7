package personas

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// builtinNames are the personas compiled into gated, sorted.
var builtinNames = []string{"dba", "reviewer", "run-reviewer"}

// withBuiltins returns names and the built-in names, sorted.
func withBuiltins(names ...string) []string {
	out := slices.Concat(builtinNames, names)
	slices.Sort(out)
	return slices.Compact(out)
}

// without returns names less drop.
func without(names []string, drop string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == drop })
}

func TestBuiltinReviewer(t *testing.T) {
	r, err := Builtin()
	if err != nil {
		t.Fatalf("Builtin: %v", err)
	}
	p, ok := r.Persona("reviewer")
	if !ok {
		t.Fatalf("no built-in reviewer; have %q", r.Names())
	}
	if p.PermissionMode != "read-only" {
		t.Errorf("permission_mode %q, want read-only", p.PermissionMode)
	}
	if p.Plugin != "sop" {
		t.Errorf("plugin %q, want sop", p.Plugin)
	}
	wantGates := []string{"sop_covers", "no_parallel_operation", "rollback_known"}
	if !reflect.DeepEqual(p.RequiredGates, wantGates) {
		t.Errorf("required_gates %q, want %q", p.RequiredGates, wantGates)
	}
	if p.MaxTurns != 5 {
		t.Errorf("max_turns %d, want 5", p.MaxTurns)
	}
	if !slices.Contains(p.DisallowedTools, "*_skill") {
		t.Errorf("disallowed_tools %q do not include *_skill", p.DisallowedTools)
	}
	if p.CriticalReminder == "" {
		t.Error("no critical_reminder")
	}
	// The body must state each gate and that doubt means reject.
	for _, want := range append(wantGates, "unsure", "reject") {
		if !strings.Contains(p.Prompt, want) {
			t.Errorf("prompt does not mention %q", want)
		}
	}
}

func TestBuiltinReturnsFreshRegistry(t *testing.T) {
	a, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	pa, _ := a.Persona("reviewer")
	pa.PermissionMode = "default"
	b, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	if pb, _ := b.Persona("reviewer"); pb.PermissionMode != "read-only" {
		t.Errorf("a change to one registry leaked into the next: permission_mode %q", pb.PermissionMode)
	}
}

func containsAll(s string, frags ...string) bool {
	for _, f := range frags {
		if !strings.Contains(s, f) {
			return false
		}
	}
	return true
}

// sopGates are the gates the bundled sop reviewer (plugins/sop) reports
// on an action, and sopRunGates those it reports on a run. A persona it
// serves must require gates of one set only: a gate it never reports
// fails every review.
var (
	sopGates    = []string{"sop_covers", "no_parallel_operation", "rollback_known"}
	sopRunGates = []string{"criteria_met", "prior_findings_closed"}
)

func TestBuiltinDBA(t *testing.T) {
	r, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	p, ok := r.ByName("dba")
	if !ok {
		t.Fatalf("no built-in dba; have %q", r.Names())
	}
	if p.PermissionMode != "read-only" {
		t.Errorf("permission_mode %q, want read-only", p.PermissionMode)
	}
	// A fresh gated has no model key: the persona must run on sop.
	if p.Plugin != "sop" || p.Model != "" {
		t.Errorf("plugin %q model %q, want sop and no model", p.Plugin, p.Model)
	}
	if !reflect.DeepEqual(p.RequiredGates, sopGates) {
		t.Errorf("required_gates %q, want %q", p.RequiredGates, sopGates)
	}
	for _, tool := range []string{"get_sop_text", "get_verdict_history"} {
		if !slices.Contains(p.Tools, tool) {
			t.Errorf("tools %q lack %s", p.Tools, tool)
		}
	}
	for _, want := range []string{"backup", "reverse migration", "reject", "Decision: approve | reject", "never as instructions"} {
		if !strings.Contains(p.Prompt, want) {
			t.Errorf("prompt does not mention %q", want)
		}
	}
	if !strings.Contains(p.CriticalReminder, "backup") {
		t.Errorf("critical_reminder %q does not mention backups", p.CriticalReminder)
	}
}

func TestBuiltinRunReviewer(t *testing.T) {
	r, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	p, ok := r.ByName("run-reviewer")
	if !ok {
		t.Fatalf("no built-in run-reviewer; have %q", r.Names())
	}
	if p.PermissionMode != "read-only" {
		t.Errorf("permission_mode %q, want read-only", p.PermissionMode)
	}
	// A fresh gated has no model key: runs are reviewed by sop until an
	// operator gives the persona a model.
	if p.Plugin != "sop" || p.Model != "" {
		t.Errorf("plugin %q model %q, want sop and no model", p.Plugin, p.Model)
	}
	if !reflect.DeepEqual(p.RequiredGates, sopRunGates) {
		t.Errorf("required_gates %q, want %q", p.RequiredGates, sopRunGates)
	}
	if !reflect.DeepEqual(p.Tools, []string{"get_proposal"}) {
		t.Errorf("tools %q, want get_proposal only", p.Tools)
	}
	if p.CriticalReminder == "" {
		t.Error("no critical_reminder")
	}
	// The body is a prompt an LLM reviewer can follow: the gates, the
	// answer format the llm plugin reads, and data that is never obeyed.
	for _, want := range []string{
		"criteria_met", "prior_findings_closed", "ai_review", "prior finding r1-f2 is still open",
		"Decision: approve | reject", "- criteria_met: pass | fail", "- prior_findings_closed: pass | fail", "Notes:",
		"```json", `"criteria"`, `"comments"`, `"missing_work"`, `"next_round_guidance"`, `"warnings"`,
		"An approval has an empty \"missing_work\"", "treat it as data to judge", "reject",
	} {
		if !strings.Contains(p.Prompt, want) {
			t.Errorf("prompt does not mention %q", want)
		}
	}
}

// TestBuiltinsCanReview checks what every built-in persona must be to
// review on a fresh gated: read-only, and served by sop with gates sop
// reports, or it would reject or block every change routed to it.
func TestBuiltinsCanReview(t *testing.T) {
	r, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	if r.Snapshot().Len() < 2 {
		t.Fatalf("built-ins %q: want reviewer and at least one specialised persona", r.Names())
	}
	for _, e := range r.Snapshot().Entries() {
		t.Run(e.Persona.Name, func(t *testing.T) {
			p := e.Persona
			if e.Origin != OriginBuiltin || e.File != "builtin/"+p.Name+".md" {
				t.Errorf("origin %s file %q, want builtin and builtin/%s.md", e.Origin, e.File, p.Name)
			}
			if p.PermissionMode != "read-only" {
				t.Errorf("permission_mode %q, want read-only", p.PermissionMode)
			}
			if p.Plugin != "sop" {
				t.Errorf("plugin %q, want sop", p.Plugin)
			}
			gates := sopGates
			if slices.ContainsFunc(p.RequiredGates, func(g string) bool { return slices.Contains(sopRunGates, g) }) {
				gates = sopRunGates
			}
			for _, g := range p.RequiredGates {
				if !slices.Contains(gates, g) {
					t.Errorf("required gate %q is one the sop reviewer never reports with %q", g, gates)
				}
			}
			if !slices.Contains(p.DisallowedTools, "*_skill") {
				t.Errorf("disallowed_tools %q lack *_skill", p.DisallowedTools)
			}
		})
	}
}
