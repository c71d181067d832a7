package evidence

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/gated/gated/bus/audit"
)

// VerifyOptions say what a verifier trusts.
type VerifyOptions struct {
	// Tenant is the tenant the bundle must be of; empty takes the
	// bundle's.
	Tenant string
	// Keys are gated's checkpoint public keys, as the verifier got them
	// from gated's operator; empty trusts the keys the bundle carries
	// (Result.KeysFromBundle), which proves only that the bundle agrees
	// with itself.
	Keys []string
	// Witnesses are witness keys whose cosignature the last checkpoint
	// must carry.
	Witnesses []string
}

// Result is what a bundle proved.
type Result struct {
	Tenant string
	// Checkpoints verified, smallest first; the last is the one the
	// records are proved against.
	Checkpoints []Checkpoint
	// Records proved, and whether as a Range from Start.
	Records int64
	Range   bool
	Start   int64
	// KeysFromBundle: no key was given, the bundle's own were used.
	KeysFromBundle bool
	// Witnessed names the witnesses given in VerifyOptions.Witnesses,
	// every one of which cosigned the last checkpoint; a cosignature by a
	// key the bundle alone carries is checked but not named here.
	Witnessed []string
}

// ErrBundle is wrapped by every error of a bundle that does not verify.
var ErrBundle = errors.New("evidence bundle")

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBundle}, args...)...)
}

