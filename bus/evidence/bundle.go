package evidence

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/gated/gated/bus/audit"
)

// Format names the bundle format in its header.
const Format = "gated-evidence/1"

// Header is a bundle's first line. The lines after it are Records
// records, one a line (RecordLine).
type Header struct {
	Format string `json:"format"`
	Tenant string `json:"tenant"`
	// Keys are gated's checkpoint public keys (note verifier keys),
	// WitnessKeys those of the witnesses whose cosignatures the
	// checkpoints carry.
	Keys        []string `json:"keys"`
	WitnessKeys []string `json:"witness_keys"`
	// Checkpoints are signed notes, smallest tree first; the last is the
	// one the records are proved against.
	Checkpoints []string `json:"checkpoints"`
	// Consistency proves each checkpoint's tree a prefix of the next's.
	Consistency []TreeProof `json:"consistency"`
	// Range: the records are the leaves Start to the last checkpoint's
	// size, each line in order, and Prefix the frontier of the tree of
	// size Start (Tree.Prefix); the verifier computes the root. Without
	// Range, each record carries its inclusion proof.
	Range  bool        `json:"range"`
	Start  int64       `json:"start"`
	Prefix []tlog.Hash `json:"prefix"`
	// Records is the number of record lines.
	Records int64 `json:"records"`
}

// TreeProof is a consistency proof between two tree sizes.
type TreeProof struct {
	From  int64       `json:"from"`
	To    int64       `json:"to"`
	Proof []tlog.Hash `json:"proof"`
}

// RecordLine is one record of a bundle: its leaf index in the tenant's
// tree, its stream sequence, its body as stored, and, outside a range,
// its inclusion proof against the last checkpoint.
type RecordLine struct {
	Index int64       `json:"index"`
	Seq   uint64      `json:"seq"`
	Body  []byte      `json:"body"`
	Proof []tlog.Hash `json:"proof,omitempty"`
}

// ExportOptions choose what a bundle holds.
type ExportOptions struct {
	Tenant string
	// Keys are gated's checkpoint public keys; WitnessKeys verify the
	// witnesses' cosignatures (others are kept unverified in the notes).
	Keys, WitnessKeys []string
	// Since keeps the records stored at or after it (a range); IDs the
	// records of these proposals, each with its proof (Since is then not
	// used). Neither: every record up to the last checkpoint.
	Since time.Time
	IDs   []string
	// Seqs keeps the records at these stream sequences, each with its
	// proof.
	Seqs []uint64
	// From and To, when set, keep only the checkpoints of these tree
	// sizes and the proof between them, and no record.
	From, To int64
}

