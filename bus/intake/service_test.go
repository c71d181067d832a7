package intake_test

import (
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
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/intake"
)

func startService(t *testing.T, g *gate, cfg intake.ServiceConfig) *intake.Service {
	t.Helper()
	if cfg.Version == "" {
		cfg.Version = "v1.4.0"
	}
	svc, err := intake.StartService(g.NC, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop(0) })
	return svc
}

// request sends data to subject on a connection of its own, as a fleet
// would, and returns the reply.
func request(t *testing.T, g *gate, subject string, data []byte) *nats.Msg {
	t.Helper()
	nc, err := nats.Connect(g.NC.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		t.Fatalf("request on %s: %v", subject, err)
	}
	return m
}

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

func TestServiceRepliesWithTheVerdict(t *testing.T) {
	g := startGate(t, nil, bus.Config{})
	startService(t, g, intake.ServiceConfig{})
	tests := []struct {
		note    string
		subject string
		data    []byte
		outcome gated.Outcome
	}{
		{note: "gated.review, read", subject: "gated.review", data: bustest.Proposal("svc-1", "read", "host_list_services", ""), outcome: gated.OutcomeApproved},
		{note: "gated.review.acme, read", subject: "gated.review.acme", data: bustest.Proposal("svc-2", "read", "host_list_services", ""), outcome: gated.OutcomeApproved},
		{note: "gated.review.acme, skip_review", subject: "gated.review.acme", data: bustest.Proposal("svc-3", "write", "host_restart_service", `,"flags":{"skip_review":true}`), outcome: gated.OutcomeRejected},
		{note: "invalid but addressable", subject: "gated.review.acme", data: bustest.Proposal("svc-4", "maybe", "host_restart_service", ""), outcome: gated.OutcomeInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			v := replyVerdict(t, request(t, g, tc.subject, tc.data))
			if v.Outcome != tc.outcome {
				t.Fatalf("outcome %s (%s), want %s", v.Outcome, v.Reason, tc.outcome)
			}
			// The same durable path: stored and audited like any proposal.
			stored, err := g.Client.Verdict(t.Context(), v.Tenant, v.ProposalID)
			if err != nil || stored.AuditSeq != v.AuditSeq {
				t.Fatalf("stored verdict %+v (%v), replied audit_seq %d", stored, err, v.AuditSeq)
			}
			if events := bustest.AuditEvents(t, g.Resources.Audit, v.Tenant, v.ProposalID); len(events) == 0 || events[len(events)-1] != gated.EventVerdict {
				t.Fatalf("audit events %v", events)
			}
		})
	}
	// The client's RequestReview goes to gated.review.<tenant>.
	v, err := g.Client.RequestReview(t.Context(), bustest.Proposal("svc-5", "read", "host_list_services", ""))
	if err != nil || !v.Approved {
		t.Fatalf("RequestReview: %+v, %v", v, err)
	}
	// A request replayed returns the stored verdict.
	again := replyVerdict(t, request(t, g, "gated.review", bustest.Proposal("svc-1", "read", "host_list_services", "")))
	if again.AuditSeq == 0 {
		t.Fatal("replay has no audit_seq")
	}
}

func TestServiceDiscovery(t *testing.T) {
	g := startGate(t, nil, bus.Config{})
	startService(t, g, intake.ServiceConfig{Version: "dev"})
	replyVerdict(t, request(t, g, "gated.review", bustest.Proposal("disc-1", "read", "host_list_services", "")))
	replyVerdict(t, request(t, g, "gated.review.acme", bustest.Proposal("disc-2", "read", "host_list_services", "")))
	replyVerdict(t, request(t, g, "gated.review.acme", bustest.Proposal("disc-3", "write", "host_restart_service", `,"flags":{"skip_review":true}`)))
	request(t, g, "gated.review.initech", bustest.Proposal("disc-4", "read", "host_list_services", "")) // refused: another tenant

	var info micro.Info
	if err := json.Unmarshal(request(t, g, "$SRV.INFO.gated", nil).Data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Name != intake.ServiceName || info.Version != "0.0.0-dev" || info.Metadata["gated_version"] != "dev" || info.Description == "" {
		t.Fatalf("info identity: %+v", info)
	}
	subjects := map[string]string{}
	for _, ep := range info.Endpoints {
		subjects[ep.Name] = ep.Subject
		if ep.QueueGroup != intake.ReviewQueueGroup {
			t.Errorf("endpoint %s in queue group %q, want %q", ep.Name, ep.QueueGroup, intake.ReviewQueueGroup)
		}
	}
	if subjects[intake.ReviewEndpoint] != "gated.review" || subjects[intake.TenantReviewEndpoint] != "gated.review.*" || len(subjects) != 2 {
		t.Fatalf("endpoints %v", subjects)
	}

	var ping micro.Ping
	if err := json.Unmarshal(request(t, g, "$SRV.PING.gated", nil).Data, &ping); err != nil || ping.Name != intake.ServiceName {
		t.Fatalf("ping %+v, %v", ping, err)
	}

	// The service counts a request once its handler has answered it, so
	// the last answer can reach this test before its count does: ask
	// again until the counts settle, within a bound.
	var review, tenant *micro.EndpointStats
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var stats micro.Stats
		if err := json.Unmarshal(request(t, g, "$SRV.STATS.gated", nil).Data, &stats); err != nil {
			t.Fatal(err)
		}
		byName := map[string]*micro.EndpointStats{}
		for _, ep := range stats.Endpoints {
			byName[ep.Name] = ep
		}
		review, tenant = byName[intake.ReviewEndpoint], byName[intake.TenantReviewEndpoint]
		if review == nil || tenant == nil {
			t.Fatalf("stats endpoints %v", byName)
		}
		if review.NumRequests+tenant.NumRequests >= 4 || time.Now().After(deadline) {
			break
		}
	}
	if review.NumRequests != 1 || tenant.NumRequests != 3 || tenant.NumErrors != 1 || review.NumErrors != 0 {
		t.Fatalf("requests %d/%d, errors %d/%d; want 1/3 and 0/1", review.NumRequests, tenant.NumRequests, review.NumErrors, tenant.NumErrors)
	}
	var data intake.ReviewStats
	if err := json.Unmarshal(tenant.Data, &data); err != nil {
		t.Fatalf("endpoint data: %v\n%s", err, tenant.Data)
	}
	if data.Verdicts[gated.OutcomeApproved] != 1 || data.Verdicts[gated.OutcomeRejected] != 1 || data.Refused["403"] != 1 || data.InFlight != 0 {
		t.Fatalf("review stats %+v", data)
	}
}

