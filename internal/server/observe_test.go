package server

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	dto "github.com/prometheus/client_model/go"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/internal/telemetry"
)

// TestObservedStoreTimesClaimWaits waits, through the serve's store
// wrapper over a real verdict bucket, for a verdict stored meanwhile, and
// checks the wait is in gated_claim_wait_seconds.
func TestObservedStoreTimesClaimWaits(t *testing.T) {
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
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
