package evidence

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Checkpoint is a signed tree head in the C2SP checkpoint format: the
// origin line names the log (OriginOf), then the tree size and the
// root hash in base64, then one extension line, "time " and when it
// was signed (RFC 3339, UTC).
type Checkpoint struct {
	Origin string
	Size   int64
	Root   tlog.Hash
	Time   time.Time
}

// maxSize bounds a tree's size: far beyond any log, and within what
// tlog's proof arithmetic handles.
const maxSize = 1 << 60

// OriginOf is the origin line of tenant's log under the key named name.
func OriginOf(name, tenant string) string { return name + "/audit/" + tenant }

// Tenant is the tenant an origin line names, and the key name before it.
func Tenant(origin string) (name, tenant string, ok bool) {
	i := strings.LastIndex(origin, "/audit/")
	if i <= 0 {
		return "", "", false
	}
	return origin[:i], origin[i+len("/audit/"):], origin[i+len("/audit/"):] != ""
}

// Text is the checkpoint's body, the text a note signs.
func (c Checkpoint) Text() string {
	return fmt.Sprintf("%s\n%d\n%s\ntime %s\n", c.Origin, c.Size,
		base64.StdEncoding.EncodeToString(c.Root[:]), c.Time.UTC().Format(time.RFC3339))
}

// ParseCheckpoint reads a checkpoint's body as Text writes it.
func ParseCheckpoint(text string) (Checkpoint, error) {
	lines := strings.Split(text, "\n")
	if len(lines) != 5 || lines[4] != "" {
		return Checkpoint{}, errors.New("malformed checkpoint: not four lines")
	}
	var c Checkpoint
	c.Origin = lines[0]
	if c.Origin == "" || strings.ContainsAny(c.Origin, " +") {
		return Checkpoint{}, errors.New("malformed checkpoint: bad origin line")
	}
	n, err := strconv.ParseInt(lines[1], 10, 64)
	// tlog's proofs loop forever on sizes past 2^62.
	if err != nil || n < 0 || n > maxSize || strconv.FormatInt(n, 10) != lines[1] {
		return Checkpoint{}, errors.New("malformed checkpoint: bad tree size")
	}
	c.Size = n
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		return Checkpoint{}, errors.New("malformed checkpoint: bad root hash")
	}
	copy(c.Root[:], root)
	at, ok := strings.CutPrefix(lines[3], "time ")
	if !ok {
		return Checkpoint{}, errors.New("malformed checkpoint: no time line")
	}
	if c.Time, err = time.Parse(time.RFC3339, at); err != nil || c.Time.UTC().Format(time.RFC3339) != at {
		return Checkpoint{}, errors.New("malformed checkpoint: bad time")
	}
	return c, nil
}

// Signed is a checkpoint as a signed note.
type Signed struct {
	Checkpoint
	// Note is the note's text with every signature line.
	Note []byte
	// Sigs names the keys whose signatures verified.
	Sigs []note.Signature
}

// Open checks a signed checkpoint: at least one signature by a key of
// known (gated's keys), a valid checkpoint body, and an origin that the
// signing key's name and tenant give. Witness keys may be among known.
func Open(msg []byte, known note.Verifiers, tenant string) (Signed, error) {
	n, err := note.Open(msg, known)
	if err != nil {
		var unverified *note.UnverifiedNoteError
		var invalid *note.InvalidSignatureError
		switch {
		case errors.As(err, &unverified):
			return Signed{}, errors.New("checkpoint signed by no known key")
		case errors.As(err, &invalid):
			return Signed{}, fmt.Errorf("checkpoint signature by %s does not verify", invalid.Name)
		}
		return Signed{}, fmt.Errorf("checkpoint: %w", err)
	}
	c, err := ParseCheckpoint(n.Text)
	if err != nil {
		return Signed{}, err
	}
	name, t, ok := Tenant(c.Origin)
	switch {
	case !ok:
		return Signed{}, fmt.Errorf("checkpoint origin %q names no tenant", c.Origin)
	case t != tenant:
		return Signed{}, fmt.Errorf("checkpoint of tenant %q's log, not of tenant %q", t, tenant)
	}
	signedByLog := false
	for _, s := range n.Sigs {
		signedByLog = signedByLog || s.Name == name
	}
	if !signedByLog {
		return Signed{}, fmt.Errorf("checkpoint of log %q is not signed by a key of that name", name)
	}
	return Signed{Checkpoint: c, Note: msg, Sigs: n.Sigs}, nil
}

// SignedBy reports whether a signature by the key vkey verified.
func (s Signed) SignedBy(v note.Verifier) bool {
	for _, sig := range s.Sigs {
		if sig.Name == v.Name() && sig.Hash == v.KeyHash() {
			return true
		}
	}
	return false
}

// Sign signs c with signer.
func Sign(c Checkpoint, signer note.Signer) ([]byte, error) {
	return note.Sign(&note.Note{Text: c.Text()}, signer)
}

// ErrInconsistent is the error of a head that contradicts one signed
// before.
var ErrInconsistent = errors.New("inconsistent with a checkpoint signed before")

// CheckNext refuses to sign the head of t at size n when it is not
// consistent with last, the latest checkpoint signed: a smaller tree, or
// one whose first last.Size leaves hash otherwise (checked with a
// consistency proof, as any verifier would).
func CheckNext(t *Tree, n int64, last *Checkpoint) (tlog.Hash, error) {
	root, err := t.Root(n)
	if err != nil || last == nil {
		return root, err
	}
	if n < last.Size {
		return root, fmt.Errorf("%w: the stream holds %d records of the tenant, checkpoint signed at %s holds %d", ErrInconsistent, n, last.Time.Format(time.RFC3339), last.Size)
	}
	if last.Size == 0 {
		return root, nil
	}
	p, err := t.ProveTree(last.Size, n)
	if err != nil {
		return root, err
	}
	if err := tlog.CheckTree(p, n, root, last.Size, last.Root); err != nil {
		return root, fmt.Errorf("%w: the first %d records no longer hash to the root of the checkpoint signed at %s", ErrInconsistent, last.Size, last.Time.Format(time.RFC3339))
	}
	return root, nil
}

// mergeSigs returns msg with the signature lines of other that it lacks;
// both are notes of the same text.
func mergeSigs(msg, other []byte) []byte {
	out := bytes.Clone(msg)
	i := bytes.LastIndex(other, []byte("\n\n"))
	for line := range bytes.Lines(other[i+2:]) {
		if !bytes.Contains(out[bytes.LastIndex(out, []byte("\n\n")):], line) {
			out = append(out, line...)
		}
	}
	return out
}