// Verify checks a bundle with no NATS and no secret: every checkpoint's
// signature by a trusted key and its tenant, their order and the
// consistency proofs between them (two different heads of one size are
// a fork), the witnesses asked for, and every record against the last
// checkpoint. open gives the bundle; it is opened a second time only to
// name what differs when the records do not hash to the signed root.
func Verify(open func() (io.ReadCloser, error), o VerifyOptions) (Result, error) {
	rc, err := open()
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = rc.Close() }()
	br := bufio.NewReaderSize(rc, readBuffer)
	line, err := readLine(br)
	if err != nil {
		return Result{}, bad("no header line: %v", err)
	}
	h, err := DecodeHeader(line)
	if err != nil {
		return Result{}, err
	}
	res, last, err := checkHeader(h, o)
	if err != nil {
		return res, err
	}
	var front *Frontier
	if h.Range {
		if front, err = NewFrontier(h.Start, h.Prefix); err != nil {
			return res, bad("%v", err)
		}
	}
	prev, count := int64(-1), int64(0)
	var gap error
	err = readLeaves(br, func(n int64, l *leafLine) error {
		count = n + 1
		if l.err != nil {
			return bad("record line %d: %v", n+1, l.err)
		}
		g, err := checkIndex(h, last.Size, prev, l.index, l.seq)
		if err != nil {
			return err
		}
		gap = cmp.Or(gap, g)
		prev = max(prev, l.index)
		if front != nil {
			front.Append(l.leaf)
		} else if err := tlog.CheckRecord(l.proof, last.Size, last.Root, l.index, l.leaf); err != nil {
			return bad("the record at index %d (stream sequence %d) is not in the tree of the last checkpoint (size %d): it was changed, or belongs to another tenant or position", l.index, l.seq, last.Size)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	n := count
	if gap != nil {
		return res, gap
	}
	if n != h.Records {
		return res, bad("%d record lines, the header counts %d", n, h.Records)
	}
	if front != nil {
		if front.Size() != last.Size {
			return res, bad("the records end at index %d, the last checkpoint covers %d: records were removed from the end", front.Size()-1, last.Size)
		}
		h.Records = n
		if front.Root() != last.Root {
			return res, locate(open, h, last)
		}
	}
	res.Records = h.Records
	return res, nil
}

// DecodeHeader reads a bundle's header line, strictly.
func DecodeHeader(line []byte) (Header, error) {
	var h Header
	if err := strictUnmarshal(line, &h); err != nil {
		return Header{}, bad("header: %v", err)
	}
	switch {
	case h.Format != Format:
		return Header{}, bad("format %q, not %q", h.Format, Format)
	case h.Records < 0 || h.Start < 0 || h.Start > maxSize:
		return Header{}, bad("header: a count out of range")
	}
	return h, nil
}

// strictUnmarshal decodes one JSON value, refusing unknown members.
func strictUnmarshal(line []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

// checkHeader verifies the checkpoints and their proofs, and returns the
// last one.
func checkHeader(h Header, o VerifyOptions) (Result, Checkpoint, error) {
	res := Result{Tenant: h.Tenant, Range: h.Range, Start: h.Start}
	if o.Tenant != "" && o.Tenant != h.Tenant {
		return res, Checkpoint{}, bad("a bundle of tenant %q, not of %q", h.Tenant, o.Tenant)
	}
	keys := o.Keys
	if len(keys) == 0 {
		keys, res.KeysFromBundle = h.Keys, true
	}
	if len(keys) == 0 {
		return res, Checkpoint{}, bad("no checkpoint key given and none in the bundle")
	}
	witnesses := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(o.Witnesses), h.WitnessKeys...))))
	_, gatedVs, err := Verifiers(keys)
	if err != nil {
		return res, Checkpoint{}, bad("%v", err)
	}
	_, witnessVs, err := Verifiers(witnesses)
	if err != nil {
		return res, Checkpoint{}, bad("%v", err)
	}
	for _, w := range witnessVs {
		if slices.ContainsFunc(gatedVs, func(g note.Verifier) bool { return g.Name() == w.Name() }) {
			return res, Checkpoint{}, bad("witness key %s+%08x is named as a checkpoint key: a witness's signature cannot be told from gated's", w.Name(), w.KeyHash())
		}
	}
	gatedOnly := note.VerifierList(gatedVs...)
	all := note.VerifierList(append(slices.Clone(gatedVs), witnessVs...)...)
	if len(h.Checkpoints) == 0 {
		return res, Checkpoint{}, bad("no checkpoint")
	}
	var cps []Signed
	for i, msg := range h.Checkpoints {
		c, err := Open([]byte(msg), all, h.Tenant)
		if err == nil {
			// A witness's signature alone does not make a checkpoint.
			_, err = Open(stripSigs([]byte(msg), witnessVs), gatedOnly, h.Tenant)
		}
		if err != nil {
			return res, Checkpoint{}, bad("checkpoint %d: %v", i+1, err)
		}
		cps = append(cps, c)
	}
	for i := 1; i < len(cps); i++ {
		a, b := cps[i-1], cps[i]
		switch {
		case a.Size == b.Size && a.Root != b.Root:
			return res, Checkpoint{}, bad("fork: checkpoints %d and %d are both signed for tree size %d with different roots", i, i+1, a.Size)
		case a.Size > b.Size:
			return res, Checkpoint{}, bad("checkpoint %d (size %d) follows a larger one (size %d)", i+1, b.Size, a.Size)
		case a.Size == b.Size || a.Size == 0:
			continue
		}
		p, ok := findProof(h.Consistency, a.Size, b.Size)
		if !ok {
			return res, Checkpoint{}, bad("no consistency proof from tree size %d to %d", a.Size, b.Size)
		}
		if tlog.CheckTree(p, b.Size, b.Root, a.Size, a.Root) != nil {
			return res, Checkpoint{}, bad("fork: checkpoint %d (size %d) is not consistent with checkpoint %d (size %d): the log was rewritten", i+1, b.Size, i, a.Size)
		}
	}
	last := cps[len(cps)-1]
	// Only the witnesses the caller names count: a key the bundle carries
	// proves nothing about who holds it.
	_, required, _ := Verifiers(o.Witnesses)
	for _, v := range required {
		if !last.SignedBy(v) {
			return res, Checkpoint{}, bad("the last checkpoint is not cosigned by the witness %s", v.Name())
		}
		res.Witnessed = append(res.Witnessed, v.Name())
	}
	for _, c := range cps {
		res.Checkpoints = append(res.Checkpoints, c.Checkpoint)
	}
	return res, last.Checkpoint, nil
}

// stripSigs drops the signature lines of the keys vs from a note.
func stripSigs(msg []byte, vs []note.Verifier) []byte {
	i := bytes.LastIndex(msg, []byte("\n\n"))
	if i < 0 || len(vs) == 0 {
		return msg
	}
	out := bytes.Clone(msg[:i+2])
	for line := range bytes.Lines(msg[i+2:]) {
		drop := false
		for _, v := range vs {
			drop = drop || bytes.HasPrefix(line, []byte("— "+v.Name()+" "))
		}
		if !drop {
			out = append(out, line...)
		}
	}
	return out
}

func findProof(ps []TreeProof, from, to int64) (tlog.TreeProof, bool) {
	for _, p := range ps {
		if p.From == from && p.To == to {
			return p.Proof, true
		}
	}
	return nil, false
}

