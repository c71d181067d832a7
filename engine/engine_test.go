package engine_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/policies"
)

const testSubject = "gated.proposals.acme.host_restart_service"

var requiredGates = []string{"sop_covers", "no_parallel_operation", "rollback_known"}

// testClock stands still until the test moves it.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) set(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}

var compileDefaultPolicy = sync.OnceValues(func() (*policies.Evaluator, error) {
	b, err := policies.Default()
	if err != nil {
		return nil, err
	}
	return policies.Compile(context.Background(), b)
})

func defaultPolicy(t testing.TB) *policies.Evaluator {
	t.Helper()
	ev, err := compileDefaultPolicy()
	if err != nil {
		t.Fatalf("compiling the default policy: %v", err)
	}
	return ev
}

func reviewerPersona() *engine.Persona {
	return &engine.Persona{
		Name: "reviewer", PermissionMode: "read-only", Plugin: "sop",
		Tools:         []string{"get_sop_text", "get_verdict_history", "get_proposal"},
		RequiredGates: slices.Clone(requiredGates),
	}
}

type personaSet map[string]*engine.Persona

func (s personaSet) Persona(name string) (*engine.Persona, bool) {
	p, ok := s[name]
	return p, ok
}

// listedPersonas is a personaSet that can also list its names, as the
// personas registry does.
type listedPersonas personaSet

func (s listedPersonas) Persona(name string) (*engine.Persona, bool) {
	return personaSet(s).Persona(name)
}

func (s listedPersonas) Names() []string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	return names // unsorted on purpose: the engine must order them
}

var _ engine.PersonaLister = listedPersonas{}

// fakeRouter routes every persona to one reviewer, or fails with err, or
// with errFor[persona] for one persona.
type fakeRouter struct {
	reviewer engine.Reviewer
	err      error
	errFor   map[string]error
	// byPersona routes the named personas to reviewers of their own.
	byPersona map[string]engine.Reviewer
	mu        sync.Mutex
	routed    []string
}

func (r *fakeRouter) Route(p *engine.Persona) (engine.Reviewer, error) {
	r.mu.Lock()
	r.routed = append(r.routed, p.Name)
	r.mu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	if err := r.errFor[p.Name]; err != nil {
		return nil, err
	}
	if rv, ok := r.byPersona[p.Name]; ok {
		return rv, nil
	}
	return r.reviewer, nil
}

func (r *fakeRouter) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.routed)
}

type answerFunc func(ctx context.Context, req engine.ReviewRequest) (engine.ReviewResult, error)

// fakeReviewer answers with answer and remembers every request.
type fakeReviewer struct {
	answer answerFunc
	mu     sync.Mutex
	reqs   []engine.ReviewRequest
}

func (r *fakeReviewer) Review(ctx context.Context, req engine.ReviewRequest) (engine.ReviewResult, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.answer(ctx, req)
}

func (r *fakeReviewer) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reqs)
}

func (r *fakeReviewer) requests() []engine.ReviewRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

// approval is a well-formed approval that passes every required gate.
func approval() engine.ReviewResult {
	return engine.ReviewResult{
		Plugin: "sop", PluginVersion: "1.2.3", PID: 4242,
		Text: "Decision: approve\nGates:\n- sop_covers: pass — SOP-001\n- no_parallel_operation: pass — no recent verdicts\n" +
			"- rollback_known: pass — restart the previous unit\nNotes: safe to restart.",
		Decision: engine.DecisionApprove,
		Gates: []engine.GateResult{
			{Name: "sop_covers", Passed: true, Detail: "SOP-001"},
			{Name: "no_parallel_operation", Passed: true},
			{Name: "rollback_known", Passed: true},
		},
		SOPID: "SOP-001", RollbackPath: "restart the previous unit", Turns: 1,
	}
}

func answer(res engine.ReviewResult, err error) answerFunc {
	return func(context.Context, engine.ReviewRequest) (engine.ReviewResult, error) { return res, err }
}

func approvalWith(edit func(*engine.ReviewResult)) answerFunc {
	res := approval()
	edit(&res)
	return answer(res, nil)
}

// blockUntilDone waits for the review's context and reports its error. If
// the context never ends within limit it returns a plain error, so that a
// missing deadline fails the test instead of hanging it.
func blockUntilDone(limit time.Duration) answerFunc {
	return func(ctx context.Context, _ engine.ReviewRequest) (engine.ReviewResult, error) {
		select {
		case <-ctx.Done():
			return engine.ReviewResult{}, ctx.Err()
		case <-time.After(limit):
			return engine.ReviewResult{}, errors.New("test reviewer: the review context never ended")
		}
	}
}

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
}

func newMemStore() *memStore {
	return &memStore{m: map[string][]byte{}, claims: map[string]engine.Claim{}, waiting: make(chan struct{}), runs: map[string][]byte{}}
}

