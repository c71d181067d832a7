package test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine/wire"
)

// TestClusterThreeGated scales gated out the way the design says: three
// gated processes share the durable consumer on a three-node NATS
// cluster with R3 streams and bucket. Every proposal is decided once,
// and every process takes a share of the work.
func TestClusterThreeGated(t *testing.T) {
	cluster := startNATS(t, 3)
	var procs []*gatedProc
	for _, name := range []string{"gated-a", "gated-b", "gated-c"} {
		procs = append(procs, launchGated(t, name, cluster.url(), 3))
	}
	assertReplicated(t, cluster, 3)

	l := newLoad(t, cluster.url(), "scale")
	l.start(300, 15*time.Millisecond)
	l.published(t)
	tl, _ := l.account(t, 90*time.Second)
	assertClean(t, tl)
	if n := len(tl.Unexpected); n > 0 {
		t.Errorf("verdicts other than expected with nothing broken: %s", countsString(tl.Unexpected))
	}
	total := 0.0
	for _, g := range procs {
		n := g.verdictsCounted(t)
		t.Logf("%s decided %.0f proposals", g.name, n)
		if n == 0 {
			t.Errorf("%s decided nothing: the consumer is not shared", g.name)
		}
		total += n
	}
	if int(total) < tl.Decided {
		t.Errorf("the processes count %.0f verdicts, fewer than the %d decided", total, tl.Decided)
	}
}

// assertReplicated checks that gated created its streams and bucket with
// the given number of replicas, each placed on its own node.
func assertReplicated(t *testing.T, cluster *natsCluster, replicas int) {
	t.Helper()
	js := connectJS(t, cluster.url())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, name := range []string{bus.ProposalsStream, audit.Stream, "KV_" + wire.VerdictBucket} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if info.Config.Replicas != replicas {
			t.Errorf("stream %s has %d replicas, want %d", name, info.Config.Replicas, replicas)
		}
		if info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != replicas-1 {
			t.Errorf("stream %s is not placed on %d nodes: %+v", name, replicas, info.Cluster)
		}
	}
}

// connectJS connects to natsURL for JetStream look-ups; the connection
// closes when the test ends.
func connectJS(t *testing.T, natsURL string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// waitReplicasCurrent waits until every replica of gated's streams and
// bucket is online and caught up with its leader.
func waitReplicasCurrent(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, name := range []string{bus.ProposalsStream, audit.Stream, "KV_" + wire.VerdictBucket} {
		for {
			ok, state := replicasCurrent(t, js, name)
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("stream %s replicas not current after 60s: %s", name, state)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}

func replicasCurrent(t *testing.T, js jetstream.JetStream, name string) (bool, string) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return false, err.Error()
	}
	info, err := s.Info(ctx)
	if err != nil {
		return false, err.Error()
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return false, "no leader"
	}
	state := "leader " + info.Cluster.Leader
	ok := len(info.Cluster.Replicas) > 0
	for _, r := range info.Cluster.Replicas {
		state += ", " + r.Name
		if r.Offline || !r.Current {
			ok = false
			state += " (behind)"
		}
	}
	return ok, state
}
