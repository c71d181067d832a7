package evidence

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// FuzzRecordLine holds the one-pass reader of record lines to
// encoding/json: whatever it reads, encoding/json reads the same.
func FuzzRecordLine(f *testing.F) {
	f.Add([]byte(`{"index":0,"seq":1,"body":"eyJ2IjozfQ=="}`))
	f.Add([]byte(`{"index":12,"seq":345,"body":""}`))
	f.Add([]byte(`{"index":01,"seq":1,"body":"AA=="}`))
	f.Add([]byte(`{"index":1,"seq":1,"body":"A\nA=="}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		var fast RecordLine
		if !fastRecordLine(line, &fast) {
			return
		}
		var slow RecordLine
		if err := strictUnmarshal(line, &slow); err != nil {
			t.Fatalf("read %q in one pass, encoding/json refuses it: %v", line, err)
		}
		if fast.Index != slow.Index || fast.Seq != slow.Seq || !bytes.Equal(fast.Body, slow.Body) {
			t.Fatalf("%q: one pass %+v, encoding/json %+v", line, fast, slow)
		}
	})
}

// FuzzVerifyBundle: a bundle of any bytes is refused or verified, never
// a panic, and a refusal is an ErrBundle.
func FuzzVerifyBundle(f *testing.F) {
	file, _ := NewKeyFile("gated.fuzz")
	keys, _ := ParseKeys(file)
	tree := new(Tree)
	for i := range 5 {
		tree.Append(uint64(i+1), []byte{byte(i)})
	}
	root, _ := tree.Root(5)
	msg, _ := Sign(Checkpoint{Origin: OriginOf("gated.fuzz", "acme"), Size: 5, Root: root}, keys.Signer)
	h, _ := json.Marshal(Header{Format: Format, Tenant: "acme", Keys: keys.Public, Checkpoints: []string{string(msg)}, Range: true, Records: 5})
	var seed bytes.Buffer
	seed.Write(append(h, '\n'))
	for i := range 5 {
		l, _ := json.Marshal(RecordLine{Index: int64(i), Seq: uint64(i + 1), Body: []byte{byte(i)}})
		seed.Write(append(l, '\n'))
	}
	if _, err := Verify(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(seed.Bytes())), nil }, VerifyOptions{}); err != nil {
		f.Fatalf("the seed bundle: %v", err)
	}
	f.Add(seed.Bytes())
	p, _ := tree.ProveRecord(2, 5)
	l, _ := json.Marshal(RecordLine{Index: 2, Seq: 3, Body: []byte{2}, Proof: p})
	h2, _ := json.Marshal(Header{Format: Format, Tenant: "acme", Keys: keys.Public, Checkpoints: []string{string(msg)}, Records: 1, Prefix: []tlog.Hash{}})
	f.Add(append(append(h2, '\n'), l...))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Verify(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, VerifyOptions{})
		if err != nil && !isBundleErr(err) {
			t.Fatalf("error %v is not an ErrBundle", err)
		}
	})
}

func isBundleErr(err error) bool { return errors.Is(err, ErrBundle) }

// FuzzParseCheckpoint: a checkpoint body read is written back as read.
func FuzzParseCheckpoint(f *testing.F) {
	f.Add("gated.test/audit/acme\n12\n" + strings.Repeat("A", 43) + "=\ntime 2025-01-02T03:04:05Z\n")
	f.Add("x/audit/_\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\ntime 2025-01-02T03:04:05Z\n")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := ParseCheckpoint(text)
		if err != nil {
			return
		}
		if c.Text() != text {
			t.Fatalf("read %q, written back %q", text, c.Text())
		}
	})
}

// FuzzParseKeys: a key file read signs, and its public key verifies.
func FuzzParseKeys(f *testing.F) {
	file, _ := NewKeyFile("gated.fuzz")
	f.Add(file)
	rotated, _ := Rotate(file)
	f.Add(rotated)
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := ParseKeys(data)
		if err != nil {
			return
		}
		msg, err := note.Sign(&note.Note{Text: "x\n"}, k.Signer)
		if err != nil {
			return // a name note does not sign with
		}
		known, _, err := Verifiers(k.Public[:1])
		if err != nil {
			t.Fatalf("the public key of %q: %v", data, err)
		}
		if _, err := note.Open(msg, known); err != nil {
			t.Fatalf("a note signed with %q does not verify under its public key: %v", data, err)
		}
	})
}
