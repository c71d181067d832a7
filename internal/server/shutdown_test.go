package server

import (
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestShutdownAbandonsAStopThatHangs: a stop that never returns (a
// webhook, a plugin, a library waiting on a server) does not hold serve:
// the stops are given up on by the grace plus shutdownSlack, and what was
// given up on is named: the stop still running, and the stops after it,
// never begun.
func TestShutdownAbandonsAStopThatHangs(t *testing.T) {
	const grace = 200 * time.Millisecond
	s := &Server{cfg: Config{ShutdownGrace: grace}, log: zap.NewNop()}
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	ran := []string{}
	s.onStop("the last", func() { ran = append(ran, "the last") })
	s.onStop("a stop that hangs", func() { <-hang })
	s.onStop("the first", func() { ran = append(ran, "the first") })

	began := time.Now()
	abandoned := s.stopAll(began.Add(grace), nil)
	took := time.Since(began)
	if took > grace+shutdownSlack {
		t.Errorf("the stops took %s, over the grace and the slack (%s)", took, grace+shutdownSlack)
	}
	if took < grace+shutdownSlack-shutdownMargin-time.Second {
		t.Errorf("the stops were given up on after %s, before the bound less its margin", took)
	}
	want := []string{"stopping a stop that hangs (still running)", "stopping the last (never begun)"}
	if !slices.Equal(abandoned, want) {
		t.Errorf("abandoned %q, want %q", abandoned, want)
	}
	if !slices.Equal(ran, []string{"the first"}) {
		t.Errorf("ran %q, want the first stop only", ran)
	}
	if len(s.stops) != 0 {
		t.Error("the stops are still registered: a second unwind would run them again")
	}
}
