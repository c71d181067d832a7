package engine_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/gated/gated"
)

var updateVectors = flag.Bool("update", false, "rewrite test/vectors/decisions.json from decisionCases")

// decisionVectors is test/vectors/decisions.json: reviewer texts and the
// host's reading of each. Plugin SDKs in other languages send these texts
// through the real host and expect the same reading, so a transport that
// changes a byte of a reviewer's text fails their suites.
type decisionVectors struct {
	About string `json:"about"`
	Cases []struct {
		Name     string               `json:"name"`
		Text     string               `json:"text"`
		Decision gated.ReviewDecision `json:"decision"`
	} `json:"cases"`
}

var decisionVectorsPath = filepath.Join("..", "test", "vectors", "decisions.json")

// maxVectorText keeps the file readable: the cases at the 64 KiB limit
// stay in decisionCases only.
const maxVectorText = 4 << 10

func TestDecisionVectors(t *testing.T) {
	if *updateVectors {
		var doc decisionVectors
		doc.About = "A reviewer's decision text and how gated's host reads it (gated.ParseDecision): approve only for an exact, unretracted decision line. A plugin SDK must deliver each text to the host byte for byte; `go test ./engine -run TestDecisionVectors -update` writes this file from the Go cases."
		for _, c := range decisionCases {
			if len(c.text) > maxVectorText {
				continue
			}
			d, _ := gated.ParseDecision(c.text)
			doc.Cases = append(doc.Cases, struct {
				Name     string               `json:"name"`
				Text     string               `json:"text"`
				Decision gated.ReviewDecision `json:"decision"`
			}{c.note, c.text, d})
		}
		data, err := json.MarshalIndent(&doc, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(decisionVectorsPath, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(decisionVectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc decisionVectors
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", decisionVectorsPath, err)
	}
	if len(doc.Cases) < 20 {
		t.Fatalf("%s holds %d cases, want the decision cases of this package", decisionVectorsPath, len(doc.Cases))
	}
	approvals := 0
	for _, c := range doc.Cases {
		t.Run(c.Name, func(t *testing.T) {
			if got, why := gated.ParseDecision(c.Text); got != c.Decision {
				t.Errorf("ParseDecision(%q) = %s (%s), the vector says %s", c.Text, got, why, c.Decision)
			}
		})
		if c.Decision == gated.DecisionApprove {
			approvals++
		}
	}
	if approvals == 0 || approvals == len(doc.Cases) {
		t.Errorf("%d of %d vectors approve: the file must hold both readings", approvals, len(doc.Cases))
	}
}
