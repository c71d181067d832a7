package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gated/gated/internal/natstest"

	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/replay/replaytest"
)

// dbaRoutesCachePurge is a candidate that changes no outcome of the
// scripted history but who reviews its cache_purge proposals: the
// dba persona instead of the default reviewer.
const dbaRoutesCachePurge = `gated:
  config:
    persona_routes:
      - actions: ["cache_purge"]
        persona: dba
`

// TestReplayCountsReviewChanges: a candidate that sends proposals to
// other reviewers while both policies send them to review flips no
// outcome, but the recorded review does not stand for it: replay counts
// and names these proposals as review changed, never as reused.
func TestReplayCountsReviewChanges(t *testing.T) {
	js := replaytest.Server(t)
	const n = 40
	replaytest.WriteScriptedHistory(t, natstest.AuditWriter(t, js, audit.Config{}), n)
	cand := t.TempDir()
	writeFile(t, cand, "data.yaml", dbaRoutesCachePurge)
	code, out, err := runGated(t, "policy", "replay", "--policies", cand, "--nats-url", natsURL(t, js), "--format", "json", "--show", "-1")
	if code != 0 {
		t.Fatalf("exit %d (err %v)\n%s", code, err, out)
	}
	var rep struct {
		Flips         int            `json:"flips"`
		ReviewReused  int            `json:"review_reused"`
		ReviewStale   int            `json:"review_stale"`
		ReviewChanged int            `json:"review_changed"`
		Differences   map[string]int `json:"differences"`
		Named         []struct {
			ID  string `json:"id"`
			Old struct {
				Persona string `json:"persona"`
			} `json:"old_review"`
			New struct {
				Persona string `json:"persona"`
			} `json:"new_review"`
		} `json:"review_changes"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, out)
	}
	// Of every ten proposals, 6-8 are cache_purge (write or read, an
	// action the tool catalog does not list, so reviewed), and 0-5
	// cache_get and 9 host_restart_service are reviewed by the same
	// reviewer under both policies. The scripted review records do not
	// name their reviewer's revision, so replay cannot tell that reviewer
	// unchanged: those keep their recorded result as stale, none reused.
	const changed, kept = n * 3 / 10, n * 7 / 10
	if rep.Flips != 0 || rep.ReviewChanged != changed || rep.ReviewReused != 0 || rep.ReviewStale != kept || rep.Differences["route"] != changed {
		t.Fatalf("flips %d, review changed %d, reused %d, stale %d, differences %v; want 0, %d, 0, %d, route %d\n%s",
			rep.Flips, rep.ReviewChanged, rep.ReviewReused, rep.ReviewStale, rep.Differences, changed, kept, changed, out)
	}
	if len(rep.Named) != changed {
		t.Fatalf("%d review changes named, want all %d", len(rep.Named), changed)
	}
	for _, c := range rep.Named {
		if c.Old.Persona != "reviewer" || c.New.Persona != "dba" {
			t.Errorf("%s: review %q -> %q, want reviewer -> dba", c.ID, c.Old.Persona, c.New.Persona)
		}
	}
	code, out, _ = runGated(t, "policy", "replay", "--policies", cand, "--nats-url", natsURL(t, js))
	if code != 0 || !strings.Contains(out, "review changed: 12") {
		t.Errorf("text: exit %d, want the review changes counted\n%s", code, out)
	}
}
