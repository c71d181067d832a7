package test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
)

// TestStatusOfAReviewedProposal follows a proposal the sop reviewer
// plugin reviews, through the real gated: the fleet sees it received,
// decided by the policy, under review by the routed persona, and decided,
// in that order, and the decided status carries the verdict it got.
func TestStatusOfAReviewedProposal(t *testing.T) {
	g := startGated(t)
	client := fleetClient(t, g.natsURL)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p := exampleProposal(t, "approved.json")
	p.ID = "status-reviewed-1"
	var got []*gated.Status
	v, err := client.ProposeWith(ctx, p, fleet.WithStatus(func(u fleet.StatusUpdate) {
		if u.Err != nil {
			t.Errorf("status error: %v", u.Err)
			return
		}
		got = append(got, u.Status)
	}))
	if err != nil || v.Outcome != gated.OutcomeApproved || len(v.Reviews) != 1 {
		t.Fatalf("verdict %+v, %v; want one review's approval", v, err)
	}
	var stages []gated.StatusStage
	for _, st := range got {
		stages = append(stages, st.Stage)
	}
	want := []gated.StatusStage{gated.StatusReceived, gated.StatusPolicyDecided, gated.StatusReviewStarted, gated.StatusDecided}
	if !slices.Equal(stages, want) {
		t.Fatalf("stages %v, want %v", stages, want)
	}
	started := got[2]
	if started.Reviewer == "" || started.Reviewer != v.Reviews[0].Persona || started.Deadline == nil || !started.Deadline.After(started.At) {
		t.Errorf("review_started names reviewer %q, deadline %v; the verdict's review is by %q", started.Reviewer, started.Deadline, v.Reviews[0].Persona)
	}
	if d := got[3].Verdict; d == nil || d.Outcome != v.Outcome || d.AuditSeq != v.AuditSeq || d.ProposalSHA256 != v.ProposalSHA256 {
		t.Errorf("decided carries %+v, the fleet got %+v", d, v)
	}
	m := metricsText(t, g)
	for _, want := range []string{"gated_status_events_total 4", "gated_status_failures_total 0"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestProposeWatch runs `gated propose --watch`, in text and in JSON.
func TestProposeWatch(t *testing.T) {
	g := startGated(t)
	data, err := os.ReadFile("../examples/proposals/approved.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		note   string
		device string // a target of its own: approvals on one target cool it down
		args   []string
	}{
		{note: "text", device: "71", args: []string{"--watch"}},
		{note: "json", device: "72", args: []string{"--watch", "--json"}},
	} {
		t.Run(tc.note, func(t *testing.T) {
			id := "status-watch-" + tc.note
			file := filepath.Join(t.TempDir(), "p.json")
			if err := os.WriteFile(file, []byte(strings.NewReplacer("demo-approved-1", id, `"device_id": 7`, `"device_id": `+tc.device).Replace(string(data))), 0o600); err != nil {
				t.Fatal(err)
			}
			code, out, stderr := propose(t, g.natsURL, append(tc.args, "-f", file)...)
			if code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out, stderr)
			}
			var lines []string
			sc := bufio.NewScanner(strings.NewReader(string(out)))
			for sc.Scan() {
				lines = append(lines, sc.Text())
			}
			stages := []string{"received", "policy_decided", "review_started", "decided"}
			if len(lines) < len(stages)+1 {
				t.Fatalf("output:\n%s", out)
			}
			for i, stage := range stages {
				if tc.note == "json" {
					st, err := gated.DecodeStatus([]byte(lines[i]))
					if err != nil || string(st.Stage) != stage || st.ID != id {
						t.Fatalf("line %d %q: %v; want stage %s of %s", i, lines[i], err, stage, id)
					}
					continue
				}
				if f := strings.Fields(lines[i]); len(f) < 2 || f[0] != stage {
					t.Fatalf("line %d %q, want stage %s", i, lines[i], stage)
				}
			}
			if tc.note == "text" && !strings.Contains(lines[2], "reviewer ") || !strings.Contains(lines[3], "approved") {
				t.Errorf("review_started line %q, decided line %q", lines[2], lines[3])
			}
			// The verdict follows the stages, as JSON: one line with --json.
			rest := strings.Join(lines[len(stages):], "\n")
			if tc.note == "json" && len(lines) != len(stages)+1 {
				t.Fatalf("--json printed %d lines after the stages:\n%s", len(lines)-len(stages), rest)
			}
			var v gated.Verdict
			if err := json.Unmarshal([]byte(rest), &v); err != nil || v.ProposalID != id || v.Outcome != gated.OutcomeApproved {
				t.Fatalf("verdict %q: %v", rest, err)
			}
		})
	}
}
