package main

import (
	"os"
	"strings"
	"testing"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
)

// TestServeMetricsOfReviewsPluginsAuditAndDedupe runs serve with the
// bundled sop reviewer and checks that /metrics follows what happened: a
// review's latency under its plugin and persona, every audit append, an
// identical rejection answered at stage dedupe, the plugin up, and, once
// its process is killed, its exit and its relaunch as a restart.
func TestServeMetricsOfReviewsPluginsAuditAndDedupe(t *testing.T) {
	clearGatedEnv(t)
	s := natstest.Server(t)
	httpAddr, stop := startServe(t, s.ClientURL())
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
	waitMetric(t, httpAddr, `gated_plugin_up{plugin="sop"} 1`)
	waitMetric(t, httpAddr, `gated_plugin_events_total{event="started",plugin="sop"} 1`)

	if v := propose(t, client, writeProposal("p-ok", "host_restart_service", 1)); v.Outcome != gated.OutcomeApproved {
		t.Fatalf("p-ok: %s (%s)", v.Outcome, v.Reason)
	}
	// No SOP covers a deploy: the reviewer rejects it, and the same
	// request again is answered from that rejection.
	if v := propose(t, client, writeProposal("p-deploy-1", "app_deploy", 2)); v.Outcome != gated.OutcomeRejected || v.Stage != gated.StageReview {
		t.Fatalf("p-deploy-1: %s at %s (%s)", v.Outcome, v.Stage, v.Reason)
	}
	if v := propose(t, client, writeProposal("p-deploy-2", "app_deploy", 2)); v.Stage != gated.StageDedupe {
		t.Fatalf("p-deploy-2: %s at %s (%s), want the dedupe stage", v.Outcome, v.Stage, v.Reason)
	}
	waitMetric(t, httpAddr, `gated_review_seconds_count{persona="reviewer",plugin="sop",result="ok"} 2`)
	waitMetric(t, httpAddr, `gated_dedupe_hits_total 1`)
	// Three verdicts, and at least the plugin's start: each trail sealed.
	body := waitMetric(t, httpAddr, `gated_audit_append_seconds_count{result="ok"} 4`)
	if strings.Contains(body, `gated_plugin_restarts_total{plugin="sop"}`) {
		t.Errorf("a restart counted before any:\n%s", body)
	}

	pid := pluginPID(t, httpAddr, "sop")
	proc, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, httpAddr, `gated_plugin_events_total{event="exited",plugin="sop"} 1`)
	waitMetric(t, httpAddr, `gated_plugin_restarts_total{plugin="sop"} 1`)
	waitMetric(t, httpAddr, `gated_plugin_up{plugin="sop"} 1`)
}
