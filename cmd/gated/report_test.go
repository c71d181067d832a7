package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/operator"
)

type hostArgs struct{ Host string }

func hostSpec(action string) fleet.ToolSpec[hostArgs] {
	return fleet.ToolSpec[hostArgs]{
		Action: action,
		Class:  gated.ClassWrite,
		Describe: func(a hostArgs) fleet.Change {
			return fleet.Change{
				Target:      map[string]any{"host": a.Host, "service": "nginx"},
				Reason:      "nginx on " + a.Host + " stopped answering",
				BlastRadius: gated.BlastSingleDevice,
			}
		},
	}
}

// TestReportReviewers runs serve with the bundled sop reviewer, has a Go
// ToolGate restart services (approved; some tools fail, some succeed) and
// deploy (rejected: no SOP covers it), has an operator fail the manual
// criterion of a run its reviewer approved (an override), and checks that `gated report
// reviewers --format json` gives the exact figures, and /metrics the
// same ones.
func TestReportReviewers(t *testing.T) {
	clearGatedEnv(t)
	s := natstest.Server(t)
	dir := t.TempDir()
	seedFile := filepath.Join(dir, "alice.seed")
	pub, err := operator.WriteSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	ops := writeFile(t, dir, "operators.yaml", "operators:\n  - id: alice\n    key: "+pub+"\n    tenants: [acme]\n")
	// The console is on --http, so /metrics is on a listener of its own.
	metricsAddr := freeTCPAddr(t)
	httpAddr, stop := startServe(t, s.ClientURL(), "--operators", ops, "--metrics-listen", metricsAddr)
	defer stop()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu        sync.Mutex
		latencies []float64
		key       audit.ReviewerKey
	)
	gate, err := fleet.NewToolGate(client, fleet.Identity{Tenant: "acme", Agent: "ops-agent", Session: "s-1",
		Operator: &gated.Principal{ID: "alice", Roles: []string{"sre"}}},
		fleet.WithVerdictObserver(func(_ *gated.Proposal, v *gated.Verdict) {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range v.Reviews {
				key = audit.ReviewerKey{Plugin: r.Plugin, PluginVersion: r.PluginVersion, Persona: r.Persona, Model: r.Model}
				latencies = append(latencies, r.LatencyMS)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	errDown := errors.New("nginx did not come back")
	restart := fleet.Guard(gate, hostSpec("host_restart_service"), func(_ context.Context, a hostArgs) (string, error) {
		if a.Host == "web-2" || a.Host == "web-5" {
			return "", errDown
		}
		return "ok", nil
	})
	deploy := fleet.Guard(gate, hostSpec("app_deploy"), func(context.Context, hostArgs) (string, error) {
		t.Error("a deploy ran")
		return "", nil
	})
	for i := 1; i <= 5; i++ {
		host := fmt.Sprintf("web-%d", i)
		_, err := restart(t.Context(), hostArgs{Host: host})
		want := error(nil)
		if host == "web-2" || host == "web-5" {
			want = errDown
		}
		if !errors.Is(err, want) {
			t.Fatalf("restart %s: %v, want %v", host, err, want)
		}
	}
	for i := 1; i <= 2; i++ {
		if _, err := deploy(t.Context(), hostArgs{Host: fmt.Sprintf("app-%d", i)}); !errors.Is(err, fleet.ErrReviewRejected) {
			t.Fatalf("deploy app-%d: %v, want a rejection", i, err)
		}
	}

	// A run the run reviewer approves waits for an operator on its manual
	// criterion; the operator fails it.
	run := &gated.Proposal{
		V: 1, ID: "run-1-r1", Tenant: "acme", Kind: gated.KindRun, Action: "code_change",
		Class: gated.ClassWrite, BlastRadius: gated.BlastSingleDevice,
		RequestedBy: &gated.RequestedBy{Agent: "orchestrator"},
		Run:         &gated.Run{RunID: "run-1", Status: gated.RunCompleted, Round: 1, Worker: "coder-1", Summary: "done"},
		Criteria: []gated.Criterion{
			{ID: "tests", Description: "tests pass", Required: true, Kind: gated.CriterionCommandResult,
				Evidence: map[string]any{"command": "go test ./...", "exit_code": 0}},
			{ID: "signoff", Description: "the release manager agrees", Required: true, Kind: gated.CriterionManual},
		},
	}
	held, err := client.Propose(t.Context(), run)
	if !errors.Is(err, fleet.ErrReviewBlocked) || len(held.Reviews) != 1 || held.Reviews[0].Decision != gated.DecisionApprove {
		t.Fatalf("run: %v, %+v", err, held)
	}
	if code, out, err := runGated(t, "operator", "decide", "acme", run.ID, "--criterion", "signoff=fail:not this week",
		"--operator", "alice", "--seed-file", seedFile, "--nats-url", s.ClientURL()); code != 0 {
		t.Fatalf("operator decide: %d %v\n%s", code, err, out)
	}
	rr := held.Reviews[0]

	slices.Sort(latencies)
	if len(latencies) != 7 || key.Plugin != "sop" || key.Persona != "reviewer" {
		t.Fatalf("the verdicts carried %d reviews by %+v, want 7 by sop as reviewer", len(latencies), key)
	}
	rate := 0.4
	want := []audit.ReviewerStats{{
		ReviewerKey: key, Reviews: 7, Approvals: 5, Rejections: 2,
		ApprovedSucceeded: 3, ApprovedFailed: 2, ApprovedThenFailedRate: &rate,
		LatencyP50MS: &latencies[3], LatencyP99MS: &latencies[6],
	}, {
		ReviewerKey: audit.ReviewerKey{Plugin: rr.Plugin, PluginVersion: rr.PluginVersion, Persona: rr.Persona, Model: rr.Model},
		Reviews:     1, Approvals: 1, OperatorOverrides: 1, LatencyP50MS: &rr.LatencyMS, LatencyP99MS: &rr.LatencyMS,
	}}
	cases := []struct {
		note string
		args []string
		want []audit.ReviewerStats
	}{
		{note: "everything", want: want},
		{note: "the tenant", args: []string{"--tenant", "acme"}, want: want},
		{note: "another tenant", args: []string{"--tenant", "other"}, want: []audit.ReviewerStats{}},
		{note: "since an hour", args: []string{"--since", "1h"}, want: want},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			args := append([]string{"report", "reviewers", "--nats-url", s.ClientURL(), "--format", "json"}, tc.args...)
			code, out, err := runGated(t, args...)
			if code != 0 {
				t.Fatalf("gated %v: %d %v", args, code, err)
			}
			var got []audit.ReviewerStats
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("report printed %q: %v", out, err)
			}
			wantJSON, _ := json.Marshal(tc.want)
			gotJSON, _ := json.Marshal(got)
			if string(gotJSON) != string(wantJSON) {
				t.Errorf("report:\n got %s\nwant %s", gotJSON, wantJSON)
			}
		})
	}
	// The console's reviewers page gives the same figures: alice (acme)
	// over the last hour, and with the tenant named.
	_, get := consoleSession(t, "http://"+httpAddr, seedFile)
	for _, path := range []string{"/api/reviewers?since=1h", "/api/reviewers?tenant=acme", "/api/reviewers?since=7d&tenant=acme"} {
		res, body := get(path)
		var page struct {
			Reviewers []audit.ReviewerStats `json:"reviewers"`
		}
		if res.StatusCode != http.StatusOK || json.Unmarshal(body, &page) != nil {
			t.Fatalf("GET %s: %d %s", path, res.StatusCode, body)
		}
		_, report, err := runGated(t, "report", "reviewers", "--nats-url", s.ClientURL(), "--format", "json", "--tenant", "acme", "--since", "1h")
		if err != nil {
			t.Fatal(err)
		}
		var printed []audit.ReviewerStats
		if err := json.Unmarshal([]byte(report), &printed); err != nil {
			t.Fatal(err)
		}
		gotJSON, _ := json.Marshal(page.Reviewers)
		wantJSON, _ := json.Marshal(printed)
		if string(gotJSON) != string(wantJSON) {
			t.Errorf("the console's GET %s:\n got %s\nwant the report's %s", path, gotJSON, wantJSON)
		}
	}
	if res, body := get("/api/reviewers?tenant=other"); res.StatusCode != http.StatusForbidden {
		t.Errorf("alice asks for tenant other's reviewers: %d %s, want 403", res.StatusCode, body)
	}
	labels := fmt.Sprintf(`model=%q,persona=%q,plugin=%q,plugin_version=%q`, key.Model, key.Persona, key.Plugin, key.PluginVersion)
	for _, line := range []string{
		`gated_reviewer_reviews_total{decision="approve",` + labels + `} 5`,
		`gated_reviewer_reviews_total{decision="reject",` + labels + `} 2`,
		`gated_reviewer_reviews_total{decision="none",` + labels + `} 0`,
		`gated_reviewer_approved_outcomes{` + labels + `,status="succeeded"} 3`,
		`gated_reviewer_approved_outcomes{` + labels + `,status="failed"} 2`,
		`gated_reviewer_approved_then_failed_ratio{` + labels + `} 0.4`,
		`gated_reviewer_operator_overrides_total{` + labels + `} 0`,
		fmt.Sprintf(`gated_reviewer_operator_overrides_total{model=%q,persona=%q,plugin=%q,plugin_version=%q} 1`, rr.Model, rr.Persona, rr.Plugin, rr.PluginVersion),
		fmt.Sprintf(`gated_reviewer_latency_seconds{%s,quantile="0.5"} %v`, labels, latencies[3]/1e3),
		fmt.Sprintf(`gated_reviewer_latency_seconds{%s,quantile="0.99"} %v`, labels, latencies[6]/1e3),
	} {
		waitMetric(t, metricsAddr, line)
	}
	code, out, err := runGated(t, "report", "reviewers", "--nats-url", s.ClientURL())
	if code != 0 {
		t.Fatalf("gated report reviewers: %d %v", code, err)
	}
	wantOutput(t, out, `(?m)^PLUGIN +VERSION +PERSONA +MODEL +REVIEWS`, `(?m)^sop +\S+ +reviewer +\S+ +7 +5 +2 +3 +2 +0\.400 +0 `)
}

// TestReportReviewersUsage: flags that cannot work are usage errors that
// say which, before any connection is tried.
func TestReportReviewersUsage(t *testing.T) {
	cases := []struct {
		note string
		args []string
		want string
	}{
		{note: "a format it does not print", args: []string{"--format", "yaml"}, want: `--format "yaml" must be text or json`},
		{note: "a negative window", args: []string{"--since", "-1h"}, want: "--since -1h0m0s must not be negative"},
		{note: "a tenant that is no token", args: []string{"--tenant", "Acme Corp"}, want: `--tenant "Acme Corp" must match`},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			err := run(t.Context(), append([]string{"report", "reviewers", "--nats-url", "nats://127.0.0.1:1"}, tc.args...))
			wantUsageError(t, err, tc.want)
		})
	}
}
