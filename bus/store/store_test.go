package store_test

import (
	"errors"
	"testing"

	"github.com/gated/gated/internal/natstest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/store"
)

func TestVerdicts(t *testing.T) {
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store := store.New(res.Verdicts)
	if _, err := store.Get(t.Context(), "acme", "p1"); !errors.Is(err, gated.ErrNotFound) {
		t.Fatalf("Get missing: err = %v, want ErrNotFound", err)
	}
	first := &gated.Verdict{V: 1, ProposalID: "p1", Tenant: "acme", Outcome: gated.OutcomeRejected, Reason: "first"}
	if _, err := store.Create(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	second := &gated.Verdict{V: 1, ProposalID: "p1", Tenant: "acme", Outcome: gated.OutcomeApproved, Approved: true, Reason: "second"}
	got, err := store.Create(t.Context(), second)
	if !errors.Is(err, gated.ErrExists) || got == nil || got.Reason != "first" {
		t.Fatalf("second Create: got %+v, err %v; want the first verdict and ErrExists", got, err)
	}
	got, err = store.Get(t.Context(), "acme", "p1")
	if err != nil || got.Approved || got.Reason != "first" {
		t.Fatalf("Get: %+v, %v; the first verdict must stand", got, err)
	}
}
