package store_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
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

func approvalOn(id, target string) *gated.Verdict {
	return &gated.Verdict{V: 1, ProposalID: id, Tenant: "acme", Outcome: gated.OutcomeApproved,
		Approved: true, TargetKey: target, DecidedAt: time.Now()}
}

func idsOf(h engine.History) []string {
	var ids []string
	for _, v := range h.Verdicts {
		ids = append(ids, v.ProposalID)
	}
	return ids
}

// An approval joins its target's history only at the revision it was read
// at: of two gated processes that read one history, the second to join is
// refused with the history as it now stands, and joins that one.
func TestTargetHistoryJoinsByCompareAndSet(t *testing.T) {
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	kv := &countingKV{KeyValue: res.Verdicts}
	mine, other := store.New(kv), store.New(res.Verdicts)

	tests := []struct {
		note   string
		target string
		// before are the approvals that joined before both read.
		before []string
	}{
		{note: "no history yet", target: "web-1"},
		{note: "a history of one", target: "web-2", before: []string{"p0"}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			for _, id := range tc.before {
				h, err := other.Recent(ctx, "acme", tc.target)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := other.Join(ctx, approvalOn(id, tc.target), h); err != nil {
					t.Fatal(err)
				}
			}
			seen, err := mine.Recent(ctx, "acme", tc.target)
			if err != nil {
				t.Fatal(err)
			}
			theirs, err := other.Recent(ctx, "acme", tc.target)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := other.Join(ctx, approvalOn("theirs", tc.target), theirs); err != nil {
				t.Fatalf("the first join: %v", err)
			}
			gets := kv.gets.Load()
			fresh, err := mine.Join(ctx, approvalOn("mine", tc.target), seen)
			if !errors.Is(err, engine.ErrTargetChanged) {
				t.Fatalf("the second join at the revision both read: %v, want ErrTargetChanged", err)
			}
			want := append(slices.Clone(tc.before), "theirs")
			if got := idsOf(fresh); !slices.Equal(got, want) {
				t.Errorf("the refused join returned the history %v, want %v", got, want)
			}
			if kv.gets.Load()-gets != 1 {
				t.Errorf("the refused join read the history %d times, want 1", kv.gets.Load()-gets)
			}
			gets = kv.gets.Load()
			joined, err := mine.Join(ctx, approvalOn("mine", tc.target), fresh)
			if err != nil {
				t.Fatalf("joining the fresh history: %v", err)
			}
			if kv.gets.Load() != gets {
				t.Errorf("a join that succeeds read the history %d times, want 0", kv.gets.Load()-gets)
			}
			stored, err := other.Recent(ctx, "acme", tc.target)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, "mine")
			if got := idsOf(stored); !slices.Equal(got, want) || stored.Revision != joined.Revision {
				t.Errorf("history %v at revision %d, want %v at %d", got, stored.Revision, want, joined.Revision)
			}
		})
	}
}

// An entry of the proposal itself, left by a decision that crashed before
// its verdict was stored, is replaced when the proposal joins again; an
// approval stored with Create does not join (the engine joins first); and
// only an approval on a target may join.
func TestTargetHistoryJoin(t *testing.T) {
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	st := store.New(res.Verdicts)
	join := func(v *gated.Verdict) error {
		h, err := st.Recent(ctx, "acme", "web-1")
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.Join(ctx, v, h)
		return err
	}
	for _, id := range []string{"a", "b", "a"} {
		if err := join(approvalOn(id, "web-1")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Create(ctx, approvalOn("c", "web-1")); err != nil {
		t.Fatal(err)
	}
	h, err := st.Recent(ctx, "acme", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := idsOf(h); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("history %v, want [b a]", got)
	}
	for _, tc := range []struct {
		note string
		v    *gated.Verdict
	}{
		{note: "a rejection", v: &gated.Verdict{V: 1, ProposalID: "r", Tenant: "acme", Outcome: gated.OutcomeRejected, TargetKey: "web-1"}},
		{note: "no target", v: approvalOn("n", "")},
	} {
		t.Run(tc.note, func(t *testing.T) {
			if err := join(tc.v); err == nil {
				t.Errorf("%s joined a target's history", tc.note)
			}
		})
	}
}
