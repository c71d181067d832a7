package evidence_test

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/gated/gated/bus/evidence"
)

// mth is RFC 6962's Merkle tree hash, written from the RFC's definition.
func mth(leaves [][]byte) tlog.Hash {
	switch n := len(leaves); n {
	case 0:
		return sha256.Sum256(nil)
	case 1:
		return sha256.Sum256(append([]byte{0}, leaves[0]...))
	default:
		k := 1
		for k*2 < n {
			k *= 2
		}
		l, r := mth(leaves[:k]), mth(leaves[k:])
		return sha256.Sum256(append(append([]byte{1}, l[:]...), r[:]...))
	}
}

func TestTreeIsRFC6962(t *testing.T) {
	var leaves [][]byte
	tree := new(evidence.Tree)
	for n := range 70 {
		root, err := tree.Root(int64(n))
		if err != nil {
			t.Fatal(err)
		}
		if root != mth(leaves) {
			t.Fatalf("size %d: root %v, RFC 6962 says %v", n, root, mth(leaves))
		}
		// From the frontier of every smaller tree, the leaves after it
		// give the same root.
		for start := 0; start <= n; start++ {
			prefix, err := tree.Prefix(int64(start))
			if err != nil {
				t.Fatal(err)
			}
			f, err := evidence.NewFrontier(int64(start), prefix)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range leaves[start:] {
				f.Append(tlog.RecordHash(l))
			}
			if f.Root() != root {
				t.Fatalf("size %d from %d: frontier root %v, want %v", n, start, f.Root(), root)
			}
		}
		body := fmt.Appendf(nil, "record %d", n)
		leaves = append(leaves, body)
		tree.Append(uint64(100+2*n), body)
	}
	if tree.Index(100+2*7) != 7 || tree.Index(101) != -1 {
		t.Errorf("Index: %d, %d", tree.Index(114), tree.Index(101))
	}
	if _, err := evidence.NewFrontier(6, make([]tlog.Hash, 1)); err == nil {
		t.Error("a frontier of size 6 with one hash was taken")
	}
}

func TestCheckNextRefusesAnInconsistentHead(t *testing.T) {
	a, b := new(evidence.Tree), new(evidence.Tree)
	for i := range 9 {
		a.Append(uint64(i+1), fmt.Appendf(nil, "r%d", i))
		body := fmt.Appendf(nil, "r%d", i)
		if i == 4 {
			body = []byte("r4 changed")
		}
		b.Append(uint64(i+1), body)
	}
	root6, _ := a.Root(6)
	last := &evidence.Checkpoint{Size: 6, Root: root6}
	if _, err := evidence.CheckNext(a, 9, last); err != nil {
		t.Fatalf("a tree grown from the signed one: %v", err)
	}
	if _, err := evidence.CheckNext(b, 9, last); err == nil {
		t.Fatal("a head whose first 6 leaves differ from the signed ones was signed")
	}
	if _, err := evidence.CheckNext(a, 5, last); err == nil {
		t.Fatal("a head smaller than the signed one was signed")
	}
}

// TestCheckpointSizeBounded: tlog's proof arithmetic loops forever on
// tree sizes past 2^62, so a checkpoint of such a size is refused.
func TestCheckpointSizeBounded(t *testing.T) {
	text := "gated.test/audit/acme\n4611686018427387909\n" + strings.Repeat("A", 43) + "=\ntime 2025-01-02T03:04:05Z\n"
	if _, err := evidence.ParseCheckpoint(text); err == nil || !strings.Contains(err.Error(), "bad tree size") {
		t.Fatalf("a checkpoint of size 2^62+5: %v", err)
	}
	ok := strings.Replace(text, "4611686018427387909", "12", 1)
	if c, err := evidence.ParseCheckpoint(ok); err != nil || c.Size != 12 || c.Text() != ok {
		t.Fatalf("a checkpoint of size 12: %+v %v", c, err)
	}
}
