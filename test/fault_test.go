package test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
)

// The fault suites break one thing under load and hold gated to its
// reliability semantics: every proposal JetStream acknowledged gets
// exactly one verdict, nothing is decided twice, and nothing is approved
// without a completed review. The one extra record allowed is the
// orphaned verdict.decided of a gated killed between sealing a trail and
// storing its verdict (docs/AUDIT.md); the redelivery decides again and
// its verdict is the one stored and sent. Proposals a gated held when it died wait
// for the consumer's ack wait (30 s) before they are redelivered, so the
// recovery deadlines are generous.

// TestFaultKillGated SIGKILLs one of two gated processes mid-load and
// restarts it, three times, alternating between them. The first and last
// victims are frozen for a moment before the kill, as a wedged process
// would be, so that proposals are provably in their hands when they die:
// some half decided, some not yet looked at. They come back after the
// ack wait.
func TestFaultKillGated(t *testing.T) {
	ns := startNATS(t, 1)
	procs := []*gatedProc{launchGated(t, "gated-a", ns.url(), 1), launchGated(t, "gated-b", ns.url(), 1)}
	l := newLoad(t, ns.url(), "killgated")
	l.start(500, 15*time.Millisecond)
	for round, at := range []int{80, 220, 360} {
		l.waitCounts(t, at, 0)
		g := procs[round%len(procs)]
		what := "SIGKILL " + g.name
		if round != 1 {
			if err := syscall.Kill(g.pid(), syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			what = "SIGSTOP+SIGKILL " + g.name
		}
		l.mark(what)
		g.kill(t)
		g.start(t)
	}
	l.published(t)
	tl, _ := l.account(t, 2*time.Minute)
	assertClean(t, tl)
	if len(tl.Unexpected) > 0 {
		t.Errorf("a killed gated changed verdicts instead of leaving them to redelivery: %s", countsString(tl.Unexpected))
	}
	if tl.Redelivered == 0 {
		t.Error("no proposal was redelivered: the kills hit nothing in flight")
	}
}

// TestFaultKillPlugin kills the reviewer plugin of a gated while reviews
// are in flight: they fail closed with error verdicts, the supervisor
// relaunches the plugin, and later proposals are approved again.
func TestFaultKillPlugin(t *testing.T) {
	ns := startNATS(t, 1)
	g := launchGated(t, "gated-a", ns.url(), 1)
	l := newLoad(t, ns.url(), "killplugin")
	l.start(240, 25*time.Millisecond)
	l.waitCounts(t, 0, 40)

	pids := pluginPIDs(t, g.pid())
	if len(pids) != 1 {
		t.Fatalf("plugin processes under gated: %v, want one", pids)
	}
	pid := pids[0]
	// Freeze the plugin first, so that reviews are provably in flight in
	// it when it dies, then kill it.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	sent, _ := l.counts()
	l.waitCounts(t, sent+15, 0)
	l.mark("SIGKILL plugin")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, []int{pid})
	var relaunched time.Time
	waitFor(t, "the plugin to be relaunched", func() bool {
		_, doc := g.ready()
		for _, p := range doc.Plugins {
			if p.Name == "sop" && p.Running && p.PID != 0 && p.PID != pid {
				relaunched = time.Now()
				return true
			}
		}
		return false
	})
	l.mark("plugin relaunched")
	l.published(t)
	tl, stored := l.account(t, 90*time.Second)
	assertClean(t, tl)

	failed, after, approvedAfter := 0, 0, 0
	for _, p := range l.order {
		v := stored[p.id]
		if v == nil {
			continue
		}
		want, _ := p.kind.expected()
		if v.Outcome != want {
			// A review cut short fails closed: error (the plugin died
			// under it) or blocked (no plugin to route to until the
			// relaunch). Nothing else may change.
			if !p.kind.reviewed() || v.Stage != gated.StageReview ||
				(v.Outcome != gated.OutcomeError && v.Outcome != gated.OutcomeBlocked) {
				t.Errorf("%s (%s): %s at %s: %s", p.id, p.kind, v.Outcome, v.Stage, v.Reason)
			}
		}
		if v.Outcome == gated.OutcomeError && v.Stage == gated.StageReview {
			failed++
		}
		if p.kind == kindApprove && p.first.After(relaunched) {
			after++
			if v.Approved {
				approvedAfter++
			} else {
				t.Errorf("%s, sent after the relaunch: %s: %s", p.id, v.Outcome, v.Reason)
			}
		}
	}
	t.Logf("reviews failed by the kill: %d; approvals sent after the relaunch: %d of %d", failed, approvedAfter, after)
	if failed == 0 {
		t.Error("no review was in flight when the plugin died: the test did not test the fault")
	}
	if after == 0 {
		t.Error("no proposal to approve was sent after the relaunch")
	}
}