func (s *memStore) RunRecord(_ context.Context, tenant, runID string) (*engine.RunRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	raw, ok := s.runs[tenant+"."+runID]
	if !ok {
		return nil, nil
	}
	var rec engine.RunRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

// recordRun keeps the run record as the bus store does; s.mu is held.
func (s *memStore) recordRun(v *engine.Verdict) {
	if !engine.Records(v) {
		return
	}
	key := v.Tenant + "." + v.Run.RunID
	var rec engine.RunRecord
	if raw, ok := s.runs[key]; ok {
		_ = json.Unmarshal(raw, &rec)
	}
	if rec.Add(v) {
		s.runs[key], _ = json.Marshal(&rec)
	}
}

func (s *memStore) Replace(_ context.Context, prev, next *engine.Verdict) (*engine.Verdict, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := next.Tenant + "." + next.ProposalID
	raw, ok := s.m[key]
	if !ok {
		return nil, fmt.Errorf("key %s: %w", key, engine.ErrNotFound)
	}
	stored, err := decodeVerdict(raw)
	if err != nil {
		return nil, err
	}
	if stored.AuditSeq != prev.AuditSeq {
		return stored, fmt.Errorf("key %s: %w", key, engine.ErrExists)
	}
	if s.m[key], err = json.Marshal(next); err != nil {
		return nil, err
	}
	s.recordRun(next)
	return next, nil
}

func (s *memStore) Get(_ context.Context, tenant, id string) (*engine.Verdict, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.getErr != nil {
		return nil, s.getErr
	}
	raw, ok := s.m[tenant+"."+id]
	if !ok || s.hideOnGet {
		return nil, fmt.Errorf("key %s.%s: %w", tenant, id, engine.ErrNotFound)
	}
	return decodeVerdict(raw)
}

func (s *memStore) Create(_ context.Context, v *engine.Verdict) (*engine.Verdict, error) {
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
		return stored, fmt.Errorf("key %s: %w", key, engine.ErrExists)
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
	if held, ok := s.claims[key]; ok && !c.Supersedes(held) && time.Now().Before(held.Until) {
		return held, fmt.Errorf("key %s: %w", key, engine.ErrClaimed)
	}
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

func (s *memStore) Await(ctx context.Context, tenant, id string) (*engine.Verdict, error) {
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

func (s *memStore) Recent(_ context.Context, tenant, targetKey string) ([]engine.Verdict, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []engine.Verdict
	for _, raw := range s.m {
		v, err := decodeVerdict(raw)
		if err != nil {
			return nil, err
		}
		if v.Tenant == tenant && v.TargetKey == targetKey && v.Approved {
			out = append(out, *v)
		}
	}
	return out, nil
}

func (s *memStore) stored(t *testing.T, tenant, id string) *engine.Verdict {
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

func decodeVerdict(raw []byte) (*engine.Verdict, error) {
	var v engine.Verdict
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
	events    []engine.AuditEvent
	lost      bool
	sealed    int
	sealSeq   uint64
	afterSeal []string
}

func (tr *memTrail) Record(_ context.Context, ev engine.AuditEvent) error {
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

func (tr *memTrail) Seal(_ context.Context, ev engine.AuditEvent) (uint64, error) {
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

func (tr *memTrail) all() []engine.AuditEvent {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.events)
}

// stubPolicy answers every evaluation with the same decision.
type stubPolicy struct {
	d   engine.PolicyDecision
	err error
}

func (p stubPolicy) Revision() string { return p.d.Revision }

func (p stubPolicy) Evaluate(context.Context, engine.PolicyInput) (engine.PolicyDecision, error) {
	return p.d, p.err
}

type harness struct {
	now      time.Time
	clock    *testClock
	cfg      engine.Config
	store    *memStore
	router   *fakeRouter
	reviewer *fakeReviewer
	stream   *auditStream
	eng      *engine.Engine
}

// newHarness builds an engine on the real default policy, the reviewer
// persona, an approving reviewer, an in-memory store and a fixed clock.
// Options edit the harness before the engine is built.
func newHarness(t *testing.T, opts ...func(*harness)) *harness {
	t.Helper()
	h := &harness{
		// The clock is fixed at the time the harness is built. The engine
		// derives review deadlines from it (see
		// TestDecideReviewDeadlineIsWallClock), so a fixed time far from
		// the wall clock would turn every review into a timeout.
		now:      time.Now().UTC().Truncate(time.Millisecond),
		store:    newMemStore(),
		reviewer: &fakeReviewer{answer: answer(approval(), nil)},
		stream:   newAuditStream(),
	}
	h.router = &fakeRouter{reviewer: h.reviewer}
	h.cfg = engine.Config{
		Policy:   defaultPolicy(t),
		Personas: personaSet{"reviewer": reviewerPersona()},
		Router:   h.router,
		Store:    h.store,
	}
	for _, opt := range opts {
		opt(h)
	}
	h.clock = &testClock{now: h.now}
	h.cfg.Clock = h.clock
	eng, err := engine.New(h.cfg)
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	h.eng = eng
	return h
}

// advance moves the engine's clock, and the time checkFresh expects, by d.
func (h *harness) advance(d time.Duration) {
	h.now = h.now.Add(d)
	h.clock.set(h.now)
}

func (h *harness) decideOn(ctx context.Context, tr *memTrail, subject string, data []byte, msgID string) (*engine.Verdict, error) {
	return h.eng.Decide(ctx, engine.Delivery{Subject: subject, Data: data, MsgID: msgID, Attempt: 1, Trail: tr})
}

// mustDecide decides one delivery on a fresh trail and checks the
// invariants every freshly decided verdict must hold.
func (h *harness) mustDecide(t *testing.T, subject string, data []byte, msgID string) (*engine.Verdict, *memTrail) {
	t.Helper()
	tr := h.stream.trail()
	v, err := h.decideOn(t.Context(), tr, subject, data, msgID)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	h.checkFresh(t, v, tr, data)
	return v, tr
}

// checkFresh checks a verdict decided on trail tr (not replayed).
func (h *harness) checkFresh(t *testing.T, v *engine.Verdict, tr *memTrail, data []byte) {
	t.Helper()
	if v == nil {
		t.Fatal("Decide returned a nil verdict and no error")
	}
	if v.V != 1 {
		t.Errorf("verdict v = %d, want 1", v.V)
	}
	if v.Approved != (v.Outcome == engine.OutcomeApproved) {
		t.Errorf("approved = %v with outcome %q", v.Approved, v.Outcome)
	}
	if strings.TrimSpace(v.Reason) == "" {
		t.Error("verdict has no reason")
	}
	if !v.DecidedAt.Equal(h.now) {
		t.Errorf("decided_at = %v, want the clock's %v", v.DecidedAt, h.now)
	}
	sum := sha256.Sum256(data)
	if want := hex.EncodeToString(sum[:]); v.ProposalSHA256 != want {
		t.Errorf("proposal_sha256 = %q, want %q", v.ProposalSHA256, want)
	}

	tr.mu.Lock()
	sealed, sealSeq, afterSeal := tr.sealed, tr.sealSeq, tr.afterSeal
	tr.mu.Unlock()
	if sealed != 1 {
		t.Fatalf("trail sealed %d times, want once", sealed)
	}
	if len(afterSeal) > 0 {
		t.Errorf("events recorded after the seal: %v", afterSeal)
	}
	if v.AuditSeq != sealSeq {
		t.Errorf("audit_seq = %d, want %d, the sequence Seal returned", v.AuditSeq, sealSeq)
	}
	// The engine encodes a verdict once; what the store and the wire get
	// is byte for byte what encoding the verdict now gives.
	enc, err := v.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := json.Marshal(v); !bytes.Equal(enc, want) {
		t.Errorf("verdict JSON\n%s\nwant\n%s", enc, want)
	}
	if again, _ := v.JSON(); &again[0] != &enc[0] {
		t.Error("JSON encoded the decided verdict anew instead of returning the engine's encoding")
	}
	events := tr.all()
	last := events[len(events)-1]
	if last.Event != engine.EventVerdict {
		t.Fatalf("trail sealed with %q, want %q", last.Event, engine.EventVerdict)
	}
	var sealedVerdict engine.Verdict
	if err := json.Unmarshal(last.Data, &sealedVerdict); err != nil {
		t.Fatalf("verdict event data: %v", err)
	}
	if sealedVerdict.Outcome != v.Outcome || sealedVerdict.ProposalID != v.ProposalID || sealedVerdict.Reason != v.Reason {
		t.Errorf("sealed verdict event %+v does not match the returned verdict %+v", sealedVerdict, v)
	}
	wantTenant := v.Tenant
	if wantTenant == "" {
		wantTenant = engine.UnknownTenant
	}
	for _, ev := range events {
		common := commonData(t, ev)
		if ev.Tenant != wantTenant || ev.ProposalID != v.ProposalID || common.Delivery != 1 || ev.V != 1 || !ev.At.Equal(h.now) {
			t.Errorf("event %s: tenant %q, proposal %q, delivery %d, v %d, at %v; want tenant %q, proposal %q, delivery 1, v 1, at %v",
				ev.Event, ev.Tenant, ev.ProposalID, common.Delivery, ev.V, ev.At, wantTenant, v.ProposalID, h.now)
		}
		if ev.Event != engine.EventVerdict && common.Action != v.Action {
			t.Errorf("event %s has action %q in its data, want %q", ev.Event, common.Action, v.Action)
		}
	}
}

// commonData reads the members every proposal event carries in its data;
// the data must be one JSON object without repeated keys.
func commonData(t *testing.T, ev engine.AuditEvent) (c struct {
	Action       string `json:"action"`
	Delivery     int    `json:"delivery"`
	PolicyEvalUS int64  `json:"policy_eval_us"`
}) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(ev.Data))
	keys := map[string]bool{}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("event %s: data %s is not a JSON object", ev.Event, ev.Data)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("event %s: data %s: %v", ev.Event, ev.Data, err)
		}
		key := tok.(string)
		if keys[key] {
			t.Errorf("event %s: data repeats the key %q: %s", ev.Event, key, ev.Data)
		}
		keys[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatalf("event %s: data %s: %v", ev.Event, ev.Data, err)
		}
	}
	if err := json.Unmarshal(ev.Data, &c); err != nil {
		t.Fatalf("event %s: data: %v", ev.Event, err)
	}
	return c
}

func sameVerdict(t *testing.T, got, want *engine.Verdict) {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if string(g) != string(w) {
		t.Errorf("verdicts differ:\n got %s\nwant %s", g, w)
	}
}

// proposalJSON is a write proposal of tenant acme, id p1 with fields
// replaced by override; a nil value removes the field.
func proposalJSON(t testing.TB, override map[string]any) []byte {
	t.Helper()
	m := map[string]any{
		"v": 1, "id": "p1", "tenant": "acme", "action": "host_restart_service",
		"class": "write", "blast_radius": "single_device",
		"target":       map[string]any{"device_id": 7, "service": "nginx", "tags": []string{"production"}},
		"reason":       "nginx on web-7 stopped answering health checks",
		"operator":     map[string]any{"id": "u-1042", "roles": []string{"sre"}},
		"requested_by": map[string]any{"agent": "fleet-ops-3", "session": "s-1"},
	}
	for k, v := range override {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestDecide(t *testing.T) {
	writer := &engine.Persona{Name: "writer", PermissionMode: "acceptEdits", Plugin: "sop", Tools: []string{"get_proposal"}}
	var (
		received = engine.EventReceived
		invalid  = engine.EventInvalid
		policy   = engine.EventPolicyDecided
		started  = engine.EventReviewStarted
		finished = engine.EventReviewDone
		decided  = engine.EventVerdict
	)
	reviewed := []string{received, policy, started, finished, decided}

	tests := []struct {
		note     string
		subject  string         // default testSubject
		override map[string]any // edits the default proposal
		data     []byte         // replaces the proposal entirely
		msgID    string
		reviewer answerFunc // default: a full approval
		routeErr error
		timeout  time.Duration

		wantOutcome      engine.Outcome
		wantStage        engine.Stage
		noAddress        bool   // the verdict has no tenant and id
		wantTenant       string // default acme
		wantReviews      int    // calls to the reviewer
		wantEvents       []string
		wantReason       []string // substrings of the verdict's reason
		wantDenies       []string
		wantDecision     engine.ReviewDecision // of the single review, when set
		wantMissingGates []string
	}{
		{
			note:        "invalid proposal",
			override:    map[string]any{"class": nil},
			wantOutcome: engine.OutcomeInvalid, wantStage: engine.StageValidation,
			wantEvents: []string{received, invalid, decided},
			wantReason: []string{"class"},
		},
		{
			note:        "payload unreadable, id from Nats-Msg-Id",
			data:        []byte(`{"v": 1, "id": `),
			msgID:       "acme.p1",
			wantOutcome: engine.OutcomeInvalid, wantStage: engine.StageValidation,
			wantEvents: []string{received, invalid, decided},
		},
		{
			note:        "subject with a bad tenant token",
			subject:     "gated.proposals.ACME.host_restart_service",
			msgID:       "ACME.p1",
			wantOutcome: engine.OutcomeInvalid, wantStage: engine.StageValidation, noAddress: true,
			wantEvents: []string{received, invalid, decided},
			wantReason: []string{"subject"},
		},
		{
			note:        "payload tenant differs from the subject's",
			subject:     "gated.proposals.globex.host_restart_service",
			wantTenant:  "globex", // the subject's tenant is authoritative
			wantOutcome: engine.OutcomeInvalid, wantStage: engine.StageValidation,
			wantEvents: []string{received, invalid, decided},
			wantReason: []string{"tenant"},
		},
		{
			// Go's encoding/json matches keys case-insensitively and keeps the
			// last; a case-sensitive executor keeps "destructive".
			note: "case variant of class cannot turn a destructive proposal into a read",
			data: []byte(`{"v": 1, "id": "p1", "tenant": "acme", "action": "host_restart_service", ` +
				`"class": "destructive", "blast_radius": "tenant_wide", "CLASS": "read"}`),
			wantOutcome: engine.OutcomeInvalid, wantStage: engine.StageValidation,
			wantEvents: []string{received, invalid, decided},
		},
		{
			note:        "read needs no review",
			override:    map[string]any{"class": "read", "blast_radius": nil, "action": "host_list_services"},
			subject:     "gated.proposals.acme.host_list_services",
			wantOutcome: engine.OutcomeApproved, wantStage: engine.StagePolicy,
			wantEvents: []string{received, policy, decided},
		},
		{
			note: "skip_review refused even for an admin",
			override: map[string]any{
				"operator": map[string]any{"id": "root", "roles": []string{"admin"}},
				"flags":    map[string]any{"skip_review": true},
			},
			wantOutcome: engine.OutcomeRejected, wantStage: engine.StagePolicy,
			wantEvents: []string{received, policy, decided},
			wantDenies: []string{"no_skip_review"},
			wantReason: []string{"no_skip_review"},
		},
		{
			note:        "force_approve refused",
			override:    map[string]any{"flags": map[string]any{"force_approve": true}},
			wantOutcome: engine.OutcomeRejected, wantStage: engine.StagePolicy,
			wantEvents: []string{received, policy, decided},
			wantDenies: []string{"unsupported_force_approve"},
		},
		{
			note:        "persona that is not read-only cannot review",
			override:    map[string]any{"reviewer": "writer"},
			wantOutcome: engine.OutcomeRejected, wantStage: engine.StagePolicy,
			wantEvents: []string{received, policy, decided},
			wantDenies: []string{"reviewer_tool_denied"},
		},
		{
			note:        "write approved with all three gates",
			wantOutcome: engine.OutcomeApproved, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: engine.DecisionApprove,
		},
		{
			note:        "destructive approved with all three gates",
			override:    map[string]any{"class": "destructive", "blast_radius": "cluster"},
			wantOutcome: engine.OutcomeApproved, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: engine.DecisionApprove,
		},
		{
			note:        "text approves, structured decision rejects",
			reviewer:    approvalWith(func(r *engine.ReviewResult) { r.Decision = engine.DecisionReject }),
			wantOutcome: engine.OutcomeRejected, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: engine.DecisionReject,
		},
		{
			note:        "structured decision approves, text rejects",
			reviewer:    approvalWith(func(r *engine.ReviewResult) { r.Text = "Decision: reject\nNotes: no rollback." }),
			wantOutcome: engine.OutcomeRejected, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: engine.DecisionReject,
		},
		{
			note:        "structured decision empty",
			reviewer:    approvalWith(func(r *engine.ReviewResult) { r.Decision = "" }),
			wantOutcome: engine.OutcomeRejected, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: engine.DecisionReject,
		},
		{
			note: "approval missing a required gate",
			reviewer: approvalWith(func(r *engine.ReviewResult) {
				r.Gates = []engine.GateResult{{Name: "sop_covers", Passed: true}, {Name: "rollback_known", Passed: true}}
			}),
			wantOutcome: engine.OutcomeRejected, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: engine.DecisionReject,
			wantMissingGates: []string{"no_parallel_operation"},
			wantReason:       []string{"no_parallel_operation"},
		},
		{
			note: "approval with a failed gate",
			reviewer: approvalWith(func(r *engine.ReviewResult) {
				r.Gates[2].Passed = false
			}),
			wantOutcome: engine.OutcomeRejected, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: engine.DecisionReject,
			wantMissingGates: []string{"rollback_known"},
			wantReason:       []string{"rollback_known"},
		},
		{
			note:        "approval without gates",
			reviewer:    approvalWith(func(r *engine.ReviewResult) { r.Gates = nil }),
			wantOutcome: engine.OutcomeRejected, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: engine.DecisionReject,
			wantMissingGates: requiredGates,
		},
		{
			note: "approval reporting a gate both failed and passed",
			reviewer: approvalWith(func(r *engine.ReviewResult) {
				r.Gates = append([]engine.GateResult{{Name: "no_parallel_operation", Passed: false, Detail: "web-7 restarted 2 min ago"}}, r.Gates...)
			}),
			wantOutcome: engine.OutcomeRejected, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: engine.DecisionReject,
			wantMissingGates: []string{"no_parallel_operation"},
		},
		{
			note:        "approve with caveats",
			reviewer:    approvalWith(func(r *engine.ReviewResult) { r.Text = "Decision: approve with caveats\nNotes: watch it." }),
			wantOutcome: engine.OutcomeRejected, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: engine.DecisionReject,
		},
		{
			note: "approval whose text fails every gate the structured report passes",
			reviewer: approvalWith(func(r *engine.ReviewResult) {
				r.Text = "Decision: approve\nGates:\n- sop_covers: fail\n- no_parallel_operation: fail\n- rollback_known: fail\nNotes: safe to restart."
			}),
			wantOutcome: engine.OutcomeRejected, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: engine.DecisionReject,
			wantReason: []string{"sop_covers", "disagree"},
		},
		{
			note: "approval taken back by a later decision line",
			reviewer: approvalWith(func(r *engine.ReviewResult) {
				r.Text += "\nDecision: reject"
				r.Notes = "Safe to restart."
			}),
			wantOutcome: engine.OutcomeRejected, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: engine.DecisionReject,
			wantReason: []string{`"Decision: reject"`, "disagrees"},
		},
		{
			note:        "empty reviewer text",
			reviewer:    approvalWith(func(r *engine.ReviewResult) { r.Text = "" }),
			wantOutcome: engine.OutcomeRejected, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed, wantDecision: engine.DecisionReject,
		},
		{
			note:        "reviewer error",
			reviewer:    answer(engine.ReviewResult{}, errors.New("plugin sop exited: signal: killed")),
			wantOutcome: engine.OutcomeError, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed,
			wantReason: []string{"signal: killed"},
		},
		{
			note:        "reviewer error carrying an approval",
			reviewer:    answer(approval(), errors.New("stream broken after the answer")),
			wantOutcome: engine.OutcomeError, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed,
		},
		{
			note:        "reviewer refuses work",
			reviewer:    answer(engine.ReviewResult{}, fmt.Errorf("plugin sop: circuit open: %w", engine.ErrNoReviewer)),
			wantOutcome: engine.OutcomeBlocked, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed,
		},
		{
			note:        "review passes its deadline",
			reviewer:    blockUntilDone(5 * time.Second),
			timeout:     50 * time.Millisecond,
			wantOutcome: engine.OutcomeTimeout, wantStage: engine.StageReview,
			wantReviews: 1, wantEvents: reviewed,
		},
		{
			note:        "no reviewer for the persona",
			routeErr:    fmt.Errorf("plugin sop is not running: %w", engine.ErrNoReviewer),
			wantOutcome: engine.OutcomeBlocked, wantStage: engine.StageReview,
			wantEvents: []string{received, policy, decided},
		},
		{
			note:        "unknown persona named by the proposal",
			override:    map[string]any{"reviewer": "ghost"},
			wantOutcome: engine.OutcomeBlocked, wantStage: engine.StageReview,
			wantEvents: []string{received, policy, decided},
			wantReason: []string{"ghost"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			h := newHarness(t, func(h *harness) {
				h.cfg.Personas = personaSet{"reviewer": reviewerPersona(), "writer": writer}
				if tc.reviewer != nil {
					h.reviewer.answer = tc.reviewer
				}
				h.router.err = tc.routeErr
				h.cfg.ReviewTimeout = tc.timeout
			})
			subject := tc.subject
			if subject == "" {
				subject = testSubject
			}
			data := tc.data
			if data == nil {
				data = proposalJSON(t, tc.override)
			}

			v, tr := h.mustDecide(t, subject, data, tc.msgID)

			if v.Outcome != tc.wantOutcome || v.Stage != tc.wantStage {
				t.Errorf("verdict %s at stage %s, want %s at stage %s (reason: %s)", v.Outcome, v.Stage, tc.wantOutcome, tc.wantStage, v.Reason)
			}
			for _, s := range tc.wantReason {
				if !strings.Contains(v.Reason, s) {
					t.Errorf("reason %q does not mention %q", v.Reason, s)
				}
			}
			if got := h.reviewer.calls(); got != tc.wantReviews {
				t.Errorf("reviewer called %d times, want %d", got, tc.wantReviews)
			}
			if got := tr.names(); !slices.Equal(got, tc.wantEvents) {
				t.Errorf("audit events %v, want %v", got, tc.wantEvents)
			}

			wantTenant, wantID := "acme", "p1"
			if tc.wantTenant != "" {
				wantTenant = tc.wantTenant
			}
			if tc.noAddress {
				wantTenant, wantID = "", ""
			}
			if v.Tenant != wantTenant || v.ProposalID != wantID {
				t.Errorf("verdict addressed to %q.%q, want %q.%q", v.Tenant, v.ProposalID, wantTenant, wantID)
			}
			if stored := h.store.stored(t, wantTenant, wantID); tc.noAddress {
				if h.store.size() != 0 {
					t.Errorf("a verdict without an address was stored")
				}
			} else if stored == nil {
				t.Error("verdict not stored")
			} else {
				sameVerdict(t, stored, v)
			}

			if tc.wantStage == engine.StagePolicy || tc.wantStage == engine.StageReview {
				if v.Policy == nil {
					t.Fatal("verdict has no policy part")
				}
				var rules []string
				for _, d := range v.Policy.Denies {
					rules = append(rules, d.Rule)
					if d.Message == "" {
						t.Errorf("deny %s has no message", d.Rule)
					}
				}
				if !slices.Equal(rules, tc.wantDenies) {
					t.Errorf("policy denies %v, want %v", rules, tc.wantDenies)
				}
				if v.Policy.Revision != defaultPolicy(t).Revision() {
					t.Errorf("policy revision %q, want %q", v.Policy.Revision, defaultPolicy(t).Revision())
				}
				if len(tc.wantDenies) > 0 && h.router.calls() != 0 {
					t.Error("a denied proposal was routed to a reviewer")
				}
			} else if v.Policy == nil || v.Policy.Revision != defaultPolicy(t).Revision() || len(v.Policy.Denies) != 0 || v.Policy.EvalUS != 0 {
				// Verdicts the policy never saw still name the policy in force.
				t.Errorf("policy part on a %s verdict: %+v, want the revision in force and no evaluation", v.Stage, v.Policy)
			}

			if tc.wantDecision != "" {
				if len(v.Reviews) != 1 {
					t.Fatalf("verdict has %d reviews, want 1", len(v.Reviews))
				}
				r := v.Reviews[0]
				if r.Decision != tc.wantDecision {
					t.Errorf("review decision %q, want %q", r.Decision, tc.wantDecision)
				}
				if r.Persona != "reviewer" || r.Plugin != "sop" || r.PluginVersion != "1.2.3" {
					t.Errorf("review by %q/%q/%q, want reviewer/sop/1.2.3", r.Persona, r.Plugin, r.PluginVersion)
				}
				if !slices.Equal(r.MissingGates, tc.wantMissingGates) {
					t.Errorf("missing gates %v, want %v", r.MissingGates, tc.wantMissingGates)
				}
			} else if len(v.Reviews) != 0 && v.Outcome != engine.OutcomeError {
				t.Errorf("unexpected reviews %+v", v.Reviews)
			}
		})
	}
}

// TestDecideSendsTheReviewerWhatThePolicyAllows checks the request a
// reviewer gets and the revision trail of the audit events.
func TestDecideSendsTheReviewerWhatThePolicyAllows(t *testing.T) {
	h := newHarness(t, func(h *harness) {
		p := reviewerPersona()
		p.Tools = append(p.Tools, "run_shell", "web_skill", "host_restart_service")
		h.cfg.Personas = personaSet{"reviewer": p}
		h.cfg.ReviewTimeout = 42 * time.Second
	})
	data := proposalJSON(t, nil)
	v, tr := h.mustDecide(t, testSubject, data, "")
	if v.Outcome != engine.OutcomeApproved {
		t.Fatalf("outcome %s, want approved (reason: %s)", v.Outcome, v.Reason)
	}
	reqs := h.reviewer.requests()
	if len(reqs) != 1 {
		t.Fatalf("reviewer called %d times, want 1", len(reqs))
	}
	req := reqs[0]
	if want := []string{"get_sop_text", "get_verdict_history", "get_proposal"}; !slices.Equal(req.Tools, want) {
		t.Errorf("reviewer tools %v, want %v", req.Tools, want)
	}
	if want := []string{"host_restart_service", "run_shell", "web_skill"}; !slices.Equal(req.DeniedTools, want) {
		t.Errorf("denied tools %v, want %v", req.DeniedTools, want)
	}
	if req.SOP == nil || req.SOP.ID != "SOP-001" {
		t.Errorf("SOP %+v, want SOP-001", req.SOP)
	}
	if req.Persona == nil || req.Persona.Name != "reviewer" {
		t.Errorf("persona %+v, want reviewer", req.Persona)
	}
	if req.Proposal == nil || req.Proposal.ID != "p1" || req.Proposal.Class != engine.ClassWrite {
		t.Errorf("proposal %+v", req.Proposal)
	}
	if string(req.ProposalJSON) != string(data) {
		t.Errorf("proposal JSON %s, want the delivered bytes %s", req.ProposalJSON, data)
	}
	if req.ReviewID == "" || req.Why == "" || req.PolicyRevision != defaultPolicy(t).Revision() {
		t.Errorf("review id %q, why %q, revision %q", req.ReviewID, req.Why, req.PolicyRevision)
	}
	for _, ev := range tr.all() {
		if want := defaultPolicy(t).Revision(); ev.PolicyRevision != want {
			t.Errorf("event %s has policy revision %q, want %q", ev.Event, ev.PolicyRevision, want)
		}
		// The evaluation time is known from the policy's event on.
		if evaluated := ev.Event != engine.EventReceived; evaluated != (commonData(t, ev).PolicyEvalUS > 0) {
			t.Errorf("event %s has policy_eval_us %d", ev.Event, commonData(t, ev).PolicyEvalUS)
		}
	}
}

func TestDecideReplaysStoredVerdict(t *testing.T) {
	tests := []struct {
		note        string
		data        []byte
		wantOutcome engine.Outcome
		wantReviews int
	}{
		{note: "approved", data: proposalJSON(t, nil), wantOutcome: engine.OutcomeApproved, wantReviews: 1},
		{note: "invalid", data: proposalJSON(t, map[string]any{"class": "delete"}), wantOutcome: engine.OutcomeInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			h := newHarness(t)
			first, firstTrail := h.mustDecide(t, testSubject, tc.data, "")
			if first.Outcome != tc.wantOutcome {
				t.Fatalf("first outcome %s, want %s (reason: %s)", first.Outcome, tc.wantOutcome, first.Reason)
			}

			tr := h.stream.trail()
			again, err := h.decideOn(t.Context(), tr, testSubject, tc.data, "")
			if err != nil {
				t.Fatalf("Decide again: %v", err)
			}
			sameVerdict(t, again, first)
			if again.AuditSeq != firstTrail.sealSeq {
				t.Errorf("replayed audit_seq %d, want the first decision's %d", again.AuditSeq, firstTrail.sealSeq)
			}
			if got := h.reviewer.calls(); got != tc.wantReviews {
				t.Errorf("reviewer called %d times over two deliveries, want %d", got, tc.wantReviews)
			}
			if h.store.creates != 1 {
				t.Errorf("store written %d times, want once", h.store.creates)
			}
			if got := tr.names(); !slices.Equal(got, []string{engine.EventReplayed}) {
				t.Errorf("replay events %v, want [%s]", got, engine.EventReplayed)
			}
			var data struct {
				AuditSeq uint64         `json:"audit_seq"`
				Outcome  engine.Outcome `json:"outcome"`
			}
			if evs := tr.all(); len(evs) == 1 {
				if err := json.Unmarshal(evs[0].Data, &data); err != nil {
					t.Fatal(err)
				}
				if data.AuditSeq != first.AuditSeq || data.Outcome != first.Outcome {
					t.Errorf("replay event data %+v, want audit_seq %d outcome %s", data, first.AuditSeq, first.Outcome)
				}
			}

			failing := h.stream.trail()
			failing.sealErr = errors.New("audit stream unavailable")
			if v, err := h.decideOn(t.Context(), failing, testSubject, tc.data, ""); err == nil {
				t.Errorf("replay on a failing trail returned %+v and no error", v)
			}
		})
	}
}

func TestDecideRefusesReusedID(t *testing.T) {
	h := newHarness(t)
	first, _ := h.mustDecide(t, testSubject, proposalJSON(t, nil), "")
	if first.Outcome != engine.OutcomeApproved {
		t.Fatalf("first outcome %s, want approved (reason: %s)", first.Outcome, first.Reason)
	}

	other := proposalJSON(t, map[string]any{"class": "destructive", "reason": "drop everything"})
	v, tr := h.mustDecide(t, testSubject, other, "")
	if v.Outcome != engine.OutcomeInvalid || v.Stage != engine.StageValidation || v.Approved {
		t.Errorf("reused id got %s at %s (approved %v), want invalid at validation", v.Outcome, v.Stage, v.Approved)
	}
	if !strings.Contains(v.Reason, "already used") || !strings.Contains(v.Reason, `"p1"`) {
		t.Errorf("reason %q does not say id \"p1\" was already used", v.Reason)
	}
	if v.ProposalID != "p1" || v.Tenant != "acme" {
		t.Errorf("verdict addressed to %q.%q, want acme.p1", v.Tenant, v.ProposalID)
	}
	if got := tr.names(); !slices.Equal(got, []string{engine.EventReceived, engine.EventVerdict}) {
		t.Errorf("events %v", got)
	}
	if got := h.reviewer.calls(); got != 1 {
		t.Errorf("reviewer called %d times, want 1", got)
	}
	sameVerdict(t, h.store.stored(t, "acme", "p1"), first)
}

func TestDecideAuditFailureStoresNothing(t *testing.T) {
	tests := []struct {
		note      string
		recordErr error
		sealErr   error
	}{
		{note: "record and seal fail", recordErr: errors.New("publish: no responders"), sealErr: errors.New("publish: no responders")},
		{note: "record fails, trail refuses to seal", recordErr: errors.New("publish: no responders")},
		{note: "seal fails", sealErr: errors.New("ack wait exceeded")},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			for _, data := range [][]byte{proposalJSON(t, nil), proposalJSON(t, map[string]any{"class": nil})} {
				h := newHarness(t)
				tr := h.stream.trail()
				tr.recordErr, tr.sealErr = tc.recordErr, tc.sealErr
				v, err := h.decideOn(t.Context(), tr, testSubject, data, "")
				if err == nil {
					t.Fatalf("Decide returned %+v and no error on a failing audit trail", v)
				}
				if v != nil {
					t.Errorf("Decide returned a verdict with its error: %+v", v)
				}
				if h.store.size() != 0 {
					t.Errorf("store holds %d verdicts after an audit failure", h.store.size())
				}
			}
		})
	}
}