// checkIndex checks a record line's place: a range's lines are its
// indexes in order, others increase and lie under the last checkpoint.
// prev is the largest index before. A gap is returned apart (gap), as a
// later line may show the missing record moved (reordered) instead.
func checkIndex(h Header, size, prev, index int64, seq uint64) (gap, err error) {
	want := prev + 1
	if prev < 0 {
		want = h.Start
	}
	switch {
	case index < 0 || index >= size:
		return nil, bad("the record at index %d (stream sequence %d) lies outside the last checkpoint (size %d): a record was inserted", index, seq, size)
	case !h.Range && index > prev:
		return nil, nil
	case index == prev:
		return nil, bad("index %d appears twice (stream sequence %d): a record was inserted", index, seq)
	case index < want:
		return nil, bad("index %d (stream sequence %d) comes after index %d: records were reordered", index, seq, prev)
	case index > want:
		return bad("index %d (stream sequence %d) follows index %d: %d record(s) were removed", index, seq, want-1, index-want), nil
	}
	return nil, nil
}

// locate reads a range's records again, when they do not hash to the
// signed root, to name the record that differs: through the chain each
// record carries (its position among the tenant's records, and the
// SHA-256 of the record before it).
func locate(open func() (io.ReadCloser, error), h Header, last Checkpoint) error {
	generic := bad("the records do not hash to the root of the last checkpoint (size %d): a record was changed, inserted, removed or reordered", last.Size)
	rc, err := open()
	if err != nil {
		return generic
	}
	defer func() { _ = rc.Close() }()
	br := bufio.NewReaderSize(rc, readBuffer)
	if _, err := readLine(br); err != nil {
		return generic
	}
	var rl RecordLine
	var prevN uint64
	var prevHash [32]byte
	var prevIndex int64 = -1
	var prevSeq uint64
	var gap error
	for range h.Records {
		line, err := readLine(br)
		if err != nil || decodeRecordLine(line, &rl) != nil {
			return generic
		}
		var b struct {
			Tenant string      `json:"tenant"`
			Chain  audit.Chain `json:"chain"`
		}
		js, ok := audit.RecordJSON(rl.Body)
		if !ok || json.Unmarshal(js, &b) != nil || b.Chain.N == 0 {
			return bad("the record at index %d (stream sequence %d) is not a gated audit record: it was changed", rl.Index, rl.Seq)
		}
		if b.Tenant != h.Tenant {
			return bad("the record at index %d (stream sequence %d) is tenant %q's, not %q's", rl.Index, rl.Seq, b.Tenant, h.Tenant)
		}
		if prevIndex >= 0 && b.Chain.N != 1 {
			switch {
			case b.Chain.N == prevN:
				return bad("the record at index %d (stream sequence %d) repeats chain position %d: a record was inserted", rl.Index, rl.Seq, prevN)
			case b.Chain.N < prevN:
				return bad("the record at index %d (stream sequence %d) holds chain position %d after %d: records were reordered", rl.Index, rl.Seq, b.Chain.N, prevN)
			case b.Chain.N > prevN+1:
				gap = cmp.Or(gap, bad("the chain jumps from position %d to %d at index %d (stream sequence %d): %d record(s) were removed", prevN, b.Chain.N, rl.Index, rl.Seq, b.Chain.N-prevN-1))
			case gap == nil && b.Chain.Prev != hex.EncodeToString(prevHash[:]):
				return bad("the record at index %d (stream sequence %d) was changed: the record after it names another hash", prevIndex, prevSeq)
			}
		}
		prevN, prevHash, prevIndex, prevSeq = b.Chain.N, sha256.Sum256(rl.Body), rl.Index, rl.Seq
	}
	if gap != nil {
		return gap
	}
	return bad("the last record, at index %d, was changed (or the chain rewritten to match): the records do not hash to the root of the last checkpoint (size %d)", prevIndex, last.Size)
}

// readLine returns the next line without its newline; io.EOF at the end.
// readBuffer is the size of the bundle's read buffer: lines longer than
// it are joined by readLine, up to maxLine.
const readBuffer = 64 << 10

// maxLine bounds one line of a bundle: far above a record line (an audit
// message is at most the server's payload limit, base64 encoded) and a
// header, so that a bundle cannot make the verifier hold one line of any
// size.
const maxLine = 64 << 20

func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		long := bytes.Clone(line)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(long) > maxLine {
				return nil, bad("a line longer than %d bytes", maxLine)
			}
			line, err = br.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	if err == io.EOF && len(line) > 0 {
		return line, nil
	}
	if err != nil {
		return nil, err
	}
	return line[:len(line)-1], nil
}
