package operator_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nkeys"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// operatorKey is an operator's nkey: the seed it signs with and the
// public key gated lists.
type operatorKey struct {
	seed []byte
	pub  string
}

func newOperatorKey(t testing.TB) operatorKey {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return operatorKey{seed: seed, pub: pub}
}

var heldDigest = strings.Repeat("ab", 32)

// decision is a well-formed decision by alice on acme's proposal p-1.
func decision() operator.Message {
	return operator.Message{
		Tenant: "acme", ProposalID: "p-1", ProposalSHA256: heldDigest, Operator: "alice",
		Criteria: []engine.OperatorFinding{{ID: "ux-check", Pass: true, Reason: "looked at the screenshots"}},
		Reason:   "release review",
	}
}

func sign(t testing.TB, k operatorKey, m operator.Message) ([]byte, nats.Header) {
	t.Helper()
	body, hdr, err := operator.Sign(k.seed, m)
	if err != nil {
		t.Fatal(err)
	}
	return body, hdr
}

// signRaw signs arbitrary bytes as Sign would sign a body.
func signRaw(t testing.TB, k operatorKey, body []byte) nats.Header {
	t.Helper()
	kp, err := nkeys.FromSeed(k.seed)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := kp.Sign(body)
	if err != nil {
		t.Fatal(err)
	}
	hdr := nats.Header{}
	hdr.Set(wire.OperatorKeyHeader, k.pub)
	hdr.Set(wire.OperatorSigHeader, base64.RawURLEncoding.EncodeToString(sig))
	return hdr
}

// operators lists alice (tenant acme) and root (every tenant).
func operators(t testing.TB, alice, root operatorKey) *operator.List {
	t.Helper()
	l, err := operator.ParseList("operators.yaml", fmt.Appendf(nil,
		"operators:\n  - id: alice\n    key: %s\n    tenants: [acme]\n  - id: root\n    key: %s\n", alice.pub, root.pub))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// auditRec collects the events of every trail it starts; fail makes
// Seal fail.
type auditRec struct {
	mu     sync.Mutex
	events []gated.AuditEvent
	fail   error
}

func (a *auditRec) Trail() engine.AuditTrail { return &recTrail{rec: a} }

func (a *auditRec) take() []gated.AuditEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.events
	a.events = nil
	return out
}

type recTrail struct {
	rec    *auditRec
	sealed bool
}

func (t *recTrail) Record(_ context.Context, ev gated.AuditEvent) error {
	t.rec.mu.Lock()
	defer t.rec.mu.Unlock()
	if t.sealed {
		return engine.ErrTrailSealed
	}
	t.rec.events = append(t.rec.events, ev)
	return nil
}

func (t *recTrail) Flush(context.Context) error { return nil }

func (t *recTrail) Seal(ctx context.Context, ev gated.AuditEvent) (uint64, error) {
	t.rec.mu.Lock()
	fail := t.rec.fail
	t.rec.mu.Unlock()
	if fail != nil {
		return 0, fail
	}
	if err := t.Record(ctx, ev); err != nil {
		return 0, err
	}
	t.sealed = true
	return 99, nil
}

// fakeResolver answers Resolve with answer, recording the decisions.
type fakeResolver struct {
	mu        sync.Mutex
	decisions []engine.OperatorDecision
	answer    func(engine.OperatorDecision) (*gated.Verdict, error)
}

func (f *fakeResolver) Resolve(_ context.Context, d engine.OperatorDecision, _ engine.AuditTrail) (*gated.Verdict, error) {
	f.mu.Lock()
	f.decisions = append(f.decisions, d)
	answer := f.answer
	f.mu.Unlock()
	return answer(d)
}

// answerWith makes Resolve answer with fn until the test ends.
func (f *fakeResolver) answerWith(t *testing.T, fn func(engine.OperatorDecision) (*gated.Verdict, error)) {
	f.mu.Lock()
	prev := f.answer
	f.answer = fn
	f.mu.Unlock()
	t.Cleanup(func() {
		f.mu.Lock()
		f.answer = prev
		f.mu.Unlock()
	})
}

func (f *fakeResolver) take() []engine.OperatorDecision {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.decisions
	f.decisions = nil
	return out
}

// hookRec records what the verdict hooks were called with, in order.
type hookRec struct {
	mu    sync.Mutex
	calls []string
	fail  error
}

func (h *hookRec) hook(name string) operator.VerdictHook {
	return func(_ context.Context, v *gated.Verdict) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.calls = append(h.calls, name+":"+v.ProposalID)
		if name == "follow-up" {
			return h.fail
		}
		return nil
	}
}

func (h *hookRec) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.calls
	h.calls = nil
	return out
}

func operatorVerdict(d engine.OperatorDecision) *gated.Verdict {
	return &gated.Verdict{
		V: 1, ProposalID: d.ProposalID, Tenant: d.Tenant, Kind: gated.KindRun, Outcome: gated.OutcomeApproved,
		Approved: true, Stage: gated.StageOperator, Reason: "operator " + d.Operator + " passed every manual criterion",
		ProposalSHA256: d.ProposalSHA256, AuditSeq: 12, DecidedAt: time.Now().UTC(),
	}
}

// sendOperator sends a decision as the CLI does, on a connection of its
// own, and returns the reply.
func sendOperator(t *testing.T, url, subject string, body []byte, hdr nats.Header) *nats.Msg {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	m, err := nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: body, Header: hdr})
	if err != nil {
		t.Fatalf("request on %s: %v", subject, err)
	}
	return m
}

// replyVerdict is the verdict of a reply that is no error.
func replyVerdict(t *testing.T, m *nats.Msg) *gated.Verdict {
	t.Helper()
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		t.Fatalf("error reply %s: %s", code, m.Header.Get(micro.ErrorHeader))
	}
	var v gated.Verdict
	if err := json.Unmarshal(m.Data, &v); err != nil {
		t.Fatalf("reply is not a verdict: %v\n%s", err, m.Data)
	}
	return &v
}