func TestDecideCancelledContext(t *testing.T) {
	tests := []struct {
		note   string
		answer func(cancel context.CancelFunc) answerFunc
	}{
		{note: "reviewer waits for the context", answer: func(cancel context.CancelFunc) answerFunc {
			return func(ctx context.Context, _ engine.ReviewRequest) (engine.ReviewResult, error) {
				cancel()
				<-ctx.Done()
				return engine.ReviewResult{}, ctx.Err()
			}
		}},
		{note: "reviewer approves after the cancel", answer: func(cancel context.CancelFunc) answerFunc {
			return func(ctx context.Context, _ engine.ReviewRequest) (engine.ReviewResult, error) {
				cancel()
				<-ctx.Done()
				return approval(), nil
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			h := newHarness(t, func(h *harness) { h.reviewer.answer = tc.answer(cancel) })
			tr := h.stream.trail()
			v, err := h.decideOn(ctx, tr, testSubject, proposalJSON(t, nil), "")
			if err == nil {
				t.Fatalf("Decide returned %+v and no error after its context was cancelled", v)
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("error %v does not wrap context.Canceled", err)
			}
			if v != nil {
				t.Errorf("Decide returned a verdict with its error: %+v", v)
			}
			if h.store.size() != 0 {
				t.Errorf("store holds %d verdicts after a cancelled decision", h.store.size())
			}
			if slices.Contains(tr.names(), engine.EventVerdict) {
				t.Error("a verdict was audited for a decision that was abandoned")
			}
		})
	}
}

// TestDecideReviewDeadlineIsWallClock checks that a review's deadline is a
// span of real time, whatever time the injected Clock tells.
func TestDecideReviewDeadlineIsWallClock(t *testing.T) {
	t.Run("clock behind the wall clock", func(t *testing.T) {
		var deadlineErr atomic.Value
		h := newHarness(t, func(h *harness) {
			h.now = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
			h.cfg.ReviewTimeout = 10 * time.Second
			h.reviewer.answer = func(ctx context.Context, _ engine.ReviewRequest) (engine.ReviewResult, error) {
				if dl, ok := ctx.Deadline(); !ok || !dl.After(time.Now()) || dl.After(time.Now().Add(10*time.Second)) {
					deadlineErr.Store(fmt.Sprintf("review context deadline %v (set %v) is not within 10s of now %v", dl, ok, time.Now()))
				}
				select {
				case <-ctx.Done():
					return engine.ReviewResult{}, ctx.Err()
				case <-time.After(20 * time.Millisecond):
					return approval(), nil
				}
			}
		})
		v, _ := h.mustDecide(t, testSubject, proposalJSON(t, nil), "")
		if msg := deadlineErr.Load(); msg != nil {
			t.Error(msg)
		}
		if v.Outcome != engine.OutcomeApproved {
			t.Errorf("a 20ms review with a 10s timeout ended %s: %s", v.Outcome, v.Reason)
		}
	})
	t.Run("clock ahead of the wall clock", func(t *testing.T) {
		h := newHarness(t, func(h *harness) {
			h.now = time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
			h.cfg.ReviewTimeout = 50 * time.Millisecond
			h.reviewer.answer = blockUntilDone(2 * time.Second)
		})
		start := time.Now()
		v, _ := h.mustDecide(t, testSubject, proposalJSON(t, nil), "")
		if v.Outcome != engine.OutcomeTimeout {
			t.Errorf("a review past its 50ms timeout ended %s after %v: %s", v.Outcome, time.Since(start), v.Reason)
		}
	})
}

func TestDecideStoreFailures(t *testing.T) {
	t.Run("get fails", func(t *testing.T) {
		kvDown := errors.New("kv: no responders")
		h := newHarness(t, func(h *harness) { h.store.getErr = kvDown })
		tr := h.stream.trail()
		v, err := h.decideOn(t.Context(), tr, testSubject, proposalJSON(t, nil), "")
		if !errors.Is(err, kvDown) {
			t.Fatalf("Decide = %+v, %v; want an error wrapping %v", v, err, kvDown)
		}
		if h.reviewer.calls() != 0 {
			t.Error("reviewed a proposal whose earlier verdict could not be looked up")
		}
	})
	t.Run("create fails", func(t *testing.T) {
		kvDown := errors.New("kv: no responders")
		h := newHarness(t, func(h *harness) { h.store.createErr = kvDown })
		v, err := h.decideOn(t.Context(), h.stream.trail(), testSubject, proposalJSON(t, nil), "")
		if !errors.Is(err, kvDown) || v != nil {
			t.Fatalf("Decide = %+v, %v; want no verdict and an error wrapping %v", v, err, kvDown)
		}
	})
}

// TestDecideLosesRace checks that when another gated stored a verdict
// between this one's look-up and its write, the stored verdict stands.
// TestDecideLosesRace: a copy of a proposal that missed the stored
// verdict on its look-up gets the stored verdict, never its own. While
// the first review's claim is kept, the copy waits on it and does not
// review; once that claim has gone stale it reviews, and storing its
// verdict finds the first one there.
func TestDecideLosesRace(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprintf("stale claim %v", stale), func(t *testing.T) {
			h := newHarness(t)
			data := proposalJSON(t, nil)
			first, _ := h.mustDecide(t, testSubject, data, "")
			c, ok := h.store.claim("acme", "p1")
			if !ok {
				t.Fatal("the first review's claim was not kept with its verdict")
			}
			if stale {
				c.Until = time.Now().Add(-time.Second)
				h.store.hold("acme", "p1", c)
			}

			h.store.mu.Lock()
			h.store.hideOnGet = true
			h.store.mu.Unlock()
			h.reviewer.answer = answer(engine.ReviewResult{}, errors.New("plugin crashed"))
			tr := h.stream.trail()
			v, err := h.decideOn(t.Context(), tr, testSubject, data, "")
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			sameVerdict(t, v, first)
			want := 1
			if stale {
				want = 2
			}
			if h.reviewer.calls() != want {
				t.Errorf("reviewer called %d times, want %d", h.reviewer.calls(), want)
			}
			sameVerdict(t, h.store.stored(t, "acme", "p1"), first)
		})
	}
}

