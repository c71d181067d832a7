package evidence

import (
	"errors"
	"fmt"
	"math/bits"

	"golang.org/x/mod/sumdb/tlog"
)

// Tree is one tenant's Merkle tree, held in memory: the hashes tlog
// stores for each leaf (about two per leaf) and the stream sequence of
// each leaf's message.
type Tree struct {
	hashes []tlog.Hash
	seqs   []uint64
}

// Size is the number of leaves.
func (t *Tree) Size() int64 { return int64(len(t.seqs)) }

// Seq is the stream sequence of leaf i.
func (t *Tree) Seq(i int64) uint64 { return t.seqs[i] }

// Index is the leaf of the message at stream sequence seq, or -1.
func (t *Tree) Index(seq uint64) int64 {
	lo, hi := 0, len(t.seqs)
	for lo < hi {
		m := (lo + hi) / 2
		switch {
		case t.seqs[m] == seq:
			return int64(m)
		case t.seqs[m] < seq:
			lo = m + 1
		default:
			hi = m
		}
	}
	return -1
}

// Append adds the message stored at seq with body as the next leaf.
func (t *Tree) Append(seq uint64, body []byte) {
	t.AppendHash(seq, tlog.RecordHash(body))
}

// AppendHash adds a leaf by its leaf hash.
func (t *Tree) AppendHash(seq uint64, leaf tlog.Hash) {
	hs, err := tlog.StoredHashesForRecordHash(t.Size(), leaf, t)
	if err != nil {
		panic(err) // ReadHashes of hashes already stored cannot fail
	}
	t.hashes = append(t.hashes, hs...)
	t.seqs = append(t.seqs, seq)
}

// ReadHashes implements tlog.HashReader.
func (t *Tree) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(t.hashes)) {
			return nil, fmt.Errorf("evidence: hash %d is not stored", x)
		}
		out[i] = t.hashes[x]
	}
	return out, nil
}

// Root is the root hash of the tree's first n leaves.
func (t *Tree) Root(n int64) (tlog.Hash, error) {
	if n < 0 || n > t.Size() {
		return tlog.Hash{}, fmt.Errorf("evidence: no tree of size %d (the tree has %d leaves)", n, t.Size())
	}
	return tlog.TreeHash(n, t)
}

// ProveRecord proves leaf i in the tree of size n.
func (t *Tree) ProveRecord(i, n int64) (tlog.RecordProof, error) {
	if n > t.Size() {
		return nil, fmt.Errorf("evidence: no tree of size %d (the tree has %d leaves)", n, t.Size())
	}
	return tlog.ProveRecord(n, i, t)
}

// ProveTree proves that the tree of size from is a prefix of the tree
// of size to.
func (t *Tree) ProveTree(from, to int64) (tlog.TreeProof, error) {
	if to > t.Size() {
		return nil, fmt.Errorf("evidence: no tree of size %d (the tree has %d leaves)", to, t.Size())
	}
	return tlog.ProveTree(to, from, t)
}

// Prefix is the frontier of the tree of size n: the roots of its
// complete subtrees, largest first. With them and the leaves from n on,
// a verifier computes the root of any larger tree (see Frontier).
func (t *Tree) Prefix(n int64) ([]tlog.Hash, error) {
	if n < 0 || n > t.Size() {
		return nil, fmt.Errorf("evidence: no tree of size %d (the tree has %d leaves)", n, t.Size())
	}
	var idx []int64
	for lo := int64(0); lo < n; {
		level := 63 - bits.LeadingZeros64(uint64(n-lo))
		idx = append(idx, tlog.StoredHashIndex(level, lo>>level))
		lo += 1 << level
	}
	return t.ReadHashes(idx)
}

// Frontier computes a tree's root from the frontier of its first leaves
// and the leaf hashes that follow, without storing the tree.
type Frontier struct {
	size  int64
	stack []tlog.Hash // the roots of the complete subtrees, largest first
}

// errPrefix: a frontier that does not have one hash per complete
// subtree of its size.
var errPrefix = errors.New("the prefix does not hold one hash for each complete subtree of its size")

// NewFrontier starts from the frontier of the tree of size n (Prefix).
func NewFrontier(n int64, prefix []tlog.Hash) (*Frontier, error) {
	if n < 0 || bits.OnesCount64(uint64(n)) != len(prefix) {
		return nil, errPrefix
	}
	return &Frontier{size: n, stack: append([]tlog.Hash(nil), prefix...)}, nil
}

// Size is the number of leaves so far.
func (f *Frontier) Size() int64 { return f.size }

// Append adds the next leaf hash.
func (f *Frontier) Append(leaf tlog.Hash) {
	f.stack = append(f.stack, leaf)
	// Each trailing 1 bit of the old size completes a subtree.
	for n := f.size; n&1 == 1; n >>= 1 {
		k := len(f.stack)
		f.stack[k-2] = tlog.NodeHash(f.stack[k-2], f.stack[k-1])
		f.stack = f.stack[:k-1]
	}
	f.size++
}

// Root is the root hash of the leaves so far.
func (f *Frontier) Root() tlog.Hash {
	if len(f.stack) == 0 {
		h, _ := tlog.TreeHash(0, nil) // the empty tree's hash reads nothing
		return h
	}
	h := f.stack[len(f.stack)-1]
	for i := len(f.stack) - 2; i >= 0; i-- {
		h = tlog.NodeHash(f.stack[i], h)
	}
	return h
}
