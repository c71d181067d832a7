package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/fleet"
)

// frozenRule denies every proposal on one service.
func frozenRule(service string) string {
	return fmt.Sprintf(`package gated

deny contains {"rule": "%s_frozen", "message": "%s is frozen"} if {
	input.proposal.target.service == %q
}
`, service, service, service)
}

// readProposal is a read proposal on service, which the default policy
// approves without review.
func readProposal(id, service string) []byte {
	return fmt.Appendf(nil, `{"v":1,"id":%q,"tenant":"acme","action":"host_list_services","class":"read",`+
		`"target":{"device_id":7,"service":%q},"reason":"shadow test","operator":{"id":"alice","roles":["sre"]},"requested_by":{"agent":"a","session":"s"}}`, id, service)
}

// startShadowServe runs serve on an external test server with the live
// policy directory and the shadow one, and returns the NATS URL, the
// --http address and a stop function that waits for serve to return.
func startShadowServe(t *testing.T, liveDir, shadowDir string) (string, string, func()) {
	t.Helper()
	clearGatedEnv(t)
	s := natstest.Server(t)
	httpAddr, stop := startServe(t, s.ClientURL(), "--policies", liveDir, "--shadow-policies", shadowDir, "--policy-poll", "50ms")
	return s.ClientURL(), httpAddr, stop
}

