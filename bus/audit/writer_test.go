package audit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine/wire"
)

// writeTrails runs trails concurrent trails on a, each recording events
// events and sealing a verdict, round-robin over tenants. It returns the
// sequence each Seal returned, by proposal id.
func writeTrails(t *testing.T, a *audit.Writer, prefix string, trails, events int, tenants ...string) map[string]uint64 {
	t.Helper()
	var (
		mu   sync.Mutex
		seqs = make(map[string]uint64, trails)
		wg   sync.WaitGroup
		errs = make(chan error, trails)
	)
	for i := range trails {
		wg.Go(func() {
			tenant, id := tenants[i%len(tenants)], fmt.Sprintf("%s%d", prefix, i)
			tr := a.Trail()
			for range events {
				ev := gated.AuditEvent{V: 1, Event: gated.EventReceived, Tenant: tenant, ProposalID: id, Data: []byte(`{"action":"db_backup"}`)}
				if err := tr.Record(t.Context(), ev); err != nil {
					errs <- err
					return
				}
				// A record each, so that the writers chain many.
				if err := tr.Flush(t.Context()); err != nil {
					errs <- err
					return
				}
			}
			final := verdictEvent(tenant, id)
			final.Instance = "" // the auditor names itself
			seq, err := tr.Seal(t.Context(), final)
			if err != nil {
				errs <- fmt.Errorf("sealing %s: %w", id, err)
				return
			}
			mu.Lock()
			seqs[id] = seq
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err) // not Fatal: callers run this on other goroutines
	}
	return seqs
}

// verify runs Verify and fails the test on an error.
func verify(t *testing.T, js jetstream.JetStream, opts audit.VerifyOptions) *audit.Report {
	t.Helper()
	rep, err := audit.Verify(t.Context(), js, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func heads(rep *audit.Report) map[string]uint64 {
	out := map[string]uint64{}
	for _, h := range rep.Heads {
		out[h.Tenant] = h.N
	}
	return out
}

func setupAudit(t *testing.T) (*bus.Resources, jetstream.JetStream) {
	t.Helper()
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return res, js
}

func TestWriterChainsConcurrentTrails(t *testing.T) {
	res, js := setupAudit(t)
	a := bustest.AuditWriter(t, js, audit.Config{Key: testKey, Instance: "gated-a", Publish: audit.PublishBatches})
	if !a.Batching() {
		t.Fatal("the audit stream allows atomic batches, yet the auditor publishes one at a time")
	}
	const trails, events = 120, 4
	seqs := writeTrails(t, a, "p", trails, events, "acme", "beta", "gamma")

	// Seal returns the sequence of the trail's final event.
	seen := map[uint64]bool{}
	for id, seq := range seqs {
		if seen[seq] {
			t.Fatalf("two trails sealed at seq %d", seq)
		}
		seen[seq] = true
		msg, err := res.Audit.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := audit.DecodeRecord(msg.Subject, msg.Header, msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		if last := rec.Last(); last.Event != gated.EventVerdict || last.ProposalID != id || last.Instance != "gated-a" {
			t.Fatalf("Seal of %s returned seq %d, which holds %s of %s by %q", id, seq, last.Event, last.ProposalID, last.Instance)
		}
	}
	rep := verify(t, js, audit.VerifyOptions{Keys: [][]byte{testKey}})
	if !rep.Clean() || !rep.MACsChecked {
		t.Fatalf("problems in an untouched stream: %+v", rep.Problems)
	}
	want := map[string]uint64{"acme": 40 * (events + 1), "beta": 40 * (events + 1), "gamma": 40 * (events + 1)}
	if got := heads(rep); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("chain heads %v, want %v", got, want)
	}
	if rep.Records != trails*(events+1) {
		t.Fatalf("verified %d records, want %d", rep.Records, trails*(events+1))
	}
	st := a.Stats()
	t.Logf("%d records in %d publishes", st.Records, st.Publishes)
	if st.Records != trails*(events+1) {
		t.Errorf("stats count %d records", st.Records)
	}
}

func TestWritersOfTwoInstancesKeepOneChain(t *testing.T) {
	s := bustest.Server(t)
	_, js1 := bustest.Connect(t, s)
	_, js2 := bustest.Connect(t, s)
	if _, err := bus.Setup(t.Context(), js1, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	a1 := bustest.AuditWriter(t, js1, audit.Config{Key: testKey, Instance: "one", Publish: audit.PublishBatches})
	a2 := bustest.AuditWriter(t, js2, audit.Config{Key: testKey, Instance: "two", Writers: 2, Publish: audit.PublishBatches})
	// Rounds of a few trails each make many small batches, so the two
	// instances keep extending the shared chain under each other.
	if !shareChain(t, js1, a1, a2, 15, 4, 3) {
		return
	}
	// Both instances wrote to the shared tenant's one chain.
	instances := map[string]bool{}
	err := audit.Read(t.Context(), js1, audit.Query{Tenant: "shared"}, func(e audit.Entry) error {
		instances[e.Record.Last().Instance] = true
		return nil
	})
	if err != nil || !instances["one"] || !instances["two"] {
		t.Fatalf("instances on the shared chain: %v (err %v)", instances, err)
	}
	t.Logf("instance one: %+v; instance two: %+v", a1.Stats(), a2.Stats())
}

func TestWriterPublishesOneAtATime(t *testing.T) {
	tests := []struct {
		note   string
		stream func(t *testing.T, js jetstream.JetStream)
		cfg    audit.Config
	}{
		{
			note: "stream without atomic publish",
			stream: func(t *testing.T, js jetstream.JetStream) {
				_, err := js.CreateStream(t.Context(), jetstream.StreamConfig{
					Name: audit.Stream, Subjects: []string{wire.AuditSubjectPrefix + ">"},
					Storage: jetstream.FileStorage, DenyDelete: true, DenyPurge: true,
				})
				if err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			note: "asked to",
			stream: func(t *testing.T, js jetstream.JetStream) {
				if _, err := bus.Setup(t.Context(), js, bus.Config{}); err != nil {
					t.Fatal(err)
				}
			},
			cfg: audit.Config{Publish: audit.PublishOneAtATime},
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			s := bustest.Server(t)
			_, js := bustest.Connect(t, s)
			tc.stream(t, js)
			tc.cfg.Key = testKey
			a := bustest.AuditWriter(t, js, tc.cfg)
			if a.Batching() {
				t.Fatal("the auditor batches")
			}
			// A second instance makes the one-at-a-time path meet conflicts too.
			_, js2 := bustest.Connect(t, s)
			b := bustest.AuditWriter(t, js2, tc.cfg)
			var wg sync.WaitGroup
			wg.Go(func() { writeTrails(t, a, "a", 30, 2, "acme", "beta") })
			wg.Go(func() { writeTrails(t, b, "b", 30, 2, "acme") })
			wg.Wait()
			rep := verify(t, js, audit.VerifyOptions{Keys: [][]byte{testKey}})
			if !rep.Clean() {
				t.Fatalf("problems: %+v", rep.Problems)
			}
			if got := heads(rep); got["acme"] != 15*3+30*3 || got["beta"] != 15*3 {
				t.Fatalf("chain heads %v", got)
			}
			if st := a.Stats(); st.Publishes != st.Records {
				t.Errorf("one at a time, yet %d publishes stored %d records", st.Publishes, st.Records)
			}
		})
	}
}

func TestWriterPublishAutoFollowsTheStream(t *testing.T) {
	tests := []struct {
		note    string
		storage jetstream.StorageType
		batches bool
	}{
		// An R1 file stream syncs every atomic batch to disk on its own:
		// records are pipelined instead.
		{note: "R1 file stream", storage: jetstream.FileStorage},
		{note: "memory stream", storage: jetstream.MemoryStorage, batches: true},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			s := bustest.Server(t)
			_, js := bustest.Connect(t, s)
			_, err := js.CreateStream(t.Context(), jetstream.StreamConfig{
				Name: audit.Stream, Subjects: []string{wire.AuditSubjectPrefix + ">"},
				Storage: tc.storage, AllowAtomicPublish: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			a := bustest.AuditWriter(t, js, audit.Config{})
			if a.Batching() != tc.batches || a.Pipelined() == tc.batches {
				t.Fatalf("batching %v, pipelined %v; want batching %v, else pipelined", a.Batching(), a.Pipelined(), tc.batches)
			}
			writeTrails(t, a, "p", 20, 3, "acme", "beta")
			if rep := verify(t, js, audit.VerifyOptions{}); !rep.Clean() || rep.Records != 80 {
				t.Fatalf("%d records, problems %+v", rep.Records, rep.Problems)
			}
		})
	}
}

func TestWriterUnkeyed(t *testing.T) {
	_, js := setupAudit(t)
	a := bustest.AuditWriter(t, js, audit.Config{})
	if a.KeyID() != "" {
		t.Fatalf("key id %q without a key", a.KeyID())
	}
	writeTrails(t, a, "p", 4, 1, "acme")
	var macs int
	err := audit.Read(t.Context(), js, audit.Query{}, func(e audit.Entry) error {
		if e.Err != nil {
			return e.Err
		}
		if e.Record.MAC != "" || e.Header.Get(wire.AuditKeyHeader) != "" {
			macs++
		}
		return nil
	})
	if err != nil || macs != 0 {
		t.Fatalf("%d unkeyed records carry a MAC (err %v)", macs, err)
	}
	if rep := verify(t, js, audit.VerifyOptions{}); !rep.Clean() || rep.MACsChecked || rep.Records != 8 {
		t.Fatalf("unkeyed records without a key: %+v", rep)
	}
	// Given a key, records without a MAC are forgeries.
	rep := verify(t, js, audit.VerifyOptions{Keys: [][]byte{testKey}})
	if len(rep.Problems) != 8 {
		t.Fatalf("%d problems, want every one of the 8 records without a MAC: %+v", len(rep.Problems), rep.Problems)
	}
	for _, p := range rep.Problems {
		if p.Kind != audit.ProblemForged {
			t.Fatalf("problem %+v, want forged", p)
		}
	}
}

func TestWriterKeyRotation(t *testing.T) {
	_, js := setupAudit(t)
	other := []byte("fedcba9876543210fedcba9876543210")
	old := bustest.AuditWriter(t, js, audit.Config{Key: testKey})
	writeTrails(t, old, "old", 2, 1, "acme")
	if err := old.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	writeTrails(t, bustest.AuditWriter(t, js, audit.Config{Key: other}), "new", 2, 1, "acme")
	if rep := verify(t, js, audit.VerifyOptions{Keys: [][]byte{testKey, other}}); !rep.Clean() || heads(rep)["acme"] != 8 {
		t.Fatalf("both keys given: %+v", rep)
	}
	rep := verify(t, js, audit.VerifyOptions{Keys: [][]byte{other}})
	if len(rep.Problems) != 4 || rep.Problems[0].Kind != audit.ProblemForged || rep.Problems[0].Seq != 1 {
		t.Fatalf("only the new key given: %+v, want the 4 old records forged", rep.Problems)
	}
}

func TestAuditTrailLifecycle(t *testing.T) {
	_, js := setupAudit(t)
	a := bustest.AuditWriter(t, js, audit.Config{})
	tr := a.Trail()
	ev := verdictEvent("acme", "p1")
	if _, err := tr.Seal(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
	if err := tr.Record(t.Context(), ev); !errors.Is(err, audit.ErrTrailSealed) {
		t.Errorf("Record after Seal: %v, want ErrTrailSealed", err)
	}
	if _, err := tr.Seal(t.Context(), ev); !errors.Is(err, audit.ErrTrailSealed) {
		t.Errorf("second Seal: %v, want ErrTrailSealed", err)
	}
	bad := a.Trail()
	if err := bad.Record(t.Context(), gated.AuditEvent{V: 1, Event: "x", Tenant: "NOT A TENANT"}); err == nil {
		t.Error("an event with an invalid tenant was accepted")
	}
	if _, err := bad.Seal(t.Context(), ev); err == nil {
		t.Error("a trail that lost an event sealed")
	}
	for _, data := range []string{`{"action":`, `{"a":1} {}`, `nul`, "{\"a\":\"\x01\"}"} {
		tr := a.Trail()
		err := tr.Record(t.Context(), gated.AuditEvent{V: 1, Event: gated.EventReceived, Tenant: "acme", ProposalID: "p2", Data: []byte(data)})
		if err == nil || !strings.Contains(err.Error(), "data is not JSON") {
			t.Errorf("an event with data %q: %v, want data is not JSON", data, err)
		}
	}
	if err := a.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Trail().Seal(t.Context(), ev); !errors.Is(err, audit.ErrClosed) {
		t.Errorf("Seal after Close: %v, want ErrClosed", err)
	}
}

func TestNewWriterNeedsTheStream(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	if _, err := audit.NewWriter(t.Context(), js, audit.Config{}); !errors.Is(err, audit.ErrNoStream) {
		t.Fatalf("err = %v, want ErrNoStream", err)
	}
	if _, err := bus.Setup(t.Context(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.NewWriter(context.Background(), js, audit.Config{Key: []byte("short")}); !errors.Is(err, audit.ErrInvalidConfig) {
		t.Fatalf("a short key: err = %v, want ErrInvalidConfig", err)
	}
}

// TestWriterCloseHonoursItsDeadline stops the server under a writer, so
// that its publish hangs, fills its queue and blocks a Record on it: a
// Close with a short deadline must still return, with the deadline's
// error, and release the blocked Record.
func TestWriterCloseHonoursItsDeadline(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	if _, err := bus.Setup(t.Context(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	a, err := audit.NewWriter(t.Context(), js, audit.Config{
		// One writer that takes one event at a time (MaxBatch 1: it does
		// not gather more), with a queue of one.
		Writers: 1, QueueLen: 1, MaxBatch: 1, Publish: audit.PublishOneAtATime, PublishTimeout: time.Hour,
		Log: zaptest.NewLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after a failure: do not leave the writer behind
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		_ = a.Close(ctx)
	})
	s.Shutdown()
	s.WaitForShutdown()

	// waitFor fails the test unless c yields within a generous deadline.
	waitFor := func(what string, c <-chan error) error {
		t.Helper()
		select {
		case err := <-c:
			return err
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not return", what)
			return nil
		}
	}
	tr := a.Trail()
	if err := tr.Record(t.Context(), verdictEvent("acme", "p1")); err != nil {
		t.Fatal(err)
	}
	if err := tr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); audit.Queued(a) != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the writer did not take the first event")
		}
	}
	// The writer is stuck publishing the first event: the second fills
	// its queue and the third blocks.
	if err := tr.Record(t.Context(), verdictEvent("acme", "p2")); err != nil {
		t.Fatal(err)
	}
	if err := tr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() {
		if err := tr.Record(t.Context(), verdictEvent("acme", "p3")); err != nil {
			blocked <- err
			return
		}
		blocked <- tr.Flush(t.Context())
	}()
	for deadline := time.Now().Add(30 * time.Second); !audit.Enqueueing(a); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the third Record did not reach the full queue")
		}
	}

	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		closed <- a.Close(ctx)
	}()
	if err := waitFor("Close", closed); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want its deadline's error", err)
	}
	if err := waitFor("the blocked Flush", blocked); err == nil {
		t.Error("a Flush blocked on a full queue succeeded, though the auditor closed and nothing was stored")
	}
	if _, err := tr.Seal(t.Context(), verdictEvent("acme", "p4")); err == nil {
		t.Error("a trail whose events were lost sealed")
	}
	if err := a.Trail().Record(t.Context(), verdictEvent("acme", "p5")); !errors.Is(err, audit.ErrClosed) {
		t.Errorf("Record after Close: %v, want ErrClosed", err)
	}
}

// shareChain has instances "one" (a1, tenants acme and shared) and "two"
// (a2, tenants shared and beta) write rounds of trails at once, then
// checks that every chain verifies with every record in it. It returns
// false when the writing failed and the test is already failed.
func shareChain(t *testing.T, js jetstream.JetStream, a1, a2 *audit.Writer, rounds, trails, events int) bool {
	t.Helper()
	var wg sync.WaitGroup
	for _, inst := range []struct {
		a       *audit.Writer
		name    string
		tenants []string
	}{{a1, "one", []string{"acme", "shared"}}, {a2, "two", []string{"shared", "beta"}}} {
		wg.Go(func() {
			for r := range rounds {
				writeTrails(t, inst.a, fmt.Sprintf("%s-%d-", inst.name, r), trails, events, inst.tenants...)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return false
	}
	rep := verify(t, js, audit.VerifyOptions{Keys: [][]byte{testKey}})
	if !rep.Clean() {
		t.Fatalf("two instances broke the chain: %+v", rep.Problems)
	}
	per := uint64(rounds * trails / 2 * (events + 1))
	want := map[string]uint64{"acme": per, "beta": per, "shared": 2 * per}
	if got := heads(rep); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("chain heads %v, want %v", got, want)
	}
	return true
}