func TestServiceRefusals(t *testing.T) {
	g := startGate(t, nil, bus.Config{})
	startService(t, g, intake.ServiceConfig{MaxBytes: 4096})
	big := bustest.Proposal("big-1", "read", "host_list_services", `,"reason":"`+strings.Repeat("x", 5000)+`"`)
	tests := []struct {
		note    string
		subject string
		data    []byte
		code    string
		say     string
		is      error
	}{
		{note: "not JSON", subject: "gated.review", data: []byte("restart everything"), code: "400", say: "cannot be addressed", is: fleet.ErrBadProposal},
		{note: "empty", subject: "gated.review", data: nil, code: "400", say: "cannot be addressed", is: fleet.ErrBadProposal},
		{note: "no tenant", subject: "gated.review", data: []byte(`{"id":"x","action":"y"}`), code: "400", say: "tenant", is: fleet.ErrBadProposal},
		{note: "dotted id", subject: "gated.review.acme", data: []byte(`{"tenant":"acme","id":"a.b","action":"y"}`), code: "400", say: "id", is: fleet.ErrBadProposal},
		{note: "bad action", subject: "gated.review.acme", data: []byte(`{"tenant":"acme","id":"ab","action":"y z"}`), code: "400", say: "action", is: fleet.ErrBadProposal},
		{note: "oversize", subject: "gated.review", data: big, code: "413", say: "byte limit", is: fleet.ErrBadProposal},
		{note: "another tenant", subject: "gated.review.initech", data: bustest.Proposal("mis-1", "read", "host_list_services", ""), code: "403", say: `tenant "acme"`, is: fleet.ErrTenantMismatch},
		{note: "bad subject tenant", subject: "gated.review.ACME", data: bustest.Proposal("mis-2", "read", "host_list_services", ""), code: "400", say: "tenant token"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			m := request(t, g, tc.subject, tc.data)
			code, desc := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)
			if code != tc.code || !strings.Contains(desc, tc.say) {
				t.Fatalf("reply %q %q, want %s saying %q", code, desc, tc.code, tc.say)
			}
			if tc.is != nil {
				n := 0
				_, _ = fmt.Sscan(code, &n)
				if err := error(&fleet.ServiceError{Code: n, Description: desc}); !errors.Is(err, tc.is) {
					t.Fatalf("%v does not match %v", err, tc.is)
				}
			}
		})
	}
	// Nothing refused was published.
	info, err := g.Resources.Proposals.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.FirstSeq != 0 || info.State.LastSeq != 0 {
		t.Fatalf("refused requests reached the proposal stream: %+v", info.State)
	}
}

// startHeldGate is startGate with every proposal held by k until it opens
// (at the latest when the test ends, before the worker stops).
func startHeldGate(t *testing.T, k *bustest.Gatekeeper) *gate {
	t.Helper()
	return &gate{bustest.StartHeldFleet(t, k)}
}

// TestServiceServesConcurrently holds every proposal in the worker until
// all three requests have been published: a service that served requests
// one at a time would never publish the second, and every request would
// end in a 504.
func TestServiceServesConcurrently(t *testing.T) {
	k := bustest.NewGatekeeper()
	g := startHeldGate(t, k)
	startService(t, g, intake.ServiceConfig{Wait: 30 * time.Second})
	const n = 3
	type result struct {
		v   *gated.Verdict
		err error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			v, err := g.Client.RequestReview(t.Context(), bustest.Proposal(fmt.Sprintf("conc-%d", i), "read", "host_list_services", ""))
			results <- result{v, err}
		}()
	}
	for range n {
		select {
		case <-k.Arrived:
		case r := <-results:
			t.Fatalf("a request ended before all %d were in flight: %+v, %v", n, r.v, r.err)
		}
	}
	k.Open()
	for range n {
		r := <-results
		if r.err != nil || !r.v.Approved {
			t.Fatalf("verdict %+v, err %v", r.v, r.err)
		}
	}
}

