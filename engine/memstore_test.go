package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// memStore is an in-memory VerdictStore. It keeps verdicts as JSON, as the
// KV bucket does, so a caller can never alias a stored verdict.
type memStore struct {
	mu      sync.Mutex
	m       map[string][]byte
	creates int
	// hideOnGet makes Get miss, as when another gated stores the verdict
	// between this one's Get and Create.
	hideOnGet bool
	getErr    error
	createErr error
	claimErr  error

	// claims are the review claims by proposal key; claimed counts the
	// claims taken, released the claims released by their holder.
	claims   map[string]engine.Claim
	claimed  int
	released int
	// waiting is closed, and replaced, whenever a verdict is created, for
	// Await; awaiting is signalled (without blocking) when Await begins.
	waiting  chan struct{}
	awaiting chan string
	// runs are the run records by "<tenant>.<run id>", as JSON.
	runs map[string][]byte
	// targets are the target histories by "<tenant>.<target key>", each
	// at its revision; rev is the last revision handed out.
	targets map[string]engine.History
	rev     uint64
	// joins counts the approvals that joined a target's history.
	joins int
	// beforeJoin, when set, runs at the start of every Join, outside the
	// lock: a test holds joins back with it.
	beforeJoin func(v *gated.Verdict)
}

func newMemStore() *memStore {
	return &memStore{m: map[string][]byte{}, claims: map[string]engine.Claim{}, waiting: make(chan struct{}), runs: map[string][]byte{}, targets: map[string]engine.History{}}
}

