package test

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestSIGTERMWithNATSGoneStopsWithinGrace stops the external NATS server
// under a running `gated serve`, then sends gated SIGTERM: gated must exit
// within --shutdown-grace plus 5 s however its connection stands, with
// exit status 1 and a log line saying what it abandoned. With the server
// gone nothing can be flushed, drained or acknowledged, so each of those
// steps must give up on its bound rather than wait for a server that is
// not coming back.
//
// The deadline checked is a hang detector, not a timing assertion: it
// leaves generous slack over grace + 5 s for a loaded machine.
func TestSIGTERMWithNATSGoneStopsWithinGrace(t *testing.T) {
	const grace = 2 * time.Second
	const bound = grace + 5*time.Second
	ns := startNATS(t, 1)
	g := launchGated(t, "gated", ns.url(), 1, "--shutdown-grace", grace.String())
	ns.stop(0)
	// gated notices the loss: /readyz stops saying connected.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, doc := g.ready()
		if !ok && doc.NATS != "" && doc.NATS != "CONNECTED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gated still reports NATS %q 30s after the server stopped", doc.NATS)
		}
		time.Sleep(50 * time.Millisecond)
	}

	g.mu.Lock()
	cmd, exited := g.cmd, g.exited
	g.mu.Unlock()
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		took := time.Since(start)
		t.Logf("gated exited %s after SIGTERM (grace %s): %v", took.Round(10*time.Millisecond), grace, err)
		logs := g.logs.String()
		if line := grepLines(logs, "shutdown abandoned"); line == "" {
			t.Errorf("gated exited without a log line saying what its shutdown abandoned:\n%s", lastLines(logs, 40))
		} else {
			t.Log(line)
		}
		// What was not sent to the server is lost: not a clean stop.
		if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 1 {
			t.Errorf("gated exited with %v, want exit status 1 after abandoning part of its shutdown", err)
		}
		if took > bound+20*time.Second {
			t.Errorf("gated took %s to exit, far over grace + 5s (%s)", took, bound)
		}
	case <-time.After(bound + 20*time.Second):
		// Let the goroutines say where they wait before the cleanup kills it.
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		time.Sleep(time.Second)
		t.Fatalf("gated still runs %s after SIGTERM with its NATS server gone (grace %s, bound %s)", bound+20*time.Second, grace, bound)
	}
}
