package store_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
)

// countingKV is the real bucket, with its reads counted.
type countingKV struct {
	jetstream.KeyValue
	gets atomic.Int64
}

func (c *countingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	c.gets.Add(1)
	return c.KeyValue.Get(ctx, key)
}

// An approval joins its target's history as the history stands when it
// is written: the store keeps no read of it between Recent and Create, so
// each approval reads the history once, and an approval by another gated
// in between is kept, not overwritten.
func TestTargetHistoryKeepsEveryApproval(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	kv := &countingKV{KeyValue: res.Verdicts}
	mine, other := store.New(kv), store.New(res.Verdicts)
	n := 0
	approve := func(store *store.Verdicts) {
		t.Helper()
		n++
		v := &engine.Verdict{V: 1, ProposalID: "p" + string(rune('a'+n)), Tenant: "acme", Outcome: engine.OutcomeApproved,
			Approved: true, TargetKey: "web-1", DecidedAt: time.Now()}
		if _, err := store.Create(ctx, v); err != nil {
			t.Fatalf("approval %d: %v", n, err)
		}
	}
	read := func() int {
		t.Helper()
		got, err := mine.Recent(ctx, "acme", "web-1")
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}
	// Reads of the history by the approval itself, beyond the verdict
	// look-ups Create makes on a conflict (none here).
	approveCounting := func() int64 {
		t.Helper()
		before := kv.gets.Load()
		approve(mine)
		return kv.gets.Load() - before
	}

	if got := read(); got != 0 {
		t.Fatalf("history before any approval: %d entries", got)
	}
	if gets := approveCounting(); gets != 1 {
		t.Errorf("the first approval read the history %d times, want 1", gets)
	}
	if got := read(); got != 1 {
		t.Fatalf("history: %d entries, want 1", got)
	}
	if gets := approveCounting(); gets != 1 {
		t.Errorf("the second approval read the history %d times, want 1", gets)
	}
	// Another gated approves on the target after this one's read.
	if got := read(); got != 2 {
		t.Fatalf("history: %d entries, want 2", got)
	}
	approve(other)
	if gets := approveCounting(); gets != 1 {
		t.Errorf("an approval after another gated's read the history %d times, want 1", gets)
	}
	if gets := approveCounting(); gets != 1 {
		t.Errorf("an approval read the history %d times, want 1", gets)
	}
	// A read that found no history, then one created by another gated.
	if _, err := mine.Recent(ctx, "acme", "web-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Create(ctx, &engine.Verdict{V: 1, ProposalID: "q1", Tenant: "acme", Outcome: engine.OutcomeApproved,
		Approved: true, TargetKey: "web-2", DecidedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := mine.Create(ctx, &engine.Verdict{V: 1, ProposalID: "q2", Tenant: "acme", Outcome: engine.OutcomeApproved,
		Approved: true, TargetKey: "web-2", DecidedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}

	for key, want := range map[string][]string{"web-1": {"pb", "pc", "pd", "pe", "pf"}, "web-2": {"q1", "q2"}} {
		got, err := other.Recent(ctx, "acme", key)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, v := range got {
			ids = append(ids, v.ProposalID)
		}
		if len(ids) != len(want) {
			t.Fatalf("history of %s = %v, want %v", key, ids, want)
		}
		for i := range want {
			if ids[i] != want[i] {
				t.Fatalf("history of %s = %v, want %v", key, ids, want)
			}
		}
	}
}
