package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
)

// serve's shutdown is bounded: it is over --shutdown-grace plus
// shutdownSlack after it began, whatever state NATS, the plugins or the
// webhooks are in. Within the grace, proposals in flight finish; after
// it, what serve started stops. A wait on a NATS server that is gone
// would not end on its own (a draining subscription waits for the
// server's word, a publish for its acknowledgement), so the connection
// is closed at the end of the grace when it is down, and at closeBy in
// any case: every wait on it then ends at once. A stop still running at
// the bound is abandoned, and serve exits non-zero saying what it
// abandoned.

const (
	// shutdownSlack is how long the shutdown may last past the grace.
	shutdownSlack = 5 * time.Second
	// shutdownMargin is left of the slack for the process to exit.
	shutdownMargin = 500 * time.Millisecond
	// closeNATSBefore is how long before the stops are abandoned the
	// NATS connection is closed, so that the stops waiting on it end.
	closeNATSBefore = 2 * time.Second

	// httpStopWait bounds the requests a listener lets finish.
	httpStopWait = 5 * time.Second
	// auditCloseWait bounds the wait for the audit records queued.
	auditCloseWait = 10 * time.Second
	// natsFlushWait bounds the flush after the drain.
	natsFlushWait = 10 * time.Second
)

// stopStep is one thing the shutdown stops, named for the log line of a
// shutdown that abandons it.
type stopStep struct {
	name string
	stop func()
}

// onStop registers stop, which stops what name says, to run when Run
// returns, before the stops registered earlier.
func (s *Server) onStop(name string, stop func()) {
	s.stops = append(s.stops, stopStep{name: name, stop: stop})
}

// shutdown drains the proposals in flight for the grace, then runs the
// registered stops, all of it within the grace and shutdownSlack. It
// returns an error, already logged, when it abandoned anything.
func (s *Server) shutdown() error {
	began := time.Now()
	graceEnd := began.Add(s.cfg.ShutdownGrace)
	s.ready.Store(false)
	s.log.Info("shutting down: draining proposals in flight", zap.Duration("grace", s.cfg.ShutdownGrace))
	abandoned := s.stopAll(graceEnd, []stopStep{
		// No reload lands while proposals drain.
		{"the policy and persona watchers", s.stopWatchers},
		{"the drain of proposals in flight", func() { s.drain(graceEnd) }},
	})
	if len(abandoned) == 0 {
		s.log.Info("gated stopped")
		return nil
	}
	s.log.Error("shutdown abandoned what it could not finish; gated stopped", zap.Strings("abandoned", abandoned),
		zap.Duration("grace", s.cfg.ShutdownGrace), zap.Duration("took", time.Since(began)))
	return &ShutdownError{Abandoned: abandoned}
}

// unwind stops what the start steps started, when the start failed or
// panicked: bounded like a shutdown with no grace, it logs what it
// abandons. After a shutdown it does nothing.
func (s *Server) unwind() {
	if len(s.stops) == 0 {
		return
	}
	if abandoned := s.stopAll(time.Now(), nil); len(abandoned) > 0 {
		s.log.Error("stopping after a failed start abandoned what it could not finish", zap.Strings("abandoned", abandoned))
	}
}

// stopAll runs first, then the registered stops newest first, one after
// the other, until graceEnd plus shutdownSlack less shutdownMargin. It
// closes the NATS connection at graceEnd if it is down then, and at
// closeBy in any case while stops still run. It returns what the stops
// abandoned, and the stops it abandoned still running or never begun.
func (s *Server) stopAll(graceEnd time.Time, first []stopStep) []string {
	steps := first
	for i := len(s.stops) - 1; i >= 0; i-- {
		steps = append(steps, s.stops[i])
	}
	s.stops = nil
	if len(steps) == 0 {
		return s.takeAbandoned()
	}
	giveUp := graceEnd.Add(shutdownSlack - shutdownMargin)
	s.closeBy = giveUp.Add(-closeNATSBefore)

	var mu sync.Mutex
	current := 0 // the step under way
	var runner sync.WaitGroup
	done := make(chan struct{})
	runner.Go(func() {
		for i, st := range steps {
			mu.Lock()
			current = i
			mu.Unlock()
			st.stop()
		}
		close(done)
	})
	under := func() int {
		mu.Lock()
		defer mu.Unlock()
		return current
	}
	graceOver := time.NewTimer(time.Until(graceEnd))
	defer graceOver.Stop()
	closeNow := time.NewTimer(time.Until(s.closeBy))
	defer closeNow.Stop()
	tooLate := time.NewTimer(time.Until(giveUp))
	defer tooLate.Stop()
	for {
		select {
		case <-done:
			// Joined, not only signalled: no frame of serve is left.
			runner.Wait()
			return s.takeAbandoned()
		case <-graceOver.C:
			if s.nc != nil && !s.nc.IsConnected() {
				s.closeNATS("the shutdown grace is over and the NATS server is not reachable")
			}
		case <-closeNow.C:
			s.closeNATS("stopping " + steps[under()].name + " still waits, with the shutdown's end near")
		case <-tooLate.C:
			at := under()
			left := []string{"stopping " + steps[at].name + " (still running)"}
			for _, st := range steps[at+1:] {
				left = append(left, "stopping "+st.name+" (never begun)")
			}
			s.abandon(left...)
			return s.takeAbandoned()
		}
	}
}

// stopContext is the context of a stop's wait: it ends after d, or at
// closeBy if that comes first.
func (s *Server) stopContext(d time.Duration) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(d)
	if !s.closeBy.IsZero() && s.closeBy.Before(deadline) {
		deadline = s.closeBy
	}
	return context.WithDeadline(context.Background(), deadline)
}

// closeNATS closes the NATS connection, once, and logs why unless why is
// "" (its own stop). Closed while it is down, it drops what it holds for
// the server (verdicts, acknowledgements, audit records): that is
// abandoned.
func (s *Server) closeNATS(why string) {
	if s.nc == nil {
		return
	}
	s.closeNC.Do(func() {
		if s.nc.IsClosed() {
			return
		}
		fields := []zap.Field{zap.String("status", s.nc.Status().String())}
		if why != "" {
			fields = append(fields, zap.String("why", why))
		}
		if !s.nc.IsConnected() {
			n, _ := s.nc.Buffered()
			s.abandon(fmt.Sprintf("what was not yet sent to the NATS server (connection %s, %d bytes buffered)", s.nc.Status(), max(n, 0)))
			s.log.Warn("closing the NATS connection while it is down", append(fields, zap.Int("buffered_bytes", max(n, 0)))...)
		} else if why != "" {
			s.log.Warn("closing the NATS connection", fields...)
		}
		s.nc.Close()
	})
}

// abandon notes what the shutdown gave up on.
func (s *Server) abandon(what ...string) {
	s.abandonedMu.Lock()
	defer s.abandonedMu.Unlock()
	s.abandoned = append(s.abandoned, what...)
}

// takeAbandoned returns what the shutdown gave up on, and forgets it.
func (s *Server) takeAbandoned() []string {
	s.abandonedMu.Lock()
	defer s.abandonedMu.Unlock()
	out := s.abandoned
	s.abandoned = nil
	return out
}