func (s *memStore) RunRecord(_ context.Context, tenant, runID string) (*gated.RunRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	raw, ok := s.runs[tenant+"."+runID]
	if !ok {
		return nil, nil
	}
	var rec gated.RunRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

// recordRun keeps the run record as the bus store does; s.mu is held.
func (s *memStore) recordRun(v *gated.Verdict) {
	if !gated.Records(v) {
		return
	}
	key := v.Tenant + "." + v.Run.RunID
	var rec gated.RunRecord
	if raw, ok := s.runs[key]; ok {
		_ = json.Unmarshal(raw, &rec)
	}
	if rec.Add(v) {
		s.runs[key], _ = json.Marshal(&rec)
	}
}

func (s *memStore) Replace(_ context.Context, prev, next *gated.Verdict) (*gated.Verdict, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := next.Tenant + "." + next.ProposalID
	raw, ok := s.m[key]
	if !ok {
		return nil, fmt.Errorf("key %s: %w", key, gated.ErrNotFound)
	}
	stored, err := decodeVerdict(raw)
	if err != nil {
		return nil, err
	}
	if stored.AuditSeq != prev.AuditSeq {
		return stored, fmt.Errorf("key %s: %w", key, gated.ErrExists)
	}
	if s.m[key], err = json.Marshal(next); err != nil {
		return nil, err
	}
	s.recordRun(next)
	return next, nil
}

func (s *memStore) Get(_ context.Context, tenant, id string) (*gated.Verdict, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.getErr != nil {
		return nil, s.getErr
	}
	raw, ok := s.m[tenant+"."+id]
	if !ok || s.hideOnGet {
		return nil, fmt.Errorf("key %s.%s: %w", tenant, id, gated.ErrNotFound)
	}
	return decodeVerdict(raw)
}

func (s *memStore) Create(_ context.Context, v *gated.Verdict) (*gated.Verdict, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.createErr != nil {
		return nil, s.createErr
	}
	key := v.Tenant + "." + v.ProposalID
	if raw, ok := s.m[key]; ok {
		stored, err := decodeVerdict(raw)
		if err != nil {
			return nil, err
		}
		return stored, fmt.Errorf("key %s: %w", key, gated.ErrExists)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	s.m[key] = raw
	s.recordRun(v)
	s.creates++
	close(s.waiting)
	s.waiting = make(chan struct{})
	return v, nil
}

func (s *memStore) Claim(_ context.Context, tenant, id string, c engine.Claim) (engine.Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claimErr != nil {
		return engine.Claim{}, s.claimErr
	}
	key := tenant + "." + id
	held, ok := s.claims[key]
	if ok && !c.Supersedes(held) && time.Now().Before(held.Until) {
		return held, fmt.Errorf("key %s: %w", key, gated.ErrClaimed)
	}
	c.Replaced = ok
	s.claims[key] = c
	s.claimed++
	return c, nil
}

func (s *memStore) Release(_ context.Context, tenant, id string, c engine.Claim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := tenant + "." + id
	if held, ok := s.claims[key]; ok && held.Holder == c.Holder {
		delete(s.claims, key)
		s.released++
	}
	return nil
}

func (s *memStore) Await(ctx context.Context, tenant, id string) (*gated.Verdict, error) {
	if s.awaiting != nil {
		select {
		case s.awaiting <- tenant + "." + id:
		default:
		}
	}
	for {
		s.mu.Lock()
		raw, ok := s.m[tenant+"."+id]
		waiting := s.waiting
		s.mu.Unlock()
		if ok {
			return decodeVerdict(raw)
		}
		select {
		case <-waiting:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// claim returns the review claim held on tenant and id.
func (s *memStore) claim(tenant, id string) (engine.Claim, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.claims[tenant+"."+id]
	return c, ok
}

func (s *memStore) Recent(_ context.Context, tenant, targetKey string) (engine.History, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.targets[tenant+"."+targetKey]
	return engine.History{Verdicts: slices.Clone(h.Verdicts), Revision: h.Revision}, nil
}

// Join keeps the target's history as the bus store does: by
// compare-and-set on its revision, an entry of the same proposal replaced.
func (s *memStore) Join(_ context.Context, v *gated.Verdict, h engine.History) (engine.History, error) {
	if s.beforeJoin != nil {
		s.beforeJoin(v)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := v.Tenant + "." + v.TargetKey
	now := s.targets[key]
	if now.Revision != h.Revision {
		return engine.History{Verdicts: slices.Clone(now.Verdicts), Revision: now.Revision},
			fmt.Errorf("key %s: %w", key, engine.ErrTargetChanged)
	}
	var kept []gated.Verdict
	for _, o := range now.Verdicts {
		if o.ProposalID != v.ProposalID {
			kept = append(kept, o)
		}
	}
	s.rev++
	s.joins++
	s.targets[key] = engine.History{Verdicts: append(kept, *v), Revision: s.rev}
	return engine.History{Verdicts: slices.Clone(s.targets[key].Verdicts), Revision: s.rev}, nil
}

func (s *memStore) stored(t *testing.T, tenant, id string) *gated.Verdict {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	raw, ok := s.m[tenant+"."+id]
	if !ok {
		return nil
	}
	v, err := decodeVerdict(raw)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (s *memStore) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func decodeVerdict(raw []byte) (*gated.Verdict, error) {
	var v gated.Verdict
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// auditStream hands out stream sequence numbers to every trail, as the
// GATED_AUDIT stream does.
type auditStream struct{ seq atomic.Uint64 }

func newAuditStream() *auditStream {
	s := &auditStream{}
	s.seq.Store(1000)
	return s
}

func (s *auditStream) trail() *memTrail { return &memTrail{stream: s} }

// memTrail records events in a slice. Record fails with recordErr and Seal
// with sealErr; a trail that lost an event refuses to seal, as the
// AuditTrail contract asks.
type memTrail struct {
	stream    *auditStream
	recordErr error
	sealErr   error

	mu        sync.Mutex
	events    []gated.AuditEvent
	lost      bool
	sealed    int
	sealSeq   uint64
	afterSeal []string
	// flushes are the number of events recorded at each Flush.
	flushes []int
	// delivery is the delivery count its events carry; 0 stands for 1.
	delivery int
}

func (tr *memTrail) Flush(context.Context) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.lost {
		return errors.New("audit trail lost an event")
	}
	tr.flushes = append(tr.flushes, len(tr.events))
	return nil
}

func (tr *memTrail) Record(_ context.Context, ev gated.AuditEvent) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.sealed > 0 {
		tr.afterSeal = append(tr.afterSeal, ev.Event)
	}
	if tr.recordErr != nil {
		tr.lost = true
		return tr.recordErr
	}
	tr.events = append(tr.events, ev)
	tr.stream.seq.Add(1)
	return nil
}

func (tr *memTrail) Seal(_ context.Context, ev gated.AuditEvent) (uint64, error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.sealErr != nil {
		return 0, tr.sealErr
	}
	if tr.lost {
		return 0, errors.New("audit trail lost an event")
	}
	tr.events = append(tr.events, ev)
	tr.sealed++
	tr.sealSeq = tr.stream.seq.Add(1)
	return tr.sealSeq, nil
}

func (tr *memTrail) names() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var names []string
	for _, ev := range tr.events {
		names = append(names, ev.Event)
	}
	return names
}

func (tr *memTrail) all() []gated.AuditEvent {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.events)
}