func TestDecideConcurrentDeliveries(t *testing.T) {
	h := newHarness(t, func(h *harness) {
		h.reviewer.answer = func(context.Context, engine.ReviewRequest) (engine.ReviewResult, error) {
			time.Sleep(2 * time.Millisecond)
			return approval(), nil
		}
	})
	data := proposalJSON(t, nil)
	const n = 8
	verdicts := make([]*engine.Verdict, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			verdicts[i], errs[i] = h.decideOn(t.Context(), h.stream.trail(), testSubject, data, "")
		})
	}
	wg.Wait()
	stored := h.store.stored(t, "acme", "p1")
	if stored == nil {
		t.Fatal("nothing stored")
	}
	for i := range n {
		if errs[i] != nil {
			t.Errorf("delivery %d: %v", i, errs[i])
			continue
		}
		sameVerdict(t, verdicts[i], stored)
	}
	// The review claim lets one delivery review; the others wait for its
	// verdict or find it stored.
	if n := h.reviewer.calls(); n != 1 {
		t.Errorf("reviewer called %d times for %d concurrent deliveries of one proposal, want once", n, len(verdicts))
	}
}

func TestDecidePolicyOutcomes(t *testing.T) {
	tests := []struct {
		note        string
		policy      stubPolicy
		wantOutcome engine.Outcome
		wantStage   engine.Stage
	}{
		{note: "policy error fails closed", policy: stubPolicy{err: errors.New("rego: undefined")}, wantOutcome: engine.OutcomeError, wantStage: engine.StagePolicy},
		{note: "quorum above the loaded personas is blocked", policy: stubPolicy{d: engine.PolicyDecision{Review: engine.Route{Required: true, Persona: "reviewer", Quorum: 2, Why: "tenant_wide"}}},
			wantOutcome: engine.OutcomeBlocked, wantStage: engine.StageReview},
		{note: "deny beats a waived review", policy: stubPolicy{d: engine.PolicyDecision{Denies: []engine.Deny{{Rule: "change_freeze", Message: "frozen"}}}},
			wantOutcome: engine.OutcomeRejected, wantStage: engine.StagePolicy},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			h := newHarness(t, func(h *harness) { h.cfg.Policy = tc.policy })
			v, _ := h.mustDecide(t, testSubject, proposalJSON(t, nil), "")
			if v.Outcome != tc.wantOutcome || v.Stage != tc.wantStage {
				t.Errorf("verdict %s at %s, want %s at %s (reason: %s)", v.Outcome, v.Stage, tc.wantOutcome, tc.wantStage, v.Reason)
			}
			if h.reviewer.calls() != 0 {
				t.Errorf("reviewer called %d times", h.reviewer.calls())
			}
		})
	}
}

