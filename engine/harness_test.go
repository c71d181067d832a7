package engine_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated"
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
		Decision: gated.DecisionApprove,
		Gates: []gated.GateResult{
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

func (h *harness) decideOn(ctx context.Context, tr *memTrail, subject string, data []byte, msgID string) (*gated.Verdict, error) {
	return h.eng.Decide(ctx, engine.Delivery{Subject: subject, Data: data, MsgID: msgID, Attempt: 1, Trail: tr})
}

// mustDecide decides one delivery on a fresh trail and checks the
// invariants every freshly decided verdict must hold.
func (h *harness) mustDecide(t *testing.T, subject string, data []byte, msgID string) (*gated.Verdict, *memTrail) {
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
func (h *harness) checkFresh(t *testing.T, v *gated.Verdict, tr *memTrail, data []byte) {
	t.Helper()
	if v == nil {
		t.Fatal("Decide returned a nil verdict and no error")
	}
	if v.V != 1 {
		t.Errorf("verdict v = %d, want 1", v.V)
	}
	if v.Approved != (v.Outcome == gated.OutcomeApproved) {
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
	if last.Event != gated.EventVerdict {
		t.Fatalf("trail sealed with %q, want %q", last.Event, gated.EventVerdict)
	}
	var sealedVerdict gated.Verdict
	if err := json.Unmarshal(last.Data, &sealedVerdict); err != nil {
		t.Fatalf("verdict event data: %v", err)
	}
	if sealedVerdict.Outcome != v.Outcome || sealedVerdict.ProposalID != v.ProposalID || sealedVerdict.Reason != v.Reason {
		t.Errorf("sealed verdict event %+v does not match the returned verdict %+v", sealedVerdict, v)
	}
	wantTenant := v.Tenant
	if wantTenant == "" {
		wantTenant = gated.UnknownTenant
	}
	delivery := max(tr.delivery, 1)
	for _, ev := range events {
		common := commonData(t, ev)
		if ev.Tenant != wantTenant || ev.ProposalID != v.ProposalID || common.Delivery != delivery || ev.V != 1 || !ev.At.Equal(h.now) {
			t.Errorf("event %s: tenant %q, proposal %q, delivery %d, v %d, at %v; want tenant %q, proposal %q, delivery %d, v 1, at %v",
				ev.Event, ev.Tenant, ev.ProposalID, common.Delivery, ev.V, ev.At, wantTenant, v.ProposalID, delivery, h.now)
		}
		if ev.Event != gated.EventVerdict && common.Action != v.Action {
			t.Errorf("event %s has action %q in its data, want %q", ev.Event, common.Action, v.Action)
		}
	}
}

// commonData reads the members every proposal event carries in its data;
// the data must be one JSON object without repeated keys.
func commonData(t *testing.T, ev gated.AuditEvent) (c struct {
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

func sameVerdict(t *testing.T, got, want *gated.Verdict) {
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
