package audit

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/engine/wire"
)

// The verdict check walks the GATED_VERDICTS bucket beside the stream: a
// verdictMerge feeds each stored verdict to the checker in the order of
// the records they name.

// bucketItem is a value read from the bucket, decoded off the merge.
type bucketItem struct {
	key   string
	value []byte
	sv    storedVerdict
	// err is why the value is not the key's verdict; sv then has what
	// could be read of it.
	err error
}

// decode decodes the item's value and takes its quick print.
func (it *bucketItem) decode() {
	v, err := decodeBucketVerdict(it.key, it.value)
	if err != nil {
		tenant, id, _ := strings.Cut(it.key, ".")
		it.sv, it.err = storedVerdict{tenant: tenant, id: id}, err
		if v != nil {
			it.sv.seq = v.AuditSeq
		}
		it.value = nil
		return
	}
	it.sv = storedVerdict{tenant: v.Tenant, id: v.ProposalID, seq: v.AuditSeq, decidedAt: v.DecidedAt, v: v}
	it.sv.quick, it.sv.quickOK = quickPrintOf([]byte(v.Tenant), []byte(v.ProposalID), it.value, storedDropped)
	if v.Grant != "" {
		it.sv.gid, it.sv.gidOK = gidPrintOf([]byte(v.Tenant), []byte(v.ProposalID), it.value, storedDropped, "")
	}
	it.value = nil
}

// verdictMerge checks the stored verdicts against the stream while the
// stream is read: the bucket is read and decoded on goroutines of its
// own (readBucket), and advance, called with every record read in stream
// order, matches the stored verdicts whose records the read has reached.
type verdictMerge struct {
	c       *verdictChecker
	bucket  <-chan []bucketItem
	pending []bucketItem // the rest of the batch taken from bucket
	done    bool         // bucket closed
	errc    chan error   // the bucket reader's end
	// stop ends the bucket reader and waits for it.
	stop func()
	// waiting are the stored verdicts whose audit_seq the read has not
	// reached, by ascending audit_seq; recent the verdict records read.
	waiting svHeap
	recent  verdictRing
	through uint64
}

// startVerdictMerge opens the bucket and starts reading it; nil, nil when
// there is no bucket (rep gets a note).
func startVerdictMerge(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, opts VerifyOptions, mayExpire bool, rep *Report) (*verdictMerge, error) {
	kv, err := js.KeyValue(ctx, wire.VerdictBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		rep.Notes = append(rep.Notes, "there is no verdict bucket "+wire.VerdictBucket+": stored verdicts were not checked against the stream")
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s: %w", wire.VerdictBucket, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", Stream, err)
	}
	c := &verdictChecker{
		stream: stream, check: &VerdictCheck{}, max: opts.MaxVerdictProblems,
		maxAge: info.Config.MaxAge, mayExpire: mayExpire, now: time.Now(),
		first: info.State.FirstSeq, last: info.State.LastSeq,
		byPrint: make(map[verdictPrint][]int),
	}
	if c.max <= 0 {
		c.max = defaultMaxVerdictProblems
	}
	// The bucket's other keys have three tokens or more.
	filter := wire.VerdictKey("*", "*")
	if opts.Tenant != "" {
		filter = wire.VerdictKey(opts.Tenant, "*")
	}
	w, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("reading bucket %s: %w", wire.VerdictBucket, err)
	}
	rctx, cancel := context.WithCancel(ctx)
	out := make(chan []bucketItem, 4)
	exited := make(chan struct{})
	m := &verdictMerge{c: c, bucket: out, errc: make(chan error, 1)}
	m.stop = func() {
		cancel()
		<-exited
	}
	go func() {
		defer close(exited)
		defer func() { _ = w.Stop() }()
		m.errc <- readBucket(rctx, w, out)
	}()
	return m, nil
}

// readBucket reads every value the watch has when it begins, decodes
// them on every core, and sends them to out in the watch's order, in
// batches; it closes out when done.
func readBucket(ctx context.Context, w jetstream.KeyWatcher, out chan<- []bucketItem) error {
	defer close(out)
	const batch = 128
	return inOrder(ctx, 0, func(emit func([]bucketItem) error) error {
		items := make([]bucketItem, 0, batch)
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					return fmt.Errorf("reading bucket %s: the watch ended early", wire.VerdictBucket)
				}
				if e == nil { // every verdict stored when the watch began
					if len(items) > 0 {
						return emit(items)
					}
					return nil
				}
				items = append(items, bucketItem{key: e.Key(), value: e.Value()})
				if len(items) == batch {
					if err := emit(items); err != nil {
						return err
					}
					items = make([]bucketItem, 0, batch)
				}
			case <-ctx.Done():
				return fmt.Errorf("reading bucket %s: %w", wire.VerdictBucket, ctx.Err())
			}
		}
	}, func(_ int, items []bucketItem) {
		for i := range items {
			items[i].decode()
		}
	}, func(items []bucketItem) error {
		select {
		case out <- items:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("reading bucket %s: %w", wire.VerdictBucket, ctx.Err())
		}
	})
}

