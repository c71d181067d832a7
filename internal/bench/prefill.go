package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine/wire"
)

// Trail is one proposal's history as gated wrote it: the audit events of
// its trail in order, the last one sealing it, and the messages of the
// verdict bucket written for it (the verdict, the target's history, a
// purged review claim). Prefill copies it under new ids and targets.
type Trail struct {
	Path Path
	// ID and TargetKey are the proposal's, as they appear in Events and
	// Bucket; Prefill replaces both.
	ID, TargetKey string
	Events        []gated.AuditEvent
	Bucket        []BucketMsg
}

// BucketMsg is one message of the verdict bucket's stream: its key (the
// subject after the bucket's prefix), headers and data.
type BucketMsg struct {
	Key    string
	Header nats.Header
	Data   []byte
}

// bucketHeader keeps the headers of a stored bucket message that say what
// it is (a purge marker's KV-Operation and Nats-Rollup, anything not the
// server's), and drops those that tie it to its place: the expected last
// sequence a compare-and-set wrote it with, a message id, and what a
// direct get adds (stream, subject, sequence, time stamp).
func bucketHeader(h nats.Header) nats.Header {
	out := nats.Header{}
	for k, v := range h {
		switch {
		case k == "KV-Operation", k == "Nats-Rollup", k == "Nats-Marker-Reason", k == "Nats-TTL":
		case len(k) >= 5 && k[:5] == "Nats-":
			continue
		}
		out[k] = v
	}
	return out
}

// kvSubject is the subject prefix of the verdict bucket's keys.
const kvSubject = "$KV." + wire.VerdictBucket + "."

