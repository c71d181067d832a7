package audit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/store"
)

// BenchmarkVerifyVerdicts measures the cross-check of the verdict store
// against the audit stream at 10 000 and 100 000 stored verdicts (three
// records each: received, policy.decided, verdict.decided, as a proposal
// decided by policy leaves). One op is one whole Verify. It compares:
//
//   - chain: Verify without the cross-check (SkipVerdicts), the baseline;
//   - index: Verify as it runs, which indexes the verdict.decided records
//     while it reads the stream and then reads the bucket once;
//   - get-each: the chain, then the bucket read with one GetMsg a verdict,
//     the way that keeps no index.
//
// The records are MACed and Verify is given the key, as gated audit verify
// runs with --audit-key-file. Reported besides time and allocations:
// verdicts/s of the cross-check
// alone (the time over the chain's), records/s of the whole Verify, and
// the process's CPU time per record, the figure that holds on a shared
// machine (it counts the in-process NATS server's work for the read).
//
//	go test ./bus/audit -run '^$' -bench '^BenchmarkVerifyVerdicts$' -benchtime 2x
func BenchmarkVerifyVerdicts(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		s := bustest.Server(b)
		_, js := bustest.Connect(b, s)
		res, err := bus.Setup(b.Context(), js, bus.Config{})
		if err != nil {
			b.Fatal(err)
		}
		fillVerdicts(b, js, res, n)
		var chain time.Duration
		for _, mode := range []string{"chain", "index", "get-each"} {
			b.Run(fmt.Sprintf("%dk/%s", n/1000, mode), func(b *testing.B) {
				b.ReportAllocs()
				start, cpu := time.Now(), bustest.ProcessCPU(b)
				var records uint64
				for b.Loop() {
					opts := audit.VerifyOptions{Keys: [][]byte{testKey}, SkipVerdicts: mode != "index"}
					rep, err := audit.Verify(b.Context(), js, opts)
					if err != nil {
						b.Fatal(err)
					}
					records += rep.Records
					if !rep.Clean() {
						b.Fatalf("problems: %+v", rep.Problems[:min(len(rep.Problems), 5)])
					}
					if mode == "get-each" {
						if got := getEach(b, res); got != n {
							b.Fatalf("%d verdicts name their record, want %d", got, n)
						}
					} else if mode == "index" && rep.Verdicts.Matched != uint64(n) {
						b.Fatalf("verdict check %+v, want %d matched", *rep.Verdicts, n)
					}
				}
				elapsed := time.Since(start)
				cpu = bustest.ProcessCPU(b) - cpu
				b.ReportMetric(float64(records)/elapsed.Seconds(), "records/s")
				b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(records), "cpu-µs/record")
				per := elapsed / time.Duration(b.N)
				if mode == "chain" {
					chain = per
				} else if extra := per - chain; extra > 0 {
					b.ReportMetric(float64(n)/extra.Seconds(), "verdicts/s")
				}
			})
		}
	}
}

// fillVerdicts has gated's Writer and VerdictStore write n proposals'
// records and verdicts, as the engine writes them.
func fillVerdicts(b testing.TB, js jetstream.JetStream, res *bus.Resources, n int) {
	b.Helper()
	a, err := audit.NewWriter(b.Context(), js, audit.Config{Log: zap.NewNop(), Key: testKey})
	if err != nil {
		b.Fatal(err)
	}
	store := store.New(res.Verdicts)
	const workers = 32
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		fail error
	)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if err := fillOne(b.Context(), a, store, fmt.Sprint("p", i)); err != nil {
					mu.Lock()
					fail = err
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if err := a.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	if fail != nil {
		b.Fatal(fail)
	}
}

func fillOne(ctx context.Context, a *audit.Writer, vs *store.Verdicts, id string) error {
	tenant := "acme"
	tr := a.Trail()
	for _, ev := range []string{gated.EventReceived, gated.EventPolicyDecided} {
		if err := tr.Record(ctx, gated.AuditEvent{V: 1, Event: ev, Tenant: tenant, ProposalID: id, At: time.Now().UTC(),
			Data: []byte(`{"action":"host_list_services","operator":"alice","delivery":1}`)}); err != nil {
			return err
		}
	}
	v := &gated.Verdict{V: 1, ProposalID: id, Tenant: tenant, Action: "host_list_services", Kind: gated.KindAction,
		Outcome: gated.OutcomeApproved, Approved: true, Stage: gated.StagePolicy,
		Reason: "read actions change nothing and need no review", DecidedAt: time.Now().UTC(), LatencyMS: 0.4,
		Policy:         &gated.PolicyRef{Denies: []gated.Deny{}, Revision: "r1", EvalUS: 40},
		ProposalSHA256: "2f1ec7eb92a0646c2f1ec7eb92a0646c2f1ec7eb92a0646c2f1ec7eb92a0646c"}
	doc, err := json.Marshal(v)
	if err != nil {
		return err
	}
	seq, err := tr.Seal(ctx, gated.AuditEvent{V: 1, Event: gated.EventVerdict, Tenant: tenant, ProposalID: id, At: time.Now().UTC(), Data: doc})
	if err != nil {
		return err
	}
	v.AuditSeq = seq
	_, err = vs.Create(ctx, v)
	return err
}

// getEach reads every stored verdict and gets its audit_seq's message,
// one request each, and counts the verdicts whose message is their
// verdict.decided record (by tenant, id and event: enough to time it).
func getEach(b *testing.B, res *bus.Resources) int {
	b.Helper()
	w, err := res.Verdicts.Watch(b.Context(), "*.*", jetstream.IgnoreDeletes())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	matched := 0
	for e := range w.Updates() {
		if e == nil {
			break
		}
		var v gated.Verdict
		if err := json.Unmarshal(e.Value(), &v); err != nil {
			b.Fatal(err)
		}
		m, err := res.Audit.GetMsg(b.Context(), v.AuditSeq)
		if err != nil {
			b.Fatal(err)
		}
		r, err := audit.DecodeRecord(m.Subject, m.Header, m.Data)
		if err != nil {
			continue
		}
		if _, ok := r.Find(gated.EventVerdict); ok && r.Tenant == v.Tenant && r.ProposalID == v.ProposalID {
			matched++
		}
	}
	return matched
}