// next takes the next stored verdict from the bucket reader; ok is false
// once it has sent them all. It waits for one when wait is set.
func (m *verdictMerge) next(ctx context.Context, wait bool) (it bucketItem, ok bool, err error) {
	for len(m.pending) == 0 {
		if m.done {
			return it, false, nil
		}
		var (
			items []bucketItem
			open  bool
		)
		if wait {
			select {
			case items, open = <-m.bucket:
			case <-ctx.Done():
				return it, false, ctx.Err()
			}
		} else {
			select {
			case items, open = <-m.bucket:
			default:
				return it, false, nil
			}
		}
		if !open {
			m.done = true
			if err := <-m.errc; err != nil {
				return it, false, err
			}
			return it, false, nil
		}
		m.pending = items
	}
	it, m.pending = m.pending[0], m.pending[1:]
	return it, true, nil
}

// advance takes the record rc, read in stream order, and checks the
// stored verdicts whose records the read has now reached.
func (m *verdictMerge) advance(ctx context.Context, rc recordCheck) error {
	m.through = rc.seq
	if rc.invalid == "" && rc.verdict {
		m.recent.push(verdictRecord{seq: rc.seq, print: rc.print, printable: rc.printable, byGID: rc.byGID, full: rc.full, fullOK: rc.fullOK})
	}
	for len(m.waiting) > 0 && m.waiting[0].seq <= m.through {
		if err := m.resolve(ctx, heap.Pop(&m.waiting).(storedVerdict)); err != nil {
			return err
		}
	}
	// Take stored verdicts while there is room for them; wait for one
	// only when none is waiting: then the bucket is behind the stream.
	for len(m.waiting) < waitingVerdicts {
		it, ok, err := m.next(ctx, len(m.waiting) == 0)
		if err != nil || !ok {
			return err
		}
		if err := m.take(ctx, it); err != nil {
			return err
		}
	}
	return nil
}

// take checks a stored verdict now, when its record was read, or keeps
// it until the read reaches its audit_seq.
func (m *verdictMerge) take(ctx context.Context, it bucketItem) error {
	c := m.c
	c.check.Verdicts++
	if it.err != nil {
		c.problem(it.sv, ProblemModified, fmt.Sprintf("stored verdict %s: %v", it.key, it.err), false)
		return nil
	}
	if it.sv.seq <= m.through {
		return m.resolve(ctx, it.sv)
	}
	heap.Push(&m.waiting, it.sv)
	return nil
}

// resolve checks sv, whose audit_seq the read has reached.
func (m *verdictMerge) resolve(ctx context.Context, sv storedVerdict) error {
	c := m.c
	r, ok := m.recent.find(sv.seq)
	switch {
	case ok && r.printable && !r.byGID && sv.quickOK && r.print == sv.quick,
		ok && r.printable && r.byGID && sv.gidOK && r.print == sv.gid:
		c.check.Matched++
		return nil
	case ok && r.fullOK && sv.v != nil && r.full == sv.print():
		c.check.Matched++
		return nil
	case !ok && sv.seq > m.recent.evicted:
		// Every verdict record up to the read's end since then is in the
		// ring: sv's audit_seq holds none.
		return c.mismatch(ctx, sv)
	}
	// The bytes differ, or the record left the window: compare the
	// verdicts themselves, reading the record again.
	matched, err := c.matchAt(ctx, sv)
	if err != nil {
		return err
	}
	if matched {
		c.check.Matched++
		return nil
	}
	return c.mismatch(ctx, sv)
}

// finish checks the stored verdicts left once the stream is read: those
// whose audit_seq is past the read (decided while Verify ran, or naming
// a sequence the stream never had), then looks for the records of the
// problems listed elsewhere in the stream, and adds the check to rep.
func (m *verdictMerge) finish(ctx context.Context, q Query, rep *Report) error {
	defer m.stop()
	c := m.c
	var later []storedVerdict
	for len(m.waiting) > 0 {
		later = append(later, heap.Pop(&m.waiting).(storedVerdict))
	}
	if err := c.refresh(ctx); err != nil {
		return err
	}
	for _, sv := range later {
		if err := m.laterVerdict(ctx, sv); err != nil {
			return err
		}
	}
	for {
		it, ok, err := m.next(ctx, true)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		c.check.Verdicts++
		switch {
		case it.err != nil:
			c.problem(it.sv, ProblemModified, fmt.Sprintf("stored verdict %s: %v", it.key, it.err), false)
		case it.sv.seq <= m.through:
			if err := m.resolve(ctx, it.sv); err != nil {
				return err
			}
		default:
			if err := m.laterVerdict(ctx, it.sv); err != nil {
				return err
			}
		}
	}
	if err := c.findElsewhere(ctx, q, m.through); err != nil {
		return err
	}
	rep.Problems = append(rep.Problems, c.problems...)
	rep.Verdicts = c.check
	return nil
}

// laterVerdict checks a stored verdict whose audit_seq is past the read.
func (m *verdictMerge) laterVerdict(ctx context.Context, sv storedVerdict) error {
	c := m.c
	c.later++
	if sv.seq <= c.last {
		ok, err := c.matchAt(ctx, sv)
		if err != nil {
			return err
		}
		if ok {
			c.check.Matched++
			return nil
		}
	}
	return c.mismatch(ctx, sv)
}

// svHeap orders stored verdicts by audit_seq (container/heap).
type svHeap []storedVerdict

func (h svHeap) Len() int           { return len(h) }
func (h svHeap) Less(i, j int) bool { return h[i].seq < h[j].seq }
func (h svHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }

// Push adds x, a storedVerdict.
func (h *svHeap) Push(x any) { *h = append(*h, x.(storedVerdict)) }

// Pop removes the last element.
func (h *svHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = storedVerdict{}
	*h = old[:len(old)-1]
	return x
}
