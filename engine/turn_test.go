package engine_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// turnLog is an engine.Turn that writes down what the engine does with
// it, and what the reviewer saw of it; Retake fails with retakeErr.
type turnLog struct {
	mu        sync.Mutex
	steps     []string
	retakeErr error
}

func (l *turnLog) note(step string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.steps = append(l.steps, step)
}

func (l *turnLog) Release() { l.note("release") }

func (l *turnLog) Retake(context.Context) error {
	l.note("retake")
	return l.retakeErr
}

// TestReviewGivesItsTurnUp: the engine gives the delivery's turn up while
// the reviewer works and takes it back before it decides, once for a
// proposal however many reviewers it has; a turn it cannot take back
// (shutdown) leaves the proposal undecided, with nothing stored.
func TestReviewGivesItsTurnUp(t *testing.T) {
	for _, tc := range []struct {
		note      string
		retakeErr error
		want      []string
	}{
		{note: "taken back", want: []string{"release", "review", "retake"}},
		{note: "not taken back", retakeErr: context.Canceled, want: []string{"release", "review", "retake"}},
	} {
		t.Run(tc.note, func(t *testing.T) {
			turn := &turnLog{retakeErr: tc.retakeErr}
			h := newHarness(t, func(h *harness) {
				h.reviewer.answer = func(context.Context, engine.ReviewRequest) (engine.ReviewResult, error) {
					turn.note("review")
					return approval(), nil
				}
			})
			data := []byte(`{"v":1,"id":"t1","tenant":"acme","action":"host_restart_service","class":"write",` +
				`"blast_radius":"single_device","target":{"service":"nginx"},"reason":"restart"}`)
			v, err := h.eng.Decide(t.Context(), engine.Delivery{
				Subject: "gated.proposals.acme.host_restart_service", Data: data, MsgID: "acme.t1",
				Attempt: 1, Trail: h.stream.trail(), Turn: turn,
			})
			if !slices.Equal(turn.steps, tc.want) {
				t.Fatalf("turn steps %v, want %v", turn.steps, tc.want)
			}
			if tc.retakeErr == nil {
				if err != nil || !v.Approved {
					t.Fatalf("Decide: %v, %+v", err, v)
				}
				return
			}
			if !errors.Is(err, tc.retakeErr) || v != nil {
				t.Fatalf("Decide = %+v, %v; want no verdict and %v", v, err, tc.retakeErr)
			}
			if _, err := h.store.Get(t.Context(), "acme", "t1"); !errors.Is(err, gated.ErrNotFound) {
				t.Fatalf("a verdict was stored for a decision that could not take its turn back: %v", err)
			}
		})
	}
}