// TestDecideRegoRuntimeErrorIsAnErrorVerdict runs a real bundle whose
// user rule fails at run time for one action (to_number on a sentence):
// the verdict is error, never approved, and the reviewer is not asked.
func TestDecideRegoRuntimeErrorIsAnErrorVerdict(t *testing.T) {
	b, err := policies.Default()
	if err != nil {
		t.Fatal(err)
	}
	b.Modules["explode.rego"] = `package gated

deny contains {"rule": "reason_budget", "message": "too expensive"} if {
	input.proposal.action == "db_vacuum_table"
	to_number(input.proposal.reason) > 100
}
`
	pol, err := policies.Compile(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(h *harness) { h.cfg.Policy = pol })
	v, _ := h.mustDecide(t, "gated.proposals.acme.db_vacuum_table", proposalJSON(t, map[string]any{"action": "db_vacuum_table"}), "")
	if v.Outcome != engine.OutcomeError || v.Stage != engine.StagePolicy || !strings.Contains(v.Reason, "to_number") {
		t.Fatalf("verdict %s at %s (%s), want error at policy naming to_number", v.Outcome, v.Stage, v.Reason)
	}
	if h.reviewer.calls() != 0 {
		t.Errorf("reviewer called %d times", h.reviewer.calls())
	}
}