// TestFaultRestartNATS shuts the NATS server down mid-load and starts it
// again on the same port and store: gated reconnects, the fleet's
// publishes retry, and everything sent is decided.
func TestFaultRestartNATS(t *testing.T) {
	ns := startNATS(t, 1)
	g := launchGated(t, "gated-a", ns.url(), 1)
	l := newLoad(t, ns.url(), "restartnats")
	l.start(300, 15*time.Millisecond)
	l.waitCounts(t, 100, 0)

	// Freeze gated for a moment first, so that proposals are in its hands
	// when the server goes: it wakes up to a dead connection mid-decision.
	if err := syscall.Kill(g.pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	l.mark("NATS server down")
	ns.stop(0)
	if err := syscall.Kill(g.pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "gated to report NATS down", func() bool { ok, _ := g.ready(); return !ok })
	time.Sleep(3 * time.Second)
	ns.restart(t, 0)
	l.mark("NATS server up")
	waitFor(t, "gated to be ready again", func() bool { ok, _ := g.ready(); return ok })

	l.published(t)
	tl, _ := l.account(t, 2*time.Minute)
	assertClean(t, tl)
	if len(tl.Unexpected) > 0 {
		t.Errorf("a NATS restart changed verdicts instead of leaving them to redelivery: %s", countsString(tl.Unexpected))
	}
	if tl.PubErrors == 0 {
		t.Error("no publish failed while the server was down: the fleet did not see the fault")
	}
}

// TestFaultKillClusterNode stops the node that leads the proposal stream
// of a three-node cluster under load: the two others elect new leaders,
// gated goes on deciding, and the node catches up when it comes back.
func TestFaultKillClusterNode(t *testing.T) {
	cluster := startNATS(t, 3)
	for _, name := range []string{"gated-a", "gated-b"} {
		launchGated(t, name, cluster.url(), 3)
	}
	l := newLoad(t, cluster.url(), "killnode")
	l.start(300, 30*time.Millisecond)
	l.waitCounts(t, 0, 60)

	leader := cluster.streamLeader(bus.ProposalsStream)
	if leader < 0 {
		t.Fatal("no node leads " + bus.ProposalsStream)
	}
	name := cluster.nodes[leader].name
	l.mark(fmt.Sprintf("stop node %s (%s leader)", name, bus.ProposalsStream))
	cluster.stop(leader)
	down := time.Now()
	_, answered := l.counts()
	l.waitCounts(t, 0, answered+40) // two nodes keep deciding
	time.Sleep(time.Until(down.Add(3 * time.Second)))
	cluster.restart(t, leader)
	l.mark("node " + name + " back")

	l.published(t)
	tl, _ := l.account(t, 2*time.Minute)
	assertClean(t, tl)
	if len(tl.Unexpected) > 0 {
		t.Errorf("losing a node changed verdicts instead of leaving them to redelivery: %s", countsString(tl.Unexpected))
	}
	waitReplicasCurrent(t, l.js)
	if strings.Contains(cluster.logs.String(), "[FTL]") {
		t.Error("a nats-server logged a fatal error")
	}
}

// TestFaultToolsAfterIdle lets a freshly started gated sit idle for
// longer than go-plugin keeps an unclaimed broker offer (5 s) before the
// first review that calls a tool. The reviewer must still reach the
// host's tools: a gated (or a relaunched plugin) that saw no proposal in
// its first seconds must not fail every later review.
func TestFaultToolsAfterIdle(t *testing.T) {
	ns := startNATS(t, 1)
	launchGated(t, "gated-a", ns.url(), 1)
	time.Sleep(7 * time.Second)
	l := newLoad(t, ns.url(), "idle")
	l.start(20, 20*time.Millisecond)
	l.published(t)
	tl, _ := l.account(t, time.Minute)
	assertClean(t, tl)
	if len(tl.Unexpected) > 0 {
		t.Errorf("reviews after an idle start did not decide as expected: %s", countsString(tl.Unexpected))
	}
}
