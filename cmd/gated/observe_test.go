package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/internal/telemetry"
)

// TestServeMetricsOfReviewsPluginsAuditAndDedupe runs serve with the
// bundled sop reviewer and checks that /metrics follows what happened: a
// review's latency under its plugin and persona, every audit append, an
// identical rejection answered at stage dedupe, the plugin up, and, once
// its process is killed, its exit and its relaunch as a restart.
func TestServeMetricsOfReviewsPluginsAuditAndDedupe(t *testing.T) {
	clearGatedEnv(t)
	s := bustest.Server(t)
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

// TestObservedStoreTimesClaimWaits waits, through the serve's store
// wrapper over a real verdict bucket, for a verdict stored meanwhile, and
// checks the wait is in gated_claim_wait_seconds.
func TestObservedStoreTimesClaimWaits(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	obs := newObservabilityMetrics()
	st := telemetry.Store(store.New(res.Verdicts), obs.observeClaimWait)
	v := &gated.Verdict{V: gated.SchemaVersion, ProposalID: "p-wait", Tenant: "acme", Action: "host_restart_service", Kind: gated.KindAction,
		Outcome: gated.OutcomeRejected, Stage: gated.StageReview, Reason: "no", DecidedAt: time.Now().UTC(), AuditSeq: 1,
		ProposalSHA256: "0000000000000000000000000000000000000000000000000000000000000000"}
	var wg sync.WaitGroup
	var got *gated.Verdict
	var waitErr error
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		got, waitErr = st.Await(ctx, "acme", "p-wait")
	})
	if _, err := st.Create(t.Context(), v); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if waitErr != nil || got == nil || got.ProposalID != "p-wait" {
		t.Fatalf("Await: %+v, %v", got, waitErr)
	}
	if n := histogramCount(t, obs.claimWait); n != 1 {
		t.Fatalf("gated_claim_wait_seconds counted %d waits, want 1", n)
	}
	// A wait cut short by its context is a wait too.
	ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	if _, err := st.Await(ctx, "acme", "p-never"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Await of a verdict never stored: %v", err)
	}
	if n := histogramCount(t, obs.claimWait); n != 2 {
		t.Fatalf("gated_claim_wait_seconds counted %d waits, want 2", n)
	}
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
