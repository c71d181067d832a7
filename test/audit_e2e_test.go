package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
)

// auditCLI runs `gated audit ARGS --nats-url URL` and returns its exit
// code, stdout and stderr.
func auditCLI(t *testing.T, natsURL string, args ...string) (int, string, string) {
	t.Helper()
	return run(t, exec.Command(gatedBin, append(append([]string{"audit"}, args...), "--nats-url", natsURL)...))
}

// TestAuditTrailOfServe runs the real binary: gated serve keys its audit
// records with the key it creates in its data directory, keeps one chain
// per tenant across a restart, and the audit commands read and verify
// what it wrote.
func TestAuditTrailOfServe(t *testing.T) {
	dataDir := t.TempDir()
	g := startGated(t, "--data-dir", dataDir)
	var rejected gated.Verdict
	for _, f := range []string{"approved.json", "rejected-force-approve.json"} {
		code, out, stderr := propose(t, g.natsURL, "-f", "../examples/proposals/"+f)
		if code != 0 && code != 3 {
			t.Fatalf("propose %s: exit %d: %s", f, code, stderr)
		}
		if code == 3 {
			if err := json.Unmarshal(out, &rejected); err != nil {
				t.Fatal(err)
			}
		}
	}
	keyFile := filepath.Join(dataDir, "audit.key")
	st, err := os.Stat(keyFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("audit key in the data directory: %v, %v", st, err)
	}

	code, out, stderr := auditCLI(t, g.natsURL, "verify", "--audit-key-file", keyFile)
	if code != 0 || !strings.Contains(out, "no problem found") || !strings.Contains(out, "MACs checked") ||
		!strings.Contains(out, "2 stored verdicts checked against the stream: 2 name their verdict.decided record") {
		t.Fatalf("verify: exit %d\n%s%s", code, out, stderr)
	}

	// query finds the rejection, at the sequence the verdict names.
	code, out, stderr = auditCLI(t, g.natsURL, "query", "--outcome", "rejected", "--json")
	if code != 0 {
		t.Fatalf("query: exit %d: %s", code, stderr)
	}
	var found bool
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var line struct {
			Seq    uint64           `json:"seq"`
			Record gated.AuditEvent `json:"record"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("query line %q: %v", l, err)
		}
		if line.Record.ProposalID == rejected.ProposalID {
			found = line.Seq == rejected.AuditSeq && line.Record.Event == gated.EventVerdict
		}
	}
	if !found {
		t.Fatalf("query --outcome rejected does not show %s at audit_seq %d:\n%s", rejected.ProposalID, rejected.AuditSeq, out)
	}
	code, out, _ = auditCLI(t, g.natsURL, "tail", "--tenant", "acme", "--last", "1")
	if code != 0 || !strings.Contains(out, "verdict.decided "+rejected.ProposalID) {
		t.Fatalf("tail --last 1: exit %d\n%s", code, out)
	}

	// A restart reuses the key and extends the same chains.
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	g.exited <- <-g.exited // leave the exit for the cleanup to collect
	if strings.Count(g.logs.String(), "created the audit key") != 1 {
		t.Fatalf("the first start did not say it created the key:\n%s", g.logs.String())
	}
	g = startGated(t, "--data-dir", dataDir)
	if code, _, stderr := propose(t, g.natsURL, "-f", "../examples/proposals/read-pass-through.json"); code != 0 {
		t.Fatalf("propose after restart: exit %d: %s", code, stderr)
	}
	if strings.Contains(g.logs.String(), "created the audit key") {
		t.Fatal("the restart created a new audit key")
	}
	code, out, stderr = auditCLI(t, g.natsURL, "verify", "--audit-key-file", keyFile)
	if code != 0 || !strings.Contains(out, "no problem found") ||
		!strings.Contains(out, "3 stored verdicts checked against the stream: 3 name their verdict.decided record") {
		t.Fatalf("verify after restart: exit %d\n%s%s", code, out, stderr)
	}

	// The stream deleted and created again, as an admin of the server
	// can: the chain is empty and whole, the stored verdicts are not.
	nc, err := nats.Connect(g.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(t.Context(), audit.Stream); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Setup(t.Context(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = auditCLI(t, g.natsURL, "verify", "--audit-key-file", keyFile)
	if code != 3 || !strings.Contains(out, fmt.Sprintf("PROBLEM seq %d tenant acme proposal %s removed:", rejected.AuditSeq, rejected.ProposalID)) ||
		!strings.Contains(out, "3 problem(s) found") {
		t.Fatalf("verify of a replaced stream: exit %d, want 3\n%s%s", code, out, stderr)
	}
	if code, out, stderr := auditCLI(t, g.natsURL, "verify", "--skip-verdicts"); code != 0 {
		t.Fatalf("verify --skip-verdicts of a replaced stream: exit %d (the chain alone cannot tell)\n%s%s", code, out, stderr)
	}
}

// TestAuditChainOnACluster runs two audit writers, connected to different
// nodes of a three-node cluster, on one tenant of an R3 audit stream: the
// replicated stream gets atomic batches, the expected-sequence checks hold
// across the cluster, and the chain verifies. Both publishing ways run, and
// their rates are logged for comparison (not asserted).
func TestAuditChainOnACluster(t *testing.T) {
	cluster := startNATS(t, 3)
	for _, mode := range []struct {
		note    string
		publish audit.PublishMode
		batches bool
	}{{"auto", audit.PublishAuto, true}, {"one at a time", audit.PublishOneAtATime, false}} {
		t.Run(mode.note, func(t *testing.T) {
			var auditors []*audit.Writer
			var js0 jetstream.JetStream
			for i := range 2 {
				nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", cluster.nodes[i].clientPort))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(nc.Close)
				js, err := jetstream.New(nc)
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					js0 = js
					ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
					_, err := bus.Setup(ctx, js, bus.Config{Replicas: 3})
					cancel()
					if err != nil {
						t.Fatal(err)
					}
				}
				a, err := audit.NewWriter(t.Context(), js, audit.Config{Publish: mode.publish, Instance: fmt.Sprint("gated-", i)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = a.Close(context.Background()) })
				if a.Batching() != mode.batches {
					t.Fatalf("batching %v on an R3 stream, want %v", a.Batching(), mode.batches)
				}
				auditors = append(auditors, a)
			}
			for _, a := range auditors { // warm up: stream leader, heads
				if _, err := a.Trail().Seal(t.Context(), gated.AuditEvent{V: 1, Event: gated.EventVerdict, Tenant: "shared"}); err != nil {
					t.Fatal(err)
				}
			}
			before, err := audit.Verify(t.Context(), js0, audit.VerifyOptions{Tenant: "shared"})
			if err != nil {
				t.Fatal(err)
			}
			var start uint64
			for _, h := range before.Heads {
				start = h.N
			}
			const trails, events = 200, 4
			var wg sync.WaitGroup
			errs := make(chan error, 2*trails)
			began := time.Now()
			for _, a := range auditors {
				for i := range trails {
					wg.Go(func() {
						tr := a.Trail()
						ev := gated.AuditEvent{V: 1, Event: gated.EventReceived, Tenant: "shared", ProposalID: fmt.Sprint("p", i)}
						for range events - 1 {
							if err := tr.Record(t.Context(), ev); err != nil {
								errs <- err
								return
							}
							// A record each: the writers race for one chain.
							if err := tr.Flush(t.Context()); err != nil {
								errs <- err
								return
							}
						}
						ev.Event = gated.EventVerdict
						if _, err := tr.Seal(t.Context(), ev); err != nil {
							errs <- err
						}
					})
				}
			}
			wg.Wait()
			took := time.Since(began)
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			rep, err := audit.Verify(t.Context(), js0, audit.VerifyOptions{Tenant: "shared"})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Clean() || len(rep.Heads) != 1 || rep.Heads[0].N != start+2*trails*events {
				t.Fatalf("after %d records from two nodes: heads %+v, problems %+v", 2*trails*events, rep.Heads, rep.Problems)
			}
			s0, s1 := auditors[0].Stats(), auditors[1].Stats()
			t.Logf("%s on R3: %d events in %s (%.0f/s); conflicts %d+%d, publishes %d+%d",
				mode.note, 2*trails*events, took.Round(time.Millisecond), float64(2*trails*events)/took.Seconds(),
				s0.Conflicts, s1.Conflicts, s0.Publishes, s1.Publishes)
		})
	}
}
