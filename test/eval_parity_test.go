package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gated/gated"
)

// TestPolicyEvalAgreesWithGate proposes each proposal to a running gate
// and dry-runs it with `policy eval`, and checks that the dry run names
// the outcome the gate decides before any review: the same outcome when
// the gate decides at policy or blocks the review, "review" when a
// reviewer decides, and an error exit for an invalid proposal.
func TestPolicyEvalAgreesWithGate(t *testing.T) {
	g := startGated(t)
	examples, err := filepath.Glob(filepath.Join(exampleProposals, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	approved, err := os.ReadFile(filepath.Join(exampleProposals, "approved.json"))
	if err != nil {
		t.Fatal(err)
	}
	variant := func(id string, change func(m map[string]any)) string {
		var m map[string]any
		if err := json.Unmarshal(approved, &m); err != nil {
			t.Fatal(err)
		}
		m["id"] = id
		// A target of its own: the gate's history of the examples' target
		// (cooldowns) is not the dry run's.
		m["target"] = map[string]any{"device_id": 1000 + len(id), "service": id, "tags": []string{"production"}}
		change(m)
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), id+".json")
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	type tcase struct{ note, file string }
	var tests []tcase
	for _, path := range examples {
		tests = append(tests, tcase{note: filepath.Base(path), file: path})
	}
	tests = append(tests,
		tcase{note: "reviewer that is not loaded", file: variant("parity-ghost", func(m map[string]any) { m["reviewer"] = "ghost" })},
		tcase{note: "reviewer that may not review", file: variant("parity-operator", func(m map[string]any) { m["reviewer"] = "operator" })},
		tcase{note: "write action proposed as a read", file: variant("parity-read", func(m map[string]any) { m["class"] = "read" })},
		tcase{note: "skip review", file: variant("parity-skip", func(m map[string]any) { m["flags"] = map[string]any{"skip_review": true} })},
	)
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			_, out, stderr := propose(t, g.natsURL, "-f", tc.file)
			var v gated.Verdict
			if err := json.Unmarshal(out, &v); err != nil {
				t.Fatalf("propose printed no verdict: %v\nstdout: %s\nstderr: %s", err, out, stderr)
			}
			code, evalOut, evalErr := runPolicyCLI(t, "eval", "--format", "json", "--personas", "../examples/personas", "-f", tc.file)
			if v.Outcome == gated.OutcomeInvalid {
				if code != 1 {
					t.Fatalf("the gate says invalid (%s); policy eval exits %d, want 1\n%s%s", v.Reason, code, evalOut, evalErr)
				}
				return
			}
			var doc struct {
				Outcome string `json:"outcome"`
				Stage   string `json:"stage"`
			}
			if err := json.Unmarshal([]byte(evalOut), &doc); err != nil {
				t.Fatalf("policy eval (exit %d) printed no JSON: %v\n%s%s", code, err, evalOut, evalErr)
			}
			want := "review"
			if v.Stage == gated.StagePolicy || v.Outcome == gated.OutcomeBlocked {
				want = string(v.Outcome)
			}
			if doc.Outcome != want {
				t.Errorf("policy eval says %q; the gate decided %s at %s (%s), so want %q\n%s",
					doc.Outcome, v.Outcome, v.Stage, v.Reason, want, strings.TrimSpace(evalOut))
			}
		})
	}
}