// CaptureTrail reads back what gated wrote for proposal gen.New(p, i),
// answered since since: its audit events from the audit stream and its
// keys in the verdict bucket. It fails when the trail is not sealed by a
// verdict or the verdict is not stored.
func CaptureTrail(ctx context.Context, js jetstream.JetStream, gen Proposals, p Path, i int, since time.Time) (*Trail, error) {
	pr := gen.New(p, i)
	t := &Trail{Path: p, ID: pr.ID, TargetKey: pr.TargetKey()}
	err := audit.Read(ctx, js, audit.Query{Tenant: gen.Tenant, Since: since}, func(e audit.Entry) error {
		if e.Err != nil {
			return fmt.Errorf("audit record %d: %w", e.Seq, e.Err)
		}
		if e.Record.ProposalID == pr.ID {
			t.Events = append(t.Events, e.Record.Events()...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the audit trail of %s: %w", pr.ID, err)
	}
	if n := len(t.Events); n == 0 || t.Events[n-1].Event != gated.EventVerdict {
		return nil, fmt.Errorf("the audit trail of %s has %d records and no %s at its end", pr.ID, n, gated.EventVerdict)
	}
	stream, err := js.Stream(ctx, "KV_"+wire.VerdictBucket)
	if err != nil {
		return nil, fmt.Errorf("opening the verdict bucket's stream: %w", err)
	}
	for _, key := range []string{
		gen.Tenant + "." + pr.ID,
		gen.Tenant + ".targets." + t.TargetKey,
		gen.Tenant + ".claims." + pr.ID,
	} {
		m, err := stream.GetLastMsgForSubject(ctx, kvSubject+key)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading bucket key %s: %w", key, err)
		}
		t.Bucket = append(t.Bucket, BucketMsg{Key: key, Header: bucketHeader(m.Header), Data: m.Data})
	}
	if len(t.Bucket) == 0 || t.Bucket[0].Key != gen.Tenant+"."+pr.ID {
		return nil, fmt.Errorf("no verdict of %s in bucket %s", pr.ID, wire.VerdictBucket)
	}
	return t, nil
}

// PrefillOptions says what Prefill writes.
type PrefillOptions struct {
	// Proposals is how many proposals' histories to write; the trails
	// are used in turn.
	Proposals int
	// Gen names the written proposals: proposal i of a trail's path gets
	// Gen.New(path, i)'s id and target key. Its nonce must be new.
	Gen Proposals
	// Trails are the histories to copy, from CaptureTrail.
	Trails []*Trail
	// InFlight bounds the trails being written at once and the bucket
	// writes awaiting their acknowledgement. Default 512.
	InFlight int
	// Done counts the proposals written, for a progress bar.
	Done *atomic.Int64
	// AuditKey MACs the records, as gated's audit key does its own; nil
	// writes them without a MAC, as a gated without a key does.
	AuditKey []byte
}

// PrefillResult is what Prefill wrote.
type PrefillResult struct {
	Proposals  int     `json:"proposals"`
	Records    int     `json:"audit_records"`
	BucketMsgs int     `json:"bucket_messages"`
	Seconds    float64 `json:"seconds"`
}

// Prefill writes the histories of o.Proposals proposals as gated writes
// them: each trail's audit events through gated's own audit writer (so
// the tenant's hash chain runs on through them, checked by the stream as
// gated's are) and its bucket messages as stored, the proposal's id and
// target key replaced by new ones. The events carry the time they are
// written at; the rest of their data (the proposal's digest, its
// target's fields) is the captured trail's.
func Prefill(ctx context.Context, js jetstream.JetStream, o PrefillOptions) (PrefillResult, error) {
	if len(o.Trails) == 0 || o.Proposals <= 0 {
		return PrefillResult{}, nil
	}
	inFlight := o.InFlight
	if inFlight <= 0 {
		inFlight = 512
	}
	start := time.Now()
	w, err := audit.NewWriter(ctx, js, audit.Config{Instance: "gated-bench-prefill", QueueLen: inFlight * 8, Key: o.AuditKey})
	if err != nil {
		return PrefillResult{}, fmt.Errorf("opening the audit writer: %w", err)
	}
	var (
		res     PrefillResult
		records atomic.Int64
		msgs    atomic.Int64
		written atomic.Int64
		next    atomic.Int64
		mu      sync.Mutex
		first   error
	)
	// fail keeps the first error; the async publisher's handler calls it
	// from its own goroutine.
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A bucket write the server refuses is reported here, after the
	// publish returned: it fails the prefill.
	refused := func(_ jetstream.JetStream, m *nats.Msg, err error) {
		fail(fmt.Errorf("writing bucket key %s: %w", m.Subject, err))
		cancel()
	}
	kvjs, err := jetstream.New(js.Conn(), jetstream.WithPublishAsyncMaxPending(inFlight), jetstream.WithPublishAsyncErrHandler(refused))
	if err != nil {
		_ = w.Close(context.WithoutCancel(ctx))
		return PrefillResult{}, err
	}
	var wg sync.WaitGroup
	for range inFlight {
		wg.Go(func() {
			for ctx.Err() == nil {
				n := int(next.Add(1)) - 1
				if n >= o.Proposals {
					return
				}
				t := o.Trails[n%len(o.Trails)]
				pr := o.Gen.New(t.Path, n)
				r := newReplacer(t.ID, pr.ID, t.TargetKey, pr.TargetKey())
				seq, trailRecords, err := writeTrail(ctx, w, t, r)
				if err != nil {
					fail(fmt.Errorf("writing the audit trail of %s: %w", pr.ID, err))
					cancel()
					return
				}
				records.Add(int64(trailRecords))
				for k, m := range t.Bucket {
					msg := &nats.Msg{Subject: kvSubject + string(r.apply([]byte(m.Key))), Header: m.Header, Data: r.apply(m.Data)}
					if k == 0 {
						// The verdict names its verdict.decided record, as
						// gated's do: the record just written.
						if msg.Data, err = withAuditSeq(msg.Data, seq); err != nil {
							fail(fmt.Errorf("the verdict of %s: %w", pr.ID, err))
							cancel()
							return
						}
					}
					if _, err := kvjs.PublishMsgAsync(msg, jetstream.WithStallWait(time.Minute)); err != nil {
						fail(fmt.Errorf("writing bucket key %s: %w", msg.Subject, err))
						cancel()
						return
					}
					msgs.Add(1)
				}
				written.Add(1)
				if o.Done != nil {
					o.Done.Add(1)
				}
			}
		})
	}
	wg.Wait()
	select {
	case <-kvjs.PublishAsyncComplete():
	case <-ctx.Done():
	}
	if err := w.Close(context.WithoutCancel(ctx)); err != nil {
		fail(fmt.Errorf("closing the audit writer: %w", err))
	}
	if ctx.Err() != nil {
		fail(ctx.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	res.Proposals = int(written.Load())
	res.Records, res.BucketMsgs = int(records.Load()), int(msgs.Load())
	res.Seconds = time.Since(start).Seconds()
	return res, first
}

// withAuditSeq re-encodes a stored verdict with audit_seq set to seq, as
// gated encodes the verdicts it stores.
func withAuditSeq(data []byte, seq uint64) ([]byte, error) {
	var v gated.Verdict
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("decoding the captured verdict: %w", err)
	}
	v.AuditSeq = seq
	return v.JSON()
}

// writeTrail records t's events under r on a new trail of w and seals it,
// returning the stream sequence of the sealing record and how many
// records the trail took: one, and one more for what was recorded before
// a review started.
func writeTrail(ctx context.Context, w *audit.Writer, t *Trail, r replacer) (seq uint64, records int, err error) {
	trail := w.Trail()
	now := time.Now().UTC()
	for k, ev := range t.Events {
		ev.ProposalID = string(r.apply([]byte(ev.ProposalID)))
		ev.Data = r.apply(ev.Data)
		ev.At, ev.Instance = now, ""
		if k == len(t.Events)-1 {
			seq, err := trail.Seal(ctx, ev)
			return seq, records + 1, err
		}
		if err := trail.Record(ctx, ev); err != nil {
			return 0, 0, err
		}
		// gated stores what it recorded before a review starts, as a
		// record of its own.
		if ev.Event == gated.EventReviewStarted {
			if err := trail.Flush(ctx); err != nil {
				return 0, 0, err
			}
			records++
		}
	}
	return 0, 0, errors.New("no events to write")
}

// replacer swaps a captured proposal's id and target key for a new
// proposal's.
type replacer struct{ from, to [][]byte }

func newReplacer(fromID, toID, fromKey, toKey string) replacer {
	r := replacer{from: [][]byte{[]byte(fromID)}, to: [][]byte{[]byte(toID)}}
	if fromKey != "" {
		r.from, r.to = append(r.from, []byte(fromKey)), append(r.to, []byte(toKey))
	}
	return r
}

func (r replacer) apply(b []byte) []byte {
	for i := range r.from {
		b = bytes.ReplaceAll(b, r.from[i], r.to[i])
	}
	return b
}

// String describes the result in one line.
func (r PrefillResult) String() string {
	rate := 0.0
	if r.Seconds > 0 {
		rate = float64(r.Proposals) / r.Seconds
	}
	return fmt.Sprintf("%s proposals' histories (%s audit records, %s bucket messages) in %.1f s, %.0f proposals/s",
		Thousands(r.Proposals), Thousands(r.Records), Thousands(r.BucketMsgs), r.Seconds, rate)
}

// Thousands writes n with thousands separators: 1,000,000.
func Thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
