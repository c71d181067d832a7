package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats.go/jetstream"
)

// TestFloorAnswersEveryMessage runs the floor on a real JetStream server:
// every message is answered with a reply of the asked size, one log
// record of the asked size is stored per message, and the streams are
// gone afterwards.
func TestFloorAnswersEveryMessage(t *testing.T) {
	s := natstest.Server(t)
	nc, js := natstest.Connect(t, s)
	rnc, _ := natstest.Connect(t, s)
	ctx := t.Context()
	sizes := map[Path]FloorSizes{PathDenied: {Proposal: 300, Reply: 50, Log: 700}, PathRead: {Proposal: 200, Reply: 80, Log: 900}}
	f, err := StartFloor(ctx, nc, rnc, FloorOptions{Sizes: sizes, InFlight: 8, PullMax: 16, Timeout: 10 * time.Second, Nonce: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	plan := Plan{Counts: map[Path]int{PathDenied: 40, PathRead: 20}, Concurrency: Concurrency{PathDenied: 5, PathRead: 3}}
	recs := Drive(ctx, plan, f.Send, nil)
	for p, want := range map[Path]int{PathDenied: 40, PathRead: 20} {
		sum := recs[p].Summary(string(p))
		if sum.Answered != want || sum.Errors != 0 || sum.ReplyBytes != sizes[p].Reply {
			t.Errorf("%s: %+v", p, sum)
		}
	}
	st, err := js.Stream(ctx, floorLog)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 60 || info.State.Bytes < 40*700+20*900 {
		t.Errorf("log stream holds %d records, %d bytes", info.State.Msgs, info.State.Bytes)
	}
	in, err := js.Stream(ctx, floorIn)
	if err != nil {
		t.Fatal(err)
	}
	// The floor acknowledges a message after its reply, as gated does, so
	// the last acknowledgements may land just after the last answers.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, err := in.Info(ctx)
		if err == nil && info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("work queue not drained: %+v %v", info.State, err)
			break
		}
	}
	if err := f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, floorLog); err != jetstream.ErrStreamNotFound {
		t.Errorf("log stream after Close: %v", err)
	}
	if _, err := f.Send(ctx, PathPlugin, 0); err == nil || !strings.Contains(err.Error(), "no size for path plugin") {
		t.Errorf("a path without sizes: %v", err)
	}
}
