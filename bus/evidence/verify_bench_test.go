//go:build unix

package evidence_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/gated/gated/bus/evidence"
)

// millionBundle writes a bundle of n records of about 1,300 bytes each
// (a compressed audit record's size), checkpointed at n/2 and n.
func millionBundle(tb testing.TB, n int) string {
	tb.Helper()
	file, _ := evidence.NewKeyFile("gated.bench")
	keys, err := evidence.ParseKeys(file)
	if err != nil {
		tb.Fatal(err)
	}
	tree := new(evidence.Tree)
	body := bytes.Repeat([]byte("x"), 1300)
	bodyAt := func(i int) []byte {
		copy(body, fmt.Sprintf("record %09d", i))
		return body
	}
	for i := range n {
		tree.Append(uint64(i+1), bodyAt(i))
	}
	h := evidence.Header{Format: evidence.Format, Tenant: "acme", Keys: keys.Public, Range: true, Records: int64(n)}
	for _, size := range []int64{int64(n / 2), int64(n)} {
		root, _ := tree.Root(size)
		msg, err := evidence.Sign(evidence.Checkpoint{Origin: evidence.OriginOf("gated.bench", "acme"), Size: size, Root: root, Time: time.Now().UTC().Truncate(time.Second)}, keys.Signer)
		if err != nil {
			tb.Fatal(err)
		}
		h.Checkpoints = append(h.Checkpoints, string(msg))
	}
	p, _ := tree.ProveTree(int64(n/2), int64(n))
	h.Consistency = []evidence.TreeProof{{From: int64(n / 2), To: int64(n), Proof: p}}
	f, err := os.Create(tb.TempDir() + "/bundle.jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	enc := json.NewEncoder(f)
	if err := enc.Encode(h); err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		if err := enc.Encode(evidence.RecordLine{Index: int64(i), Seq: uint64(i + 1), Body: bodyAt(i)}); err != nil {
			tb.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return f.Name()
}

// BenchmarkVerifyMillion checks a bundle of a million records; it
// reports records/s.
func BenchmarkVerifyMillion(b *testing.B) {
	const n = 1_000_000
	path := millionBundle(b, n)
	open := func() (io.ReadCloser, error) { return os.Open(path) }
	b.ResetTimer()
	cpu := cpuTime()
	for b.Loop() {
		res, err := evidence.Verify(open, evidence.VerifyOptions{})
		if err != nil || res.Records != n {
			b.Fatal(res.Records, err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	// On a machine shared with other work the wall clock says little:
	// the CPU time says what the check costs.
	b.ReportMetric(float64(n)*float64(b.N)/(cpuTime()-cpu).Seconds(), "records/cpu-s")
}

// BenchmarkTreeAppend is the tree's cost per audit record: the leaf hash
// of a 1,300-byte body and the hashes stored for it.
func BenchmarkTreeAppend(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1300)
	tree := new(evidence.Tree)
	for i := range b.N {
		tree.Append(uint64(i), body)
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