func TestNewChecksConfig(t *testing.T) {
	base := func() engine.Config {
		return engine.Config{Policy: stubPolicy{}, Personas: personaSet{}, Router: &fakeRouter{}, Store: newMemStore()}
	}
	tests := []struct {
		note string
		edit func(*engine.Config)
	}{
		{note: "no policy", edit: func(c *engine.Config) { c.Policy = nil }},
		{note: "no personas", edit: func(c *engine.Config) { c.Personas = nil }},
		{note: "no router", edit: func(c *engine.Config) { c.Router = nil }},
		{note: "no store", edit: func(c *engine.Config) { c.Store = nil }},
		{note: "negative review timeout", edit: func(c *engine.Config) { c.ReviewTimeout = -time.Second }},
		{note: "negative dedupe max", edit: func(c *engine.Config) { c.DedupeMax = -1 }},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			cfg := base()
			tc.edit(&cfg)
			if _, err := engine.New(cfg); !errors.Is(err, engine.ErrInvalidOption) {
				t.Errorf("New = %v, want an error wrapping ErrInvalidOption", err)
			}
		})
	}
	if _, err := engine.New(base()); err != nil {
		t.Errorf("New with a complete config: %v", err)
	}
	disabled := base()
	disabled.DedupeWindow = -time.Second
	if _, err := engine.New(disabled); err != nil {
		t.Errorf("New with deduplication off: %v", err)
	}
}