// Export writes a bundle of o.Tenant's evidence to w: the stored
// checkpoints (all, or From and To), the consistency proofs between
// them, and the records chosen with their proofs against the last
// checkpoint. The tree is rebuilt from the audit stream, so a stored
// checkpoint that the stream does not match fails the export.
func Export(ctx context.Context, js jetstream.JetStream, w io.Writer, o ExportOptions) (Header, error) {
	known, _, err := Verifiers(append(slices.Clone(o.Keys), o.WitnessKeys...))
	if err != nil {
		return Header{}, err
	}
	cps, _, err := Checkpoints(ctx, js, o.Tenant, known)
	if err != nil {
		return Header{}, err
	}
	if len(cps) == 0 {
		return Header{}, fmt.Errorf("tenant %s has no checkpoint: sign one with gated audit checkpoint", o.Tenant)
	}
	if o.From > 0 || o.To > 0 {
		cps = slices.DeleteFunc(cps, func(c Signed) bool { return c.Size != o.From && c.Size != o.To })
		if len(cps) != 2 {
			return Header{}, fmt.Errorf("tenant %s has no checkpoints of sizes %d and %d", o.Tenant, o.From, o.To)
		}
	}
	want := map[string]bool{}
	for _, id := range o.IDs {
		want[id] = true
	}
	wantSeq := map[uint64]bool{}
	for _, s := range o.Seqs {
		wantSeq[s] = true
	}
	var picked []RecordLine
	start := int64(-1)
	tree := new(Tree)
	err = audit.Read(ctx, js, audit.Query{Tenant: o.Tenant, Undecoded: len(o.IDs) == 0}, func(e audit.Entry) error {
		i := tree.Size()
		tree.Append(e.Seq, e.Data)
		switch {
		case wantSeq[e.Seq], e.Record != nil && want[e.Record.ProposalID]:
			picked = append(picked, RecordLine{Index: i, Seq: e.Seq, Body: e.Data})
		case start < 0 && !o.Since.IsZero() && !e.Stored.Before(o.Since):
			start = i
		}
		return nil
	})
	if err != nil {
		return Header{}, err
	}
	last := cps[len(cps)-1]
	h := Header{Format: Format, Tenant: o.Tenant, Keys: o.Keys, WitnessKeys: o.WitnessKeys}
	for i, c := range cps {
		root, err := tree.Root(c.Size)
		if err != nil {
			return Header{}, fmt.Errorf("tenant %s: the stream holds %d records, the checkpoint signed at %s %d (%w)", o.Tenant, tree.Size(), c.Time.Format(time.RFC3339), c.Size, ErrInconsistent)
		}
		if root != c.Root {
			return Header{}, fmt.Errorf("tenant %s: the stream does not match the checkpoint of size %d signed at %s (%w)", o.Tenant, c.Size, c.Time.Format(time.RFC3339), ErrInconsistent)
		}
		h.Checkpoints = append(h.Checkpoints, string(c.Note))
		if i > 0 && cps[i-1].Size > 0 && cps[i-1].Size < c.Size {
			p, err := tree.ProveTree(cps[i-1].Size, c.Size)
			if err != nil {
				return Header{}, err
			}
			h.Consistency = append(h.Consistency, TreeProof{From: cps[i-1].Size, To: c.Size, Proof: p})
		}
	}
	switch {
	case o.From > 0 || o.To > 0:
		picked = nil
	case len(want)+len(wantSeq) > 0:
		picked = slices.DeleteFunc(picked, func(r RecordLine) bool { return r.Index >= last.Size })
		for i := range picked {
			if picked[i].Proof, err = tree.ProveRecord(picked[i].Index, last.Size); err != nil {
				return Header{}, err
			}
		}
		if len(picked) == 0 {
			return Header{}, fmt.Errorf("tenant %s has no record of %v or at %v under its last checkpoint (size %d)", o.Tenant, o.IDs, o.Seqs, last.Size)
		}
	default:
		if start < 0 {
			start = 0
			if !o.Since.IsZero() {
				start = tree.Size()
			}
		}
		start = min(start, last.Size)
		h.Range, h.Start = true, start
		if h.Prefix, err = tree.Prefix(start); err != nil {
			return Header{}, err
		}
		h.Records = last.Size - start
	}
	if !h.Range {
		h.Records = int64(len(picked))
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if err := writeLine(bw, h); err != nil {
		return Header{}, err
	}
	for _, r := range picked {
		if err := writeLine(bw, r); err != nil {
			return Header{}, err
		}
	}
	if h.Range && h.Records > 0 {
		err := audit.Read(ctx, js, audit.Query{Tenant: o.Tenant, Undecoded: true, StartSeq: tree.Seq(start)}, func(e audit.Entry) error {
			i := tree.Index(e.Seq)
			if i >= last.Size {
				return errStop
			}
			return writeLine(bw, RecordLine{Index: i, Seq: e.Seq, Body: e.Data})
		})
		if err != nil && !errors.Is(err, errStop) {
			return Header{}, err
		}
	}
	return h, bw.Flush()
}

var errStop = errors.New("stop")

func writeLine(w *bufio.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}
