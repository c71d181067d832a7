package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var metricNameRE = regexp.MustCompile(`gated_[a-z_]+`)

// servedMetrics are the metric names serve's sources register: every
// "gated_..." string literal of cmd/gated's non-test files.
func servedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	literal := regexp.MustCompile(`"(gated_[a-z_]+)"`)
	names := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range literal.FindAllStringSubmatch(string(src), -1) {
			names[m[1]] = true
		}
	}
	if len(names) < 10 {
		t.Fatalf("found only %d metric names in the sources: %v", len(names), names)
	}
	return names
}

// TestObservabilityDocListsEveryMetric keeps docs/OBSERVABILITY.md's
// metrics table and the dashboard true: every metric serve registers is
// listed, nothing listed is missing from serve, and every metric the
// dashboard queries exists.
func TestObservabilityDocListsEveryMetric(t *testing.T) {
	served := servedMetrics(t)
	doc, err := os.ReadFile("../../docs/OBSERVABILITY.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "## Metrics")
	if !ok {
		t.Fatal("docs/OBSERVABILITY.md has no Metrics section")
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, "| `gated_") {
			cell, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
			for _, n := range metricNameRE.FindAllString(cell, -1) {
				documented[n] = true
			}
		}
	}
	for n := range served {
		if !documented[n] {
			t.Errorf("%s is served but not in docs/OBSERVABILITY.md's metrics table", n)
		}
	}
	for n := range documented {
		if !served[n] {
			t.Errorf("docs/OBSERVABILITY.md lists %s, which serve does not register", n)
		}
	}

	raw, err := os.ReadFile("../../docs/grafana/gated.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("docs/grafana/gated.json: %v", err)
	}
	var queried []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range metricNameRE.FindAllString(tg.Expr, -1) {
				base := n
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if b, ok := strings.CutSuffix(n, suffix); ok && served[b] {
						base = b
					}
				}
				if !served[base] {
					t.Errorf("dashboard panel %q queries %s, which serve does not register", p.Title, n)
				}
				queried = append(queried, base)
			}
		}
	}
	for _, want := range []string{"gated_review_seconds", "gated_plugin_up", "gated_plugin_restarts_total", "gated_audit_append_seconds",
		"gated_claim_wait_seconds", "gated_dedupe_hits_total", "gated_notify_deliveries_total"} {
		if !slices.Contains(queried, want) {
			t.Errorf("the dashboard shows no %s", want)
		}
	}
}
