package operator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

func TestEndpoint(t *testing.T) {
	s := bustest.Server(t)
	nc, _ := bustest.Connect(t, s)
	alice, root, stranger := newOperatorKey(t), newOperatorKey(t), newOperatorKey(t)
	audit, hooks := &auditRec{}, &hookRec{}
	resolver := &fakeResolver{answer: func(d engine.OperatorDecision) (*gated.Verdict, error) { return operatorVerdict(d), nil }}
	ep, err := operator.NewEndpoint(operators(t, alice, root), resolver, audit.Trail, hooks.hook("follow-up"), hooks.hook("publish"), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := intake.StartService(nc, intake.ServiceConfig{Version: "1.0.0", Operators: ep}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop(0) })
	url := s.ClientURL()
	subject := wire.OperatorSubject("acme", "p-1")

	t.Run("accepted", func(t *testing.T) {
		body, hdr := sign(t, alice, decision())
		reply := sendOperator(t, url, subject, body, hdr)
		v := replyVerdict(t, reply)
		if v.Stage != gated.StageOperator || v.ProposalID != "p-1" {
			t.Fatalf("reply = %+v", v)
		}
		ds := resolver.take()
		if len(ds) != 1 || ds[0].Operator != "alice" || ds[0].Key != alice.pub || ds[0].ProposalSHA256 != heldDigest ||
			ds[0].Reason != "release review" || len(ds[0].Criteria) != 1 || !ds[0].Criteria[0].Pass {
			t.Fatalf("the engine got %+v", ds)
		}
		if calls := hooks.take(); strings.Join(calls, " ") != "follow-up:p-1 publish:p-1" {
			t.Fatalf("hooks called %v, want the follow-up before the verdict", calls)
		}
		if evs := audit.take(); len(evs) != 0 {
			t.Fatalf("the endpoint audited %v itself; Resolve audits an acceptance", evs)
		}
	})

	refusals := []struct {
		note    string
		subject string
		msg     func() ([]byte, nats.Header)
		code    string
		want    string
		tenant  string // of the audit event
	}{
		{note: "bad signature", msg: func() ([]byte, nats.Header) {
			body, hdr := sign(t, alice, decision())
			return bytes.Replace(body, []byte("release"), []byte("RELEASE"), 1), hdr
		}, code: "401", want: "does not verify", tenant: "acme"},
		{note: "unknown key", msg: func() ([]byte, nats.Header) { return sign(t, stranger, decision()) }, code: "401", want: "not in gated's operator list", tenant: "acme"},
		{note: "wrong tenant", subject: wire.OperatorSubject("globex", "p-1"), msg: func() ([]byte, nats.Header) {
			m := decision()
			m.Tenant = "globex"
			return sign(t, alice, m)
		}, code: "403", want: "may not decide for tenant globex", tenant: "globex"},
		{note: "expired", msg: func() ([]byte, nats.Header) {
			m := decision()
			m.SignedAt = time.Now().Add(-time.Hour)
			return sign(t, alice, m)
		}, code: "401", want: "signed_at", tenant: "acme"},
		{note: "subject mismatch", subject: wire.OperatorSubject("acme", "p-9"), msg: func() ([]byte, nats.Header) { return sign(t, alice, decision()) },
			code: "400", want: "field proposal_id", tenant: "acme"},
		{note: "garbage", msg: func() ([]byte, nats.Header) {
			body := []byte("garbage")
			return body, signRaw(t, alice, body)
		}, code: "400", want: "not JSON", tenant: "acme"},
		{note: "unsigned garbage", msg: func() ([]byte, nats.Header) { return []byte("{{{"), nil }, code: "401", want: "must be signed", tenant: "acme"},
		{note: "malformed subject", subject: "gated.operator.ACME.p-1", msg: func() ([]byte, nats.Header) { return sign(t, alice, decision()) },
			code: "400", want: "field subject", tenant: gated.UnknownTenant},
	}
	for _, tc := range refusals {
		t.Run(tc.note, func(t *testing.T) {
			body, hdr := tc.msg()
			subj := tc.subject
			if subj == "" {
				subj = subject
			}
			reply := sendOperator(t, url, subj, body, hdr)
			code, desc := reply.Header.Get(micro.ErrorCodeHeader), reply.Header.Get(micro.ErrorHeader)
			if code != tc.code || !strings.Contains(desc, tc.want) {
				t.Fatalf("reply %q %q, want %s saying %q", code, desc, tc.code, tc.want)
			}
			if len(reply.Data) != 0 {
				t.Errorf("error reply has a body: %s", reply.Data)
			}
			if ds := resolver.take(); len(ds) != 0 {
				t.Fatalf("a refused message reached the engine: %+v", ds)
			}
			if calls := hooks.take(); len(calls) != 0 {
				t.Fatalf("a refused message was published: %v", calls)
			}
			evs := audit.take()
			if len(evs) != 1 || evs[0].Event != gated.EventOperatorRefused || evs[0].Tenant != tc.tenant {
				t.Fatalf("audited %+v, want one %s of tenant %s", evs, gated.EventOperatorRefused, tc.tenant)
			}
			// The data of operator.refused, as docs/AUDIT.md lists it.
			var data struct {
				Code     int    `json:"code"`
				Field    string `json:"field"`
				Reason   string `json:"reason"`
				Subject  string `json:"subject"`
				Key      string `json:"key"`
				Operator string `json:"operator"`
			}
			if err := json.Unmarshal(evs[0].Data, &data); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(data.Code) != tc.code || data.Reason == "" || !strings.Contains(desc, data.Reason) || data.Subject != subj {
				t.Fatalf("audit data %+v", data)
			}
			if strings.Contains(string(evs[0].Data), string(alice.seed)) || (hdr != nil && hdr.Get(wire.OperatorSigHeader) != "" &&
				strings.Contains(string(evs[0].Data), hdr.Get(wire.OperatorSigHeader))) {
				t.Errorf("audit data holds a secret: %s", evs[0].Data)
			}
		})
	}

	resolveErrors := []struct {
		note string
		err  error
		code string
		want string
	}{
		{note: "no verdict", err: fmt.Errorf("reading: %w", gated.ErrNotFound), code: "404", want: "no verdict is stored for proposal acme.p-1"},
		{note: "not awaiting", err: fmt.Errorf("%w: outcome approved", gated.ErrNotAwaiting), code: "409", want: "not awaiting"},
		{note: "digest mismatch", err: fmt.Errorf("%w: another proposal digest", gated.ErrDecisionMismatch), code: "409", want: "another proposal digest"},
		{note: "decided meanwhile", err: gated.ErrExists, code: "409", want: "decided meanwhile"},
		{note: "store down", err: errors.New("verdict bucket: timeout"), code: "503", want: "nothing was decided"},
	}
	for _, tc := range resolveErrors {
		t.Run(tc.note, func(t *testing.T) {
			resolver.answerWith(t, func(engine.OperatorDecision) (*gated.Verdict, error) { return nil, tc.err })
			body, hdr := sign(t, alice, decision())
			reply := sendOperator(t, url, subject, body, hdr)
			code, desc := reply.Header.Get(micro.ErrorCodeHeader), reply.Header.Get(micro.ErrorHeader)
			if code != tc.code || !strings.Contains(desc, tc.want) {
				t.Fatalf("reply %q %q, want %s saying %q", code, desc, tc.code, tc.want)
			}
			resolver.take()
			if calls := hooks.take(); len(calls) != 0 {
				t.Fatalf("nothing was decided, yet the hooks ran: %v", calls)
			}
			evs := audit.take()
			if len(evs) != 1 || evs[0].Event != gated.EventOperatorRefused || evs[0].ProposalID != "p-1" {
				t.Fatalf("audited %+v, want one refusal of p-1", evs)
			}
		})
	}

	t.Run("the same decision again republishes the follow-up", func(t *testing.T) {
		resolver.answerWith(t, func(d engine.OperatorDecision) (*gated.Verdict, error) {
			return operatorVerdict(d), fmt.Errorf("%w: decided by operator alice", gated.ErrNotAwaiting)
		})
		body, hdr := sign(t, alice, decision())
		reply := sendOperator(t, url, subject, body, hdr)
		if code := reply.Header.Get(micro.ErrorCodeHeader); code != "409" {
			t.Fatalf("reply code %q, want 409", code)
		}
		resolver.take()
		audit.take()
		if calls := hooks.take(); strings.Join(calls, " ") != "follow-up:p-1" {
			t.Fatalf("hooks called %v, want the follow-up only", calls)
		}
	})

	t.Run("follow-up fails", func(t *testing.T) {
		hooks.mu.Lock()
		hooks.fail = errors.New("GATED_RUNS: no responders")
		hooks.mu.Unlock()
		defer func() { hooks.mu.Lock(); hooks.fail = nil; hooks.mu.Unlock() }()
		body, hdr := sign(t, alice, decision())
		reply := sendOperator(t, url, subject, body, hdr)
		code, desc := reply.Header.Get(micro.ErrorCodeHeader), reply.Header.Get(micro.ErrorHeader)
		if code != "503" || !strings.Contains(desc, "the decision is stored") || !strings.Contains(desc, "send the same decision again") {
			t.Fatalf("reply %q %q, want 503 saying the decision is stored", code, desc)
		}
		resolver.take()
		audit.take()
		if calls := hooks.take(); strings.Join(calls, " ") != "follow-up:p-1" {
			t.Fatalf("hooks called %v: the verdict must not be published before its follow-up", calls)
		}
	})

	t.Run("audit down", func(t *testing.T) {
		audit.mu.Lock()
		audit.fail = errors.New("audit stream unavailable")
		audit.mu.Unlock()
		defer func() { audit.mu.Lock(); audit.fail = nil; audit.mu.Unlock() }()
		body, hdr := sign(t, stranger, decision())
		reply := sendOperator(t, url, subject, body, hdr)
		code, desc := reply.Header.Get(micro.ErrorCodeHeader), reply.Header.Get(micro.ErrorHeader)
		if code != "503" || !strings.Contains(desc, "could not be audited") || !strings.Contains(desc, "401") {
			t.Fatalf("reply %q %q, want 503 naming the refusal it could not audit", code, desc)
		}
		if ds := resolver.take(); len(ds) != 0 {
			t.Fatalf("the engine got %+v", ds)
		}
	})

	t.Run("stats and info", func(t *testing.T) {
		var found bool
		for _, e := range svc.Info().Endpoints {
			if e.Name == operator.EndpointName {
				found = e.Subject == "gated.operator.*.*" && e.QueueGroup == intake.ReviewQueueGroup
			}
		}
		if !found {
			t.Fatalf("no operator endpoint on gated.operator.*.* in queue group %s: %+v", intake.ReviewQueueGroup, svc.Info().Endpoints)
		}
		for _, e := range svc.Stats().Endpoints {
			if e.Name != operator.EndpointName {
				continue
			}
			var st intake.ReviewStats
			if err := json.Unmarshal(e.Data, &st); err != nil {
				t.Fatal(err)
			}
			if st.Verdicts[gated.OutcomeApproved] != 1 || st.Refused["401"] < 3 || st.Refused["409"] < 3 {
				t.Fatalf("operator stats %+v", st)
			}
		}
	})
}

func TestNewEndpointNeedsEverything(t *testing.T) {
	alice, root := newOperatorKey(t), newOperatorKey(t)
	list := operators(t, alice, root)
	r := &fakeResolver{}
	trails := (&auditRec{}).Trail
	hook := func(context.Context, *gated.Verdict) error { return nil }
	for _, tc := range []struct {
		note string
		call func() error
	}{
		{"no list", func() error { _, err := operator.NewEndpoint(nil, r, trails, hook, hook, nil); return err }},
		{"no resolver", func() error { _, err := operator.NewEndpoint(list, nil, trails, hook, hook, nil); return err }},
		{"no trails", func() error { _, err := operator.NewEndpoint(list, r, nil, hook, hook, nil); return err }},
		{"no follow-up hook", func() error { _, err := operator.NewEndpoint(list, r, trails, nil, hook, nil); return err }},
		{"no publish hook", func() error { _, err := operator.NewEndpoint(list, r, trails, hook, nil, nil); return err }},
	} {
		if err := tc.call(); !errors.Is(err, operator.ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", tc.note, err)
		}
	}
}
