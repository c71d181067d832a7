package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/gated/gated/bus/audit"
)

// liveSkipsCacheFlush is the live policy of TestShadowMatchesReplay: write
// cache_flush needs no review, and no window keeps an operation off a
// target another one was approved on, but a nanosecond.
const liveSkipsCacheFlush = `gated:
  config:
    skip_review_actions: ["cache_flush"]
    parallel_operation_window: "1ns"
    target_cooldown: "1ns"
`

// candidateData is the candidate's data: cache_flush needs no review
// either, but the default windows stand, and cache_purge goes to the
// dba persona.
const candidateData = `gated:
  config:
    skip_review_actions: ["cache_flush"]
    persona_routes:
      - actions: ["cache_purge"]
        persona: dba
`

// shadowProposal is a proposal of tenant acme on a service of device 7.
func shadowProposal(id, action, class, service, agent, reviewer string) []byte {
	extra := ""
	if class != "read" {
		extra += `,"blast_radius":"single_device"`
	}
	if reviewer != "" {
		extra += fmt.Sprintf(`,"reviewer":%q`, reviewer)
	}
	return fmt.Appendf(nil, `{"v":1,"id":%q,"tenant":"acme","action":%q,"class":%q,"target":{"device_id":7,"service":%q},`+
		`"reason":"shadow and replay","operator":{"id":"alice","roles":["sre"]},"requested_by":{"agent":%q,"session":"s"}%s}`,
		id, action, class, service, agent, extra)
}

// TestShadowMatchesReplay runs serve with a shadow candidate over proposals
// the candidate flips (by a deny rule, by the target's history) or
// routes to other reviewers, and proposals it leaves alone; then replays
// the same audit stream with the candidate. Shadow and replay compare with
// one function (engine.CompareShadow), so the proposals shadow audited as
// differing in outcome are those replay flips, naming the same rules, and
// those it audited as routed otherwise are replay's review changes.
func TestShadowMatchesReplay(t *testing.T) {
	liveDir, candDir := t.TempDir(), t.TempDir()
	writeFile(t, liveDir, "data.yaml", liveSkipsCacheFlush)
	writeFile(t, candDir, "frozen.rego", frozenRule("nginx"))
	writeFile(t, candDir, "data.yaml", candidateData)
	url, _, stop := startShadowServe(t, liveDir, candDir)
	client := fleetClient(t, url)
	proposals := []struct {
		id, action, class, service, agent, reviewer string
	}{
		{"read-nginx", "host_list_services", "read", "nginx", "a1", ""},       // frozen by the candidate
		{"read-mysql", "host_list_services", "read", "mysql", "a1", ""},       // alike
		{"flush-1", "cache_flush", "write", "web", "a1", ""},                  // approved by both: the target's first
		{"flush-2", "cache_flush", "write", "web", "a2", ""},                  // the candidate: parallel_operation
		{"flush-3", "cache_flush", "write", "web", "a1", ""},                  // the candidate: both windows
		{"flush-other", "cache_flush", "write", "api", "a3", ""},              // another target: alike
		{"purge-1", "cache_purge", "write", "img", "a1", ""},                  // reviewed by dba instead
		{"purge-also", "cache_purge", "write", "css", "a1", "dba"},            // reviewer and dba, or dba alone
		{"restart-nginx", "host_restart_service", "write", "nginx", "a1", ""}, // review, or frozen
		{"restart-queue", "host_restart_service", "write", "queue", "a1", ""}, // review under both
	}
	for _, p := range proposals {
		v := propose(t, client, shadowProposal(p.id, p.action, p.class, p.service, p.agent, p.reviewer))
		t.Logf("%s: live verdict %s at %s: %s", p.id, v.Outcome, v.Stage, v.Reason)
	}
	stop()

	code, out, err := runGated(t, "policy", "shadow", "report", "--nats-url", url, "--format", "json", "--first", "1000")
	if code != 0 {
		t.Fatalf("policy shadow report: exit %d, %v\n%s", code, err, out)
	}
	var sum audit.ShadowSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("shadow report JSON: %v\n%s", err, out)
	}
	shadowFlips, shadowRoutes := map[string]string{}, map[string]bool{}
	for _, d := range sum.First {
		t.Logf("shadow: %s kinds %v rules %v", d.ProposalID, d.Kinds, d.Rules)
		if d.Flipped() {
			shadowFlips[d.ProposalID] = strings.Join(d.Rules, ",")
		}
		if d.ReviewChanged() {
			shadowRoutes[d.ProposalID] = true
		}
	}

	code, out, err = runGated(t, "policy", "replay", "--policies", candDir, "--nats-url", url, "--format", "json", "--show", "-1")
	if code != 0 {
		t.Fatalf("policy replay: exit %d, %v\n%s", code, err, out)
	}
	var rep struct {
		Flips []struct {
			ID    string   `json:"id"`
			Kinds []string `json:"kinds"`
			Rules []string `json:"rules"`
		} `json:"first_flips"`
		Changes []struct {
			ID    string   `json:"id"`
			Kinds []string `json:"kinds"`
		} `json:"review_changes"`
		Unrebuildable int `json:"unrebuildable"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("replay JSON: %v\n%s", err, out)
	}
	replayFlips, replayRoutes := map[string]string{}, map[string]bool{}
	for _, f := range rep.Flips {
		t.Logf("replay flip: %s kinds %v rules %v", f.ID, f.Kinds, f.Rules)
		replayFlips[f.ID] = strings.Join(f.Rules, ",")
	}
	for _, c := range rep.Changes {
		t.Logf("replay review change: %s kinds %v", c.ID, c.Kinds)
		replayRoutes[c.ID] = true
	}
	wantFlips := map[string]string{
		"read-nginx": "nginx_frozen", "flush-2": "parallel_operation", "flush-3": "parallel_operation,target_cooldown",
		"restart-nginx": "nginx_frozen",
	}
	if rep.Unrebuildable != 0 {
		t.Errorf("replay could not rebuild %d proposal(s)\n%s", rep.Unrebuildable, out)
	}
	if !maps.Equal(shadowFlips, replayFlips) {
		t.Errorf("shadow flipped %v, replay %v: the two must agree", shadowFlips, replayFlips)
	}
	if !maps.Equal(shadowFlips, wantFlips) {
		t.Errorf("shadow flipped %v, want %v", shadowFlips, wantFlips)
	}
	wantRoutes := []string{"purge-1", "purge-also"}
	if got := slices.Sorted(maps.Keys(shadowRoutes)); !slices.Equal(got, wantRoutes) {
		t.Errorf("shadow routed otherwise %v, want %v", got, wantRoutes)
	}
	if !maps.Equal(shadowRoutes, replayRoutes) {
		t.Errorf("shadow routed otherwise %v, replay's review changes %v: the two must agree", shadowRoutes, replayRoutes)
	}
}
