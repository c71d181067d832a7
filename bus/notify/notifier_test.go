package notify_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/notify"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/plugins"
)

var testSecret = []byte("notify-test-secret-0123456789abcdef")

// received is one request a test sink got.
type received struct {
	header http.Header
	body   []byte
	at     time.Time
}

// sink is a real HTTP server that answers with answer (200 when nil) and
// keeps every request.
type sink struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []received
	answer func(w http.ResponseWriter, r *http.Request)
}

func newSink(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *sink {
	t.Helper()
	s := &sink{answer: answer}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.got = append(s.got, received{header: r.Header.Clone(), body: body, at: time.Now()})
		s.mu.Unlock()
		if s.answer != nil {
			s.answer(w, r)
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) requests() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.got...)
}

// waitFor polls cond for up to 30 s (a bound, not a speed check).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// env is a real NATS server with gated's streams and an audit writer.
type env struct {
	js  jetstream.JetStream
	aud *audit.Writer
	key []byte
}

func newEnv(t *testing.T) *env {
	t.Helper()
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	if _, err := bus.Setup(t.Context(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	key := []byte("audit-key-of-the-notify-tests-0123456789")
	return &env{js: js, aud: bustest.AuditWriter(t, js, audit.Config{Key: key}), key: key}
}

// start starts a notifier of sinks on e, stopped when the test ends.
func (e *env) start(t *testing.T, obs notify.Observer, sinks ...notify.Sink) *notify.Notifier {
	t.Helper()
	for i := range sinks {
		if sinks[i].Secret == nil {
			sinks[i].Secret = testSecret
		}
		if sinks[i].Format == "" {
			sinks[i].Format = notify.FormatJSON
		}
		if sinks[i].Timeout == 0 {
			sinks[i].Timeout = 2 * time.Second
		}
		if sinks[i].MaxAttempts == 0 {
			sinks[i].MaxAttempts = 3
		}
		if sinks[i].Backoff == 0 {
			sinks[i].Backoff = 10 * time.Millisecond
		}
		if sinks[i].MaxAge == 0 {
			sinks[i].MaxAge = time.Minute
		}
		if sinks[i].Queue == 0 {
			sinks[i].Queue = 64
		}
	}
	n, err := notify.New(e.js, &notify.Config{Sinks: sinks}, notify.Options{
		Trails: e.aud.Trail, Key: e.key, Log: zaptest.NewLogger(t), Observe: obs})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

// append records ev through an audit trail, as gated's parts do.
func (e *env) append(t *testing.T, ev gated.AuditEvent) uint64 {
	t.Helper()
	ev.V, ev.At = gated.SchemaVersion, time.Now().UTC()
	seq, err := e.aud.Trail().Seal(t.Context(), ev)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func data(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// records returns the audit records of event, in stream order.
func (e *env) records(t *testing.T, event string) []*audit.Record {
	t.Helper()
	var out []*audit.Record
	err := audit.Read(t.Context(), e.js, audit.Query{}, func(en audit.Entry) error {
		if en.Record == nil {
			return nil
		}
		if _, ok := en.Record.Find(event); ok {
			out = append(out, en.Record)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func results(t *testing.T, recs []*audit.Record) []notify.Result {
	t.Helper()
	var out []notify.Result
	for _, r := range recs {
		var res notify.Result
		if err := json.Unmarshal(r.Last().Data, &res); err != nil {
			t.Fatal(err)
		}
		out = append(out, res)
	}
	return out
}

// checkSigned verifies a request as a receiver would, and decodes it.
func checkSigned(t *testing.T, r received) notify.Notification {
	t.Helper()
	ts, sig := r.header.Get(wire.NotifyTimestampHeader), r.header.Get(wire.NotifySignatureHeader)
	if err := notify.Verify(testSecret, ts, sig, r.body, time.Now(), 5*time.Minute); err != nil {
		t.Fatalf("the request does not verify: %v", err)
	}
	var n notify.Notification
	if err := json.Unmarshal(r.body, &n); err != nil {
		t.Fatalf("body %s: %v", r.body, err)
	}
	if got := r.header.Get(wire.NotifyIDHeader); got != n.ID || got == "" {
		t.Errorf("%s %q, body id %q", wire.NotifyIDHeader, got, n.ID)
	}
	if got := r.header.Get(wire.NotifyKindHeader); got != string(n.Kind) {
		t.Errorf("%s %q, body kind %q", wire.NotifyKindHeader, got, n.Kind)
	}
	return n
}

// TestNotifierDeliversSignedNotifications appends, through the audit
// trail, the records gated's parts write (a proposal held for an
// operator, a plugin exit, a timed-out verdict, an escalated run, a
// decided verdict): the sinks that take each kind and tenant get it,
// signed; the others do not; every delivery is audited.
func TestNotifierDeliversSignedNotifications(t *testing.T) {
	e := newEnv(t)
	all := newSink(t, nil)
	acme := newSink(t, nil)
	slack := newSink(t, nil)
	e.start(t, notify.Observer{},
		notify.Sink{Name: "all", URL: all.srv.URL + "/hook", Kinds: notify.Kinds},
		notify.Sink{Name: "globex-only", URL: acme.srv.URL, Kinds: notify.Kinds, Tenants: []string{"globex"}},
		notify.Sink{Name: "slack", URL: slack.srv.URL, Kinds: []notify.Kind{notify.KindAwaitingOperator}, Format: notify.FormatSlack},
	)

	deadline := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	awaited := e.append(t, gated.AuditEvent{Event: gated.EventOperatorAwaited, Tenant: "acme", ProposalID: "p-held",
		Data: data(t, map[string]any{"action": "db_drop_table", "deadline": deadline, "reason": "tenant_wide destructive change", "rule": "route_operator"})})
	e.append(t, gated.AuditEvent{Event: plugins.EventPluginExited, Tenant: gated.UnknownTenant,
		Data: data(t, map[string]any{"plugin": "llm", "pid": 42})})
	e.append(t, gated.AuditEvent{Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p-late",
		Data: data(t, map[string]any{"proposal_id": "p-late", "tenant": "acme", "action": "host_restart_service", "outcome": "timeout", "reason": "the operator's deadline passed"})})
	e.append(t, gated.AuditEvent{Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p-run",
		Data: data(t, map[string]any{"outcome": "rejected", "reason": "round 3 failed", "run": map[string]any{"run_id": "r1", "round": 3, "next": "escalation"}})})
	// A held verdict makes no notification of its own: operator.awaited does.
	e.append(t, gated.AuditEvent{Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p-held",
		Data: data(t, map[string]any{"outcome": "blocked", "reason": "held", "awaiting_operator": map[string]any{"deadline": deadline, "reason": "tenant_wide destructive change"}})})
	e.append(t, gated.AuditEvent{Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p-ok",
		Data: data(t, map[string]any{"action": "host_list_services", "outcome": "approved", "reason": "read"})})
	// Another tenant's: only the unscoped sink and globex's get it.
	e.append(t, gated.AuditEvent{Event: gated.EventOperatorAwaited, Tenant: "globex", ProposalID: "p-g",
		Data: data(t, map[string]any{"deadline": deadline, "reason": "listed action"})})

	// 6 to the unscoped sink, globex's 1 to its sink, 2 to the slack sink.
	waitFor(t, "9 notify.delivered records", func() bool { return len(e.records(t, gated.EventNotifyDelivered)) >= 9 })

	var kinds []string
	for _, r := range all.requests() {
		n := checkSigned(t, r)
		kinds = append(kinds, string(n.Kind)+":"+n.Tenant+"."+n.ProposalID)
		if n.Kind == notify.KindAwaitingOperator && n.ProposalID == "p-held" {
			if n.AuditSeq != awaited || n.ID != fmt.Sprintf("audit-%d", awaited) || n.Action != "db_drop_table" ||
				!strings.Contains(n.Summary, deadline) || !strings.Contains(n.Summary, "tenant_wide destructive change") {
				t.Errorf("awaiting_operator notification %+v", n)
			}
		}
	}
	want := []string{"awaiting_operator:acme.p-held", "plugin_down:_.", "timeout:acme.p-late", "escalation:acme.p-run",
		"decided:acme.p-ok", "awaiting_operator:globex.p-g"}
	if strings.Join(kinds, " ") != strings.Join(want, " ") {
		t.Errorf("the unscoped sink got\n %v\nwant\n %v", kinds, want)
	}
	if got := acme.requests(); len(got) != 1 || checkSigned(t, got[0]).Tenant != "globex" {
		t.Errorf("the sink scoped to globex got %d requests, want globex's one", len(got))
	}
	sl := slack.requests()
	if len(sl) != 2 {
		t.Fatalf("the slack sink got %d requests, want the 2 awaiting_operator", len(sl))
	}
	if err := notify.Verify(testSecret, sl[0].header.Get(wire.NotifyTimestampHeader), sl[0].header.Get(wire.NotifySignatureHeader), sl[0].body, time.Now(), time.Minute); err != nil {
		t.Error(err)
	}
	var msg struct {
		Text   string            `json:"text"`
		Blocks []json.RawMessage `json:"blocks"`
	}
	if err := json.Unmarshal(sl[0].body, &msg); err != nil || !strings.HasPrefix(msg.Text, "gated: awaiting_operator: proposal acme.p-held") || len(msg.Blocks) != 2 {
		t.Errorf("slack body %s (%v)", sl[0].body, err)
	}
	delivered := results(t, e.records(t, gated.EventNotifyDelivered))
	if len(delivered) != 9 {
		t.Errorf("%d notify.delivered records, want 9", len(delivered))
	}
	for _, res := range delivered {
		if !res.Delivered || res.Attempts != 1 || res.Status != 200 || res.Notification == "" || strings.Contains(res.Endpoint, "/hook") {
			t.Errorf("delivered record %+v", res)
		}
	}
	if got := e.records(t, gated.EventNotifyFailed); len(got) != 0 {
		t.Errorf("%d notify.failed records, want none", len(got))
	}
}

// TestNotifierRetriesWithinBounds has sinks that answer 500, redirect,
// hang, and refuse (404): each is tried as often as its bounds allow and
// no more, a redirect is never followed, and each failure is audited with
// its attempts and why.
func TestNotifierRetriesWithinBounds(t *testing.T) {
	e := newEnv(t)
	target := newSink(t, nil)
	failing := newSink(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	redirect := newSink(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.srv.URL, http.StatusTemporaryRedirect)
	})
	release := make(chan struct{})
	hanging := newSink(t, func(http.ResponseWriter, *http.Request) { <-release })
	defer close(release)
	refusing := newSink(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) })
	var mu sync.Mutex
	retries := map[string]int{}
	kinds := []notify.Kind{notify.KindTimeout}
	e.start(t, notify.Observer{Retry: func(s string) { mu.Lock(); retries[s]++; mu.Unlock() }},
		notify.Sink{Name: "failing", URL: failing.srv.URL, Kinds: kinds, MaxAttempts: 4},
		notify.Sink{Name: "redirect", URL: redirect.srv.URL, Kinds: kinds, MaxAttempts: 3},
		notify.Sink{Name: "hanging", URL: hanging.srv.URL, Kinds: kinds, MaxAttempts: 2, Timeout: 200 * time.Millisecond},
		notify.Sink{Name: "refusing", URL: refusing.srv.URL, Kinds: kinds, MaxAttempts: 5},
	)
	e.append(t, gated.AuditEvent{Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p1",
		Data: data(t, map[string]any{"outcome": "timeout", "reason": "deadline"})})
	waitFor(t, "4 notify.failed records", func() bool { return len(e.records(t, gated.EventNotifyFailed)) >= 4 })

	want := map[string]struct {
		attempts, hits int
		status         int
		says           string
	}{
		"failing":  {4, 4, 500, "answered 500; gave up after max_attempts 4"},
		"redirect": {3, 3, 307, "redirects are not followed"},
		"hanging":  {2, 2, 0, "no answer within the timeout 200ms"},
		"refusing": {1, 1, 404, "not retried"},
	}
	hits := map[string]int{"failing": len(failing.requests()), "redirect": len(redirect.requests()),
		"hanging": len(hanging.requests()), "refusing": len(refusing.requests())}
	failed := results(t, e.records(t, gated.EventNotifyFailed))
	if len(failed) != len(want) {
		t.Errorf("%d notify.failed records, want %d", len(failed), len(want))
	}
	for _, res := range failed {
		w := want[res.Sink]
		if res.Delivered || res.Attempts != w.attempts || res.Status != w.status || !strings.Contains(res.Error, w.says) {
			t.Errorf("%s: failure record %+v, want %d attempts, status %d, error with %q", res.Sink, res, w.attempts, w.status, w.says)
		}
		if hits[res.Sink] != w.hits {
			t.Errorf("%s: the sink got %d requests, want %d", res.Sink, hits[res.Sink], w.hits)
		}
		mu.Lock()
		if retries[res.Sink] != w.attempts-1 {
			t.Errorf("%s: %d retries counted, want %d", res.Sink, retries[res.Sink], w.attempts-1)
		}
		mu.Unlock()
	}
	if n := len(target.requests()); n != 0 {
		t.Errorf("the redirect's target got %d requests: a redirect was followed", n)
	}
	if got := e.records(t, gated.EventNotifyDelivered); len(got) != 0 {
		t.Errorf("%d notify.delivered records, want none", len(got))
	}
}

// TestNotifierFullQueueFailsAtOnce fills a hanging sink's queue of one:
// notifications beyond it fail at once, audited, and another sink still
// gets every one of them.
func TestNotifierFullQueueFailsAtOnce(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	hanging := newSink(t, func(http.ResponseWriter, *http.Request) { <-release })
	defer close(release)
	good := newSink(t, nil)
	kinds := []notify.Kind{notify.KindDecided}
	e.start(t, notify.Observer{},
		notify.Sink{Name: "hanging", URL: hanging.srv.URL, Kinds: kinds, Queue: 1, Timeout: time.Minute, MaxAttempts: 1},
		notify.Sink{Name: "good", URL: good.srv.URL, Kinds: kinds},
	)
	e.append(t, gated.AuditEvent{Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p0",
		Data: data(t, map[string]any{"outcome": "approved"})})
	waitFor(t, "the hanging sink to hold the first request", func() bool { return len(hanging.requests()) == 1 })
	const more = 5
	for i := 1; i <= more; i++ {
		e.append(t, gated.AuditEvent{Event: gated.EventVerdict, Tenant: "acme", ProposalID: fmt.Sprintf("p%d", i),
			Data: data(t, map[string]any{"outcome": "approved"})})
	}
	// One waits in the queue; the other four find it full.
	waitFor(t, "4 queue-full failures", func() bool { return len(e.records(t, gated.EventNotifyFailed)) >= more-1 })
	waitFor(t, "the good sink to get all 6", func() bool { return len(good.requests()) >= more+1 })
	if n := len(good.requests()); n != more+1 {
		t.Errorf("the good sink got %d requests, want %d", n, more+1)
	}
	failed := results(t, e.records(t, gated.EventNotifyFailed))
	if len(failed) != more-1 {
		t.Errorf("%d notify.failed records, want %d", len(failed), more-1)
	}
	for _, res := range failed {
		if res.Sink != "hanging" || res.Attempts != 0 || !strings.Contains(res.Error, "queue is full") {
			t.Errorf("failure record %+v, want the hanging sink's queue full, no attempt", res)
		}
	}
}

// TestNotifierVerifiesTheStream writes to the audit stream what gated
// does not: a message that is not a record, a record MACed with another
// key, and a record whose chain link was altered. Each is appended as an
// audit.verification_failed record and notified; gated's own records are
// not.
func TestNotifierVerifiesTheStream(t *testing.T) {
	e := newEnv(t)
	hook := newSink(t, nil)
	var mu sync.Mutex
	var problems []audit.Problem
	e.start(t, notify.Observer{VerificationFailed: func(p audit.Problem) { mu.Lock(); problems = append(problems, p); mu.Unlock() }},
		notify.Sink{Name: "audit", URL: hook.srv.URL, Kinds: []notify.Kind{notify.KindAuditVerificationFailed}})

	first := e.append(t, gated.AuditEvent{Event: gated.EventReceived, Tenant: "acme", ProposalID: "p1"})
	if _, err := e.js.Publish(t.Context(), wire.AuditSubject("acme", "verdict.decided"), []byte(`{"outcome":"approved"}`)); err != nil {
		t.Fatal(err)
	}
	ev := gated.AuditEvent{V: gated.SchemaVersion, Event: gated.EventVerdict, Tenant: "globex", ProposalID: "p2", At: time.Now().UTC(),
		Data: data(t, map[string]any{"outcome": "approved"})}
	forged, err := audit.NewMsg(ev, audit.Chain{N: 1}, []byte("not-gated's-key-0123456789abcdef-0123"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.PublishMsg(t.Context(), forged); err != nil {
		t.Fatal(err)
	}
	// Two records of tenant initech, the second linked to a record that
	// is not the first.
	e.append(t, gated.AuditEvent{Event: gated.EventReceived, Tenant: "initech", ProposalID: "p3"})
	var n uint64
	for _, r := range e.records(t, gated.EventReceived) {
		if r.Tenant == "initech" {
			n = r.Chain.N
		}
	}
	relinked, err := audit.NewMsg(gated.AuditEvent{V: gated.SchemaVersion, Event: gated.EventReviewStarted, Tenant: "initech", ProposalID: "p3", At: time.Now().UTC()},
		audit.Chain{N: n + 1, Prev: strings.Repeat("ab", 32)}, e.key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.PublishMsg(t.Context(), relinked); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "3 audit_verification_failed notifications", func() bool { return len(hook.requests()) >= 3 })
	var got []string
	if n := len(hook.requests()); n != 3 {
		t.Errorf("%d notifications, want 3", n)
	}
	for _, r := range hook.requests() {
		n := checkSigned(t, r)
		got = append(got, n.Tenant+": "+n.Summary)
	}
	for i, want := range []string{"acme: audit stream message", "globex: audit stream message", "initech: audit stream message"} {
		if i >= len(got) || !strings.HasPrefix(got[i], want) {
			t.Errorf("notification %d: %v, want one starting %q", i, got, want)
		}
	}
	for i, want := range []string{"not a valid gated audit record", "MACed with key", "does not link to record"} {
		if i >= len(got) || !strings.Contains(got[i], want) {
			t.Errorf("notification %d: %v, want one saying %q", i, got, want)
		}
	}
	if recs := e.records(t, gated.EventAuditVerificationFailed); len(recs) != 3 {
		t.Errorf("%d audit.verification_failed records, want 3", len(recs))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		if p.Seq <= first {
			t.Errorf("gated's own record %d was reported: %+v", p.Seq, p)
		}
	}
}

// TestNotifierSurvivesRestart stops the notifier, appends while none
// runs, and starts two that share the durable consumer: the record
// appended meanwhile is notified, once.
func TestNotifierSurvivesRestart(t *testing.T) {
	e := newEnv(t)
	hook := newSink(t, nil)
	s := notify.Sink{Name: "hook", URL: hook.srv.URL, Kinds: []notify.Kind{notify.KindAwaitingOperator}}
	first := e.start(t, notify.Observer{}, s)
	e.append(t, gated.AuditEvent{Event: gated.EventOperatorAwaited, Tenant: "acme", ProposalID: "before"})
	waitFor(t, "the first notification", func() bool { return len(hook.requests()) >= 1 })
	first.Stop()

	e.append(t, gated.AuditEvent{Event: gated.EventOperatorAwaited, Tenant: "acme", ProposalID: "meanwhile"})
	e.start(t, notify.Observer{}, s)
	e.start(t, notify.Observer{}, s)
	for i := range 5 {
		e.append(t, gated.AuditEvent{Event: gated.EventOperatorAwaited, Tenant: "acme", ProposalID: fmt.Sprintf("after-%d", i)})
	}
	waitFor(t, "7 notify.delivered records", func() bool { return len(e.records(t, gated.EventNotifyDelivered)) >= 7 })
	seen := map[string]int{}
	for _, r := range hook.requests() {
		seen[checkSigned(t, r).ProposalID]++
	}
	if seen["meanwhile"] != 1 || len(seen) != 7 {
		t.Errorf("notifications by proposal: %v; want each of the 7 once, the one appended while none ran included", seen)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s notified %d times", id, c)
		}
	}
}