// fleetClient is a fleet client on a connection of its own to url,
// closed when the test ends.
func fleetClient(t *testing.T, url string) *fleet.Client {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func propose(t *testing.T, client *fleet.Client, data []byte) *gated.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	v, err := client.ProposeRaw(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestServeShadowNeverChangesVerdicts runs serve with a live policy that
// freezes redis and a shadow that freezes nginx instead: every verdict is
// the live policy's, each difference is audited and counted, a shadow
// that stops building changes nothing, and policy shadow report sums it up.
func TestServeShadowNeverChangesVerdicts(t *testing.T) {
	liveDir, shadowDir := t.TempDir(), t.TempDir()
	writeFile(t, liveDir, "frozen.rego", frozenRule("redis"))
	writeFile(t, shadowDir, "frozen.rego", frozenRule("nginx"))
	url, httpAddr, stop := startShadowServe(t, liveDir, shadowDir)
	defer stop()
	client := fleetClient(t, url)
	cases := []struct {
		id, service string
		want        gated.Outcome
	}{
		{"p-nginx", "nginx", gated.OutcomeApproved}, // the shadow would reject it
		{"p-redis", "redis", gated.OutcomeRejected}, // the shadow would approve it
		{"p-mysql", "mysql", gated.OutcomeApproved}, // both approve
	}
	for _, tc := range cases {
		if v := propose(t, client, readProposal(tc.id, tc.service)); v.Outcome != tc.want {
			t.Errorf("%s: verdict %s (%s), want %s: the shadow changed it", tc.id, v.Outcome, v.Reason, tc.want)
		}
	}

	// A shadow that no longer builds is refused; live decisions go on.
	writeFile(t, shadowDir, "broken.rego", "package gated\n\ndeny contains x if {\n")
	waitMetric(t, httpAddr, `gated_policy_shadow_stale 1`)
	if v := propose(t, client, readProposal("p-after", "nginx")); v.Outcome != gated.OutcomeApproved {
		t.Errorf("after a broken shadow: verdict %s (%s), want approved", v.Outcome, v.Reason)
	}
	metrics := waitMetric(t, httpAddr, `gated_policy_shadow_decisions_total 4`)
	for _, want := range []string{`gated_policy_shadow_differences_total{kind="outcome"} 3`, `gated_policy_shadow_differences_total{kind="error"} 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	code, out, err := runGated(t, "policy", "shadow", "report", "--nats-url", url, "--format", "json", "--first", "2")
	if code != 0 {
		t.Fatalf("policy shadow report: exit %d, %v\n%s", code, err, out)
	}
	var sum audit.ShadowSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, out)
	}
	want := map[string]int{"nginx_frozen": 2, "redis_frozen": 1}
	if sum.Decisions != 4 || sum.Differences != 3 || sum.ByRule["nginx_frozen"] != want["nginx_frozen"] || sum.ByRule["redis_frozen"] != want["redis_frozen"] ||
		sum.ByOutcome["approved -> rejected"] != 2 || sum.ByOutcome["rejected -> approved"] != 1 || sum.ByKind["outcome"] != 3 || sum.ByTenant["acme"] != 3 {
		t.Errorf("report %s\nwant 4 decisions, 3 differences, rules %v, 2 approved -> rejected, 1 rejected -> approved", out, want)
	}
	if len(sum.First) != 2 || sum.First[0].ProposalID != "p-nginx" || sum.First[1].ProposalID != "p-redis" || sum.First[0].Action != "host_list_services" {
		t.Errorf("first differences %+v, want p-nginx then p-redis", sum.First)
	}
	code, out, _ = runGated(t, "policy", "shadow", "report", "--nats-url", url, "--tenant", "beta")
	if code != 0 || !strings.Contains(out, "decisions with a shadow: 0") {
		t.Errorf("report for tenant beta: exit %d\n%s", code, out)
	}
}

// TestServeStartsWithABrokenShadow: a shadow bundle that does not build at
// start does not stop serve, and proposals are decided by the live policy
// alone.
func TestServeStartsWithABrokenShadow(t *testing.T) {
	shadowDir := t.TempDir()
	writeFile(t, shadowDir, "broken.rego", "package gated\n\ndeny contains x if {\n")
	url, httpAddr, stop := startShadowServe(t, t.TempDir(), shadowDir)
	defer stop()
	client := fleetClient(t, url)
	if v := propose(t, client, readProposal("p1", "nginx")); v.Outcome != gated.OutcomeApproved {
		t.Errorf("verdict %s (%s), want approved", v.Outcome, v.Reason)
	}
	waitMetric(t, httpAddr, "gated_policy_shadow_decisions_total 0")
	// Fixed, the shadow is loaded by the watcher and decides.
	writeFile(t, shadowDir, "broken.rego", frozenRule("nginx"))
	waitMetric(t, httpAddr, "gated_policy_shadow_stale 0")
	if v := propose(t, client, readProposal("p2", "nginx")); v.Outcome != gated.OutcomeApproved {
		t.Errorf("verdict %s (%s), want approved", v.Outcome, v.Reason)
	}
	waitMetric(t, httpAddr, `gated_policy_shadow_differences_total{kind="outcome"} 1`)
}

// waitMetric polls /metrics until it holds one of lines, for up to a
// minute, and returns the last scrape.
func waitMetric(t *testing.T, httpAddr string, lines ...string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var body string
	for {
		resp, err := http.Get("http://" + httpAddr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			for _, l := range strings.Split(body, "\n") {
				if slices.Contains(lines, l) {
					return body
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never showed any of %q:\n%s", lines, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestShadowCommandErrors: flags that cannot work are usage errors, and a
// range with a message that is not a gated record is reported, exit 3.
func TestShadowCommandErrors(t *testing.T) {
	clearGatedEnv(t)
	noStream := natstest.Server(t)
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
	if _, err := bus.Setup(t.Context(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), "gated.audit.acme.policy.shadow_differs", []byte(`{"forged":true}`)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		note string
		args []string
		code int
		msg  string
	}{
		{note: "replace without a directory", args: []string{"serve", "--shadow-policies-replace"}, code: exitUsage, msg: "--shadow-policies-replace needs --shadow-policies"},
		{note: "bad format", args: []string{"policy", "shadow", "report", "--nats-url", s.ClientURL(), "--format", "yaml"}, code: exitUsage, msg: `--format "yaml"`},
		{note: "negative first", args: []string{"policy", "shadow", "report", "--nats-url", s.ClientURL(), "--first", "-1"}, code: exitUsage, msg: "--first -1"},
		{note: "bad since", args: []string{"policy", "shadow", "report", "--nats-url", s.ClientURL(), "--since", "yesterday"}, code: exitUsage, msg: `--since "yesterday"`},
		{note: "bad tenant", args: []string{"policy", "shadow", "report", "--nats-url", s.ClientURL(), "--tenant", "Acme"}, code: exitUsage, msg: `--tenant "Acme"`},
		{note: "no audit stream", args: []string{"policy", "shadow", "report", "--nats-url", noStream.ClientURL()}, code: exitFailure, msg: "GATED_AUDIT does not exist"},
		{note: "a message that is not a record", args: []string{"policy", "shadow", "report", "--nats-url", s.ClientURL()}, code: exitAuditProblems, msg: "1 invalid records"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			code, out, err := runGated(t, tc.args...)
			if code != tc.code || err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("exit %d, err %v; want exit %d naming %q\n%s", code, err, tc.code, tc.msg, out)
			}
		})
	}
}