// overlapStore holds the first verdict look-up until the target's history
// is being read, so a Decide that reads them one after the other fails.
type overlapStore struct {
	*memStore
	recent     chan struct{}
	recentOnce sync.Once
	gets       atomic.Int32
}

func (s *overlapStore) Get(ctx context.Context, tenant, id string) (*engine.Verdict, error) {
	if s.gets.Add(1) == 1 {
		select {
		case <-s.recent:
		case <-time.After(5 * time.Second):
			return nil, errors.New("the target's history was not read while the stored verdict was looked up")
		}
	}
	return s.memStore.Get(ctx, tenant, id)
}

func (s *overlapStore) Recent(ctx context.Context, tenant, key string) ([]engine.Verdict, error) {
	s.recentOnce.Do(func() { close(s.recent) })
	return s.memStore.Recent(ctx, tenant, key)
}

// A mutating proposal's history is read beside the look-up of a stored
// verdict, not after it.
func TestDecideReadsHistoryBesideTheVerdictLookup(t *testing.T) {
	h := newHarness(t)
	store := &overlapStore{memStore: h.store, recent: make(chan struct{})}
	h.cfg.Store = store
	eng, err := engine.New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.eng = eng
	v, err := h.decideOn(t.Context(), h.stream.trail(), testSubject, proposalJSON(t, nil), "")
	if err != nil {
		t.Fatal(err)
	}
	if v.Outcome != engine.OutcomeApproved {
		t.Fatalf("outcome %s: %s", v.Outcome, v.Reason)
	}
}
