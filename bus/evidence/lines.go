package evidence

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/mod/sumdb/tlog"
)

// decodeRecordLine reads one record line, strictly: the form Export
// writes in one pass, anything else with encoding/json.
func decodeRecordLine(line []byte, rl *RecordLine) error {
	if fastRecordLine(line, rl) {
		return nil
	}
	*rl = RecordLine{}
	return strictUnmarshal(line, rl)
}

// fastRecordLine reads {"index":I,"seq":S,"body":"B64"} exactly as
// encoding/json writes a RecordLine without a proof, into rl (reusing
// its Body); ok is false for any other form, which the caller then
// decodes with encoding/json (FuzzRecordLine holds the two to one
// answer).
func fastRecordLine(line []byte, rl *RecordLine) bool {
	rest, ok := bytes.CutPrefix(line, []byte(`{"index":`))
	if !ok {
		return false
	}
	index, rest, ok := cutUint(rest, `,"seq":`)
	if !ok || index > 1<<62 {
		return false
	}
	seq, rest, ok := cutUint(rest, `,"body":"`)
	if !ok {
		return false
	}
	b64, ok := bytes.CutSuffix(rest, []byte(`"}`))
	if !ok || bytes.ContainsAny(b64, "\"\\\r\n") {
		return false
	}
	body := rl.Body[:0]
	if need := base64.StdEncoding.DecodedLen(len(b64)); cap(body) < need {
		body = make([]byte, need)
	}
	n, err := base64.StdEncoding.Decode(body[:cap(body)], b64)
	if err != nil {
		return false
	}
	rl.Index, rl.Seq, rl.Body, rl.Proof = int64(index), seq, body[:n], nil
	return true
}

// cutUint reads a JSON unsigned integer up to sep.
func cutUint(b []byte, sep string) (uint64, []byte, bool) {
	i := bytes.Index(b, []byte(sep))
	if i <= 0 || i > 20 || (b[0] == '0' && i > 1) {
		return 0, nil, false
	}
	for _, c := range b[:i] {
		if c < '0' || c > '9' {
			return 0, nil, false
		}
	}
	v, err := strconv.ParseUint(string(b[:i]), 10, 64)
	return v, b[i+len(sep):], err == nil
}

// batchLen is how many lines a core reads and hashes at a time.
const batchLen = 512

// leafLine is one record line, read and hashed.
type leafLine struct {
	index int64
	seq   uint64
	leaf  tlog.Hash
	proof tlog.RecordProof
	err   error
}

// batch is up to batchLen lines, copied, and what they hold.
type batch struct {
	buf   []byte
	lines [][]byte
	out   []leafLine
	done  chan struct{}
	// last: the reader met the end (or err) after these lines.
	last bool
	err  error
}

func readBatch(br *bufio.Reader) *batch {
	b := &batch{buf: make([]byte, 0, 64<<10), done: make(chan struct{})}
	for len(b.lines) < batchLen {
		line, err := readLine(br)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				b.err = err
			}
			b.last = true
			break
		}
		start := len(b.buf)
		b.buf = append(b.buf, line...)
		b.lines = append(b.lines, b.buf[start:len(b.buf):len(b.buf)])
	}
	return b
}

// hash reads and hashes the batch's lines.
func (b *batch) hash(rl *RecordLine) {
	b.out = make([]leafLine, len(b.lines))
	for i, line := range b.lines {
		o := &b.out[i]
		if o.err = decodeRecordLine(line, rl); o.err == nil {
			o.index, o.seq, o.leaf, o.proof = rl.Index, rl.Seq, tlog.RecordHash(rl.Body), rl.Proof
		}
	}
	close(b.done)
}

// readLeaves reads the record lines of br, in batches on every core
// when there is more than one, and hands them to fn in order. It stops
// at the first error fn returns.
func readLeaves(br *bufio.Reader, fn func(n int64, l *leafLine) error) error {
	var n int64
	each := func(b *batch) error {
		<-b.done
		for i := range b.out {
			if err := fn(n, &b.out[i]); err != nil {
				return err
			}
			n++
		}
		return b.err
	}
	first := readBatch(br)
	if first.last {
		first.hash(new(RecordLine))
		return each(first)
	}
	workers := runtime.GOMAXPROCS(0)
	jobs := make(chan *batch, workers)
	ordered := make(chan *batch, 2*workers)
	stop := make(chan struct{})
	go func() {
		defer close(ordered)
		defer close(jobs)
		for b := first; ; b = readBatch(br) {
			select {
			case jobs <- b:
			case <-stop:
				return
			}
			select {
			case ordered <- b:
			case <-stop:
				return
			}
			if b.last {
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var rl RecordLine
			for b := range jobs {
				b.hash(&rl)
			}
		})
	}
	defer wg.Wait()
	defer close(stop)
	for b := range ordered {
		if err := each(b); err != nil {
			// Let the reader and the workers end.
			go func() {
				for range ordered {
				}
			}()
			return err
		}
	}
	return nil
}