func TestServiceOverloadedAndTimedOut(t *testing.T) {
	k := bustest.NewGatekeeper()
	g := startHeldGate(t, k)
	startService(t, g, intake.ServiceConfig{MaxConcurrent: 1, Wait: 500 * time.Millisecond})
	first := make(chan error, 1)
	go func() {
		_, err := g.Client.RequestReview(t.Context(), bustest.Proposal("over-1", "read", "host_list_services", ""))
		first <- err
	}()
	<-k.Arrived // the first request holds the only slot
	_, err := g.Client.RequestReview(t.Context(), bustest.Proposal("over-2", "read", "host_list_services", ""))
	var se *fleet.ServiceError
	if !errors.As(err, &se) || se.Code != 503 || !errors.Is(err, fleet.ErrServiceUnavailable) || !strings.Contains(se.Description, "overloaded") {
		t.Fatalf("second request: err = %v, want 503 overloaded", err)
	}
	// The first request's verdict is held past the service's wait.
	err = <-first
	if !errors.As(err, &se) || se.Code != 504 || !errors.Is(err, fleet.ErrNoVerdict) || !strings.Contains(se.Description, "gated verdict get acme over-1") {
		t.Fatalf("held request: err = %v, want 504 naming the look-up", err)
	}
}

func TestServiceStop(t *testing.T) {
	k := bustest.NewGatekeeper()
	g := startHeldGate(t, k)
	svc := startService(t, g, intake.ServiceConfig{})
	held := make(chan error, 1)
	go func() {
		_, err := g.Client.RequestReview(t.Context(), bustest.Proposal("stop-1", "read", "host_list_services", ""))
		held <- err
	}()
	<-k.Arrived
	svc.Stop(0)
	svc.Stop(0) // idempotent
	err := <-held
	var se *fleet.ServiceError
	if !errors.As(err, &se) || se.Code != 503 || !strings.Contains(se.Description, "stopping") {
		t.Fatalf("request in flight at Stop: err = %v, want 503 stopping", err)
	}
	if _, err := g.Client.RequestReview(t.Context(), bustest.Proposal("stop-2", "read", "host_list_services", "")); !errors.Is(err, fleet.ErrServiceUnavailable) {
		t.Fatalf("after Stop: err = %v, want ErrServiceUnavailable", err)
	}
	var nilService *intake.Service
	nilService.Stop(0) // serve calls Stop on a service it did not start
}

func TestServiceConfigErrors(t *testing.T) {
	g := startGate(t, nil, bus.Config{})
	for _, cfg := range []intake.ServiceConfig{{Wait: -time.Second}, {MaxConcurrent: -1}, {MaxBytes: -1}} {
		if _, err := intake.StartService(g.NC, cfg, nil); !errors.Is(err, bus.ErrInvalidConfig) {
			t.Errorf("StartService(%+v): err = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

// TestServiceRefusesGatedReplySubjects: a requester chooses the reply
// subject, and gated must not publish its answer with its own rights where
// the requester could not: another tenant's verdicts, the audit stream,
// the proposal stream, the server's API.
func TestServiceRefusesGatedReplySubjects(t *testing.T) {
	g := startGate(t, nil, bus.Config{})
	startService(t, g, intake.ServiceConfig{})
	watch, err := nats.Connect(g.NC.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	landed := make(chan *nats.Msg, 16)
	for _, s := range []string{"gated.verdicts.globex.>", "gated.audit.globex.>", "gated.proposals.globex.>", "$KV.GATED_VERDICTS.globex.>"} {
		if _, err := watch.ChanSubscribe(s, landed); err != nil {
			t.Fatal(err)
		}
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	sender, err := nats.Connect(g.NC.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	for i, reply := range []string{"gated.verdicts.globex.x", "gated.audit.globex.forged", "gated.proposals.globex.host_list_services", "$KV.GATED_VERDICTS.globex.x"} {
		msg := &nats.Msg{Subject: "gated.review.acme", Reply: reply, Data: bustest.Proposal(fmt.Sprintf("reply-%d", i), "read", "host_list_services", "")}
		if err := sender.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := sender.Flush(); err != nil {
		t.Fatal(err)
	}
	// A request with a proper inbox, sent after the others on the same
	// endpoint, is answered; by then the refused ones were handled.
	v := replyVerdict(t, request(t, g, "gated.review.acme", bustest.Proposal("reply-ok", "read", "host_list_services", "")))
	if v.ProposalID != "reply-ok" {
		t.Fatalf("answered %s, want reply-ok", v.ProposalID)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-landed:
		t.Fatalf("gated published on %s, a reply subject it must refuse: %s", m.Subject, m.Data)
	default:
	}
}
