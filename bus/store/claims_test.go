package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
)

func TestClaims(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store := store.New(res.Verdicts)
	ctx := t.Context()
	live := func(holder string) engine.Claim {
		return engine.Claim{Holder: holder, Until: time.Now().Add(time.Hour).UTC()}
	}
	claim := func(id string, c engine.Claim) (engine.Claim, error) { return store.Claim(ctx, "acme", id, c) }

	first, err := claim("p1", live("seq:1"))
	if err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if first.Replaced {
		t.Fatal("a claim created where none was says it replaced one")
	}
	held, err := claim("p1", live("seq:2"))
	if !errors.Is(err, gated.ErrClaimed) || held.Holder != "seq:1" || held.Revision != first.Revision {
		t.Fatalf("claim of another message: %+v, %v; want ErrClaimed naming seq:1 at revision %d", held, err, first.Revision)
	}
	over, err := claim("p1", live("seq:1"))
	if err != nil {
		t.Fatalf("a redelivery of the holding message must take its claim over: %v", err)
	}
	if over.Revision <= first.Revision {
		t.Fatalf("claim taken over at revision %d, want one past %d", over.Revision, first.Revision)
	}
	// Its holder may have stored a verdict: the taker looks it up.
	if !over.Replaced {
		t.Fatal("a claim taken over does not say it replaced one")
	}
	if err := store.Release(ctx, "acme", "p1", engine.Claim{Holder: "seq:2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := claim("p1", live("seq:3")); !errors.Is(err, gated.ErrClaimed) {
		t.Fatalf("after a release by a non-holder: err = %v, want the claim still held", err)
	}
	// The first delivery's claim was taken over: releasing it leaves the
	// redelivery's claim in place.
	if err := store.Release(ctx, "acme", "p1", first); err != nil {
		t.Fatal(err)
	}
	if _, err := claim("p1", live("seq:3")); !errors.Is(err, gated.ErrClaimed) {
		t.Fatalf("after releasing a claim that was taken over: err = %v, want the new claim still held", err)
	}
	if err := store.Release(ctx, "acme", "p1", over); err != nil {
		t.Fatal(err)
	}
	again, err := claim("p1", live("seq:3"))
	if err != nil || again.Replaced {
		t.Fatalf("claim after release: %+v, %v; want one created afresh", again, err)
	}
	// A release that names the holder only reads the claim first.
	if err := store.Release(ctx, "acme", "p1", engine.Claim{Holder: again.Holder}); err != nil {
		t.Fatal(err)
	}
	if _, err := claim("p1", live("seq:4")); err != nil {
		t.Fatalf("claim after a release by holder name: %v", err)
	}
	if _, err := claim("p2", engine.Claim{Holder: "seq:1", Until: time.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	if _, err := claim("p2", live("seq:2")); err != nil {
		t.Fatalf("a stale claim must be taken over: %v", err)
	}

	// Claims share the bucket with verdicts and target histories and
	// collide with neither, whatever the ids are called.
	for _, id := range []string{"claims", "targets", "p1"} {
		v := &gated.Verdict{V: 1, ProposalID: id, Tenant: "acme", Outcome: gated.OutcomeApproved, Approved: true, TargetKey: "p1", DecidedAt: time.Now()}
		if _, err := store.Create(ctx, v); err != nil {
			t.Fatalf("verdict %s: %v", id, err)
		}
		h, err := store.Recent(ctx, "acme", "p1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Join(ctx, v, h); err != nil {
			t.Fatalf("joining %s to target p1: %v", id, err)
		}
		if _, err := claim(id, live("seq:9")); err != nil && !errors.Is(err, gated.ErrClaimed) {
			t.Fatalf("claim %s: %v", id, err)
		}
		if got, err := store.Get(ctx, "acme", id); err != nil || got.ProposalID != id {
			t.Fatalf("verdict %s after its claim: %+v, %v", id, got, err)
		}
	}
	if recent, err := store.Recent(ctx, "acme", "p1"); err != nil || len(recent.Verdicts) != 3 {
		t.Fatalf("target history: %d entries, %v; want the 3 approvals", len(recent.Verdicts), err)
	}

	// Of many deliveries claiming at once, one wins.
	var won atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_, err := claim("p3", live(fmt.Sprintf("seq:%d", 100+i)))
			switch {
			case err == nil:
				won.Add(1)
			case !errors.Is(err, gated.ErrClaimed):
				t.Errorf("claim %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d concurrent claims won, want 1", won.Load())
	}

	// Await returns a verdict stored later, and one stored already.
	got := make(chan *gated.Verdict, 1)
	go func() {
		v, err := store.Await(ctx, "acme", "p4")
		if err != nil {
			t.Errorf("Await: %v", err)
		}
		got <- v
	}()
	// Whether the watch starts before or after the verdict is stored, Await
	// must see it.
	if _, err := store.Create(ctx, &gated.Verdict{V: 1, ProposalID: "p4", Tenant: "acme", Outcome: gated.OutcomeRejected, Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		if v == nil || v.ProposalID != "p4" {
			t.Fatalf("Await returned %+v", v)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for Await to return the verdict")
	}
	if v, err := store.Await(ctx, "acme", "p4"); err != nil || v.Reason != "r" {
		t.Fatalf("Await on a stored verdict: %+v, %v", v, err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := store.Await(short, "acme", "never"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Await past its context: err = %v, want DeadlineExceeded", err)
	}
}
