package evidence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine/wire"
)

// Stream keeps the signed checkpoints, on SubjectPrefix + tenant.
const Stream = "GATED_CHECKPOINTS"

// SubjectPrefix + tenant is where a tenant's checkpoints are stored,
// oldest first; a witness's cosignature is stored as the same note with
// both signatures.
const SubjectPrefix = wire.Root + "checkpoints."

// EnsureStream opens the checkpoint stream, creating it when it is not
// there: file storage, limits retention, nothing deleted or purged.
func EnsureStream(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, Stream)
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("opening stream %s: %w", Stream, err)
	}
	s, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name: Stream, Subjects: []string{SubjectPrefix + ">"},
		Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy,
		DenyDelete: true, DenyPurge: true,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.Stream(ctx, Stream)
	}
	if err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", Stream, err)
	}
	return s, nil
}

// Checkpoints reads tenant's stored checkpoints, each opened with known
// (a checkpoint that does not open is an error naming its sequence),
// oldest first, the notes of one checkpoint merged into one. last is the
// stream sequence of the newest message, 0 when there is none.
func Checkpoints(ctx context.Context, js jetstream.JetStream, tenant string, known note.Verifiers) (cps []Signed, last uint64, err error) {
	s, err := js.Stream(ctx, Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("opening stream %s: %w", Stream, err)
	}
	subject := SubjectPrefix + tenant
	lm, err := s.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading the last checkpoint: %w", err)
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return nil, 0, fmt.Errorf("reading stream %s: %w", Stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, 0, fmt.Errorf("reading stream %s: %w", Stream, err)
	}
	defer it.Stop()
	byText := map[string]int{}
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return nil, 0, fmt.Errorf("reading stream %s: %w", Stream, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return nil, 0, err
		}
		c, err := Open(m.Data(), known, tenant)
		if err != nil {
			return nil, 0, fmt.Errorf("checkpoint at %s sequence %d: %w", Stream, md.Sequence.Stream, err)
		}
		if i, ok := byText[c.Text()]; ok {
			cps[i].Note = mergeSigs(cps[i].Note, c.Note)
			cps[i].Sigs = append(cps[i].Sigs, c.Sigs...)
		} else {
			byText[c.Text()] = len(cps)
			cps = append(cps, c)
		}
		if md.Sequence.Stream >= lm.Sequence {
			return cps, lm.Sequence, nil
		}
	}
}

// Signer signs the heads of tenants' trees. It keeps each tree it built
// and reads only the records stored since, so signing at an interval
// costs what was appended, not the whole stream.
type Signer struct {
	js    jetstream.JetStream
	keys  *Keys
	trees map[string]*Tree
}

// NewSigner signs with keys the trees of the audit stream on js.
func NewSigner(js jetstream.JetStream, keys *Keys) *Signer {
	return &Signer{js: js, keys: keys, trees: map[string]*Tree{}}
}

// tree brings tenant's tree up to the stream's last record.
func (s *Signer) tree(ctx context.Context, tenant string) (*Tree, error) {
	t := s.trees[tenant]
	if t == nil {
		t = new(Tree)
	}
	var from uint64
	if n := t.Size(); n > 0 {
		from = t.Seq(n-1) + 1
	}
	err := audit.Read(ctx, s.js, audit.Query{Tenant: tenant, Undecoded: true, StartSeq: from}, func(e audit.Entry) error {
		if e.Seq >= from {
			t.Append(e.Seq, e.Data)
		}
		return nil
	})
	if err != nil {
		// The tree may hold part of what was read: build it again next time.
		delete(s.trees, tenant)
		return nil, err
	}
	s.trees[tenant] = t
	return t, nil
}

// Sign signs the head of tenant's tree and stores it, unless it is
// inconsistent with the newest checkpoint stored (ErrInconsistent). When
// the tree has not grown since, the newest checkpoint is returned and
// nothing is signed (signed is false). Two signers at once: one stores
// its checkpoint, the other's store fails.
func (s *Signer) Sign(ctx context.Context, tenant string, now time.Time) (c Signed, signed bool, err error) {
	known, _, err := Verifiers(s.keys.Public)
	if err != nil {
		return Signed{}, false, err
	}
	if _, err := EnsureStream(ctx, s.js); err != nil {
		return Signed{}, false, err
	}
	cps, lastSeq, err := Checkpoints(ctx, s.js, tenant, known)
	if err != nil {
		return Signed{}, false, err
	}
	tree, err := s.tree(ctx, tenant)
	if err != nil {
		return Signed{}, false, err
	}
	var last *Checkpoint
	if len(cps) > 0 {
		last = &cps[len(cps)-1].Checkpoint
	}
	root, err := CheckNext(tree, tree.Size(), last)
	if err != nil {
		return Signed{}, false, fmt.Errorf("tenant %s: %w", tenant, err)
	}
	if last != nil && last.Size == tree.Size() {
		return cps[len(cps)-1], false, nil
	}
	cp := Checkpoint{Origin: OriginOf(s.keys.Signer.Name(), tenant), Size: tree.Size(), Root: root, Time: now.UTC().Truncate(time.Second)}
	msg, err := Sign(cp, s.keys.Signer)
	if err != nil {
		return Signed{}, false, err
	}
	if _, err := s.js.Publish(ctx, SubjectPrefix+tenant, msg, jetstream.WithExpectStream(Stream),
		jetstream.WithExpectLastSequencePerSubject(lastSeq)); err != nil {
		return Signed{}, false, fmt.Errorf("storing the checkpoint of tenant %s: %w", tenant, err)
	}
	out, err := Open(msg, known, tenant)
	return out, err == nil, err
}

// Cosign stores a witness's cosignature: msg is a stored checkpoint of
// tenant with a signature by witness besides gated's.
func Cosign(ctx context.Context, js jetstream.JetStream, tenant string, msg []byte, public []string, witness string) (Signed, error) {
	_, vs, err := Verifiers(append(append([]string(nil), public...), witness))
	if err != nil {
		return Signed{}, err
	}
	known := note.VerifierList(vs...)
	c, err := Open(msg, known, tenant)
	if err != nil {
		return Signed{}, err
	}
	if !c.SignedBy(vs[len(vs)-1]) {
		return Signed{}, fmt.Errorf("the checkpoint has no signature by the witness key %s", vs[len(vs)-1].Name())
	}
	cps, _, err := Checkpoints(ctx, js, tenant, known)
	if err != nil {
		return Signed{}, err
	}
	for _, s := range cps {
		if s.Text() == c.Text() {
			if _, err := js.Publish(ctx, SubjectPrefix+tenant, msg, jetstream.WithExpectStream(Stream)); err != nil {
				return Signed{}, fmt.Errorf("storing the cosignature: %w", err)
			}
			return c, nil
		}
	}
	return Signed{}, fmt.Errorf("tenant %s has no stored checkpoint of size %d signed at %s", tenant, c.Size, c.Time.Format(time.RFC3339))
}
