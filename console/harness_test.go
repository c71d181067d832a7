package console_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/budget"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/notify"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/bus/status"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/console"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/policies"
)

// operatorKey is an operator's nkey: the seed it signs with and the
// public key gated lists.
type operatorKey struct {
	id   string
	seed []byte
	pub  string
}

func newOperatorKey(t testing.TB, id string) operatorKey {
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
	return operatorKey{id: id, seed: seed, pub: pub}
}

// signRaw signs data with k's seed, base64 as gated reads signatures.
func (k operatorKey) signRaw(t testing.TB, data []byte) string {
	t.Helper()
	kp, err := nkeys.FromSeed(k.seed)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := kp.Sign(data)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(sig)
}

// gate is gated running on an in-process NATS server: the intake deciding
// with the real engine and default policy, the audit trail with a key,
// the operator endpoint, a fleet client, and the console on an HTTP test
// server. Operators: alice (acme), bob (globex), root (every tenant).
type gate struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	res      *bus.Resources
	store    *store.Verdicts
	budgets  *budget.Store
	fleet    *fleet.Client
	console  *console.Server
	http     *httptest.Server
	auditKey []byte
	alice    operatorKey
	bob      operatorKey
	root     operatorKey
	mallory  operatorKey // not listed
	// ahead moves the console's clock forward.
	ahead atomic.Int64
	// trails starts a trail of the audit writer gated uses.
	trails func() engine.AuditTrail
	// hooks receives the webhook notifications of a notifier reading the
	// audit stream, each checked against its HMAC signature.
	hooks *webhook
	// intercept, when set, sees each request to the console before the
	// console serves it, and may hold it; what it returns, if not nil, is
	// called once the console answered.
	intercept atomic.Pointer[func(*http.Request) func()]
}

// webhook is a sink's HTTP endpoint: it keeps the notifications whose
// signature verifies, and counts those that do not.
type webhook struct {
	mu     sync.Mutex
	got    []notify.Notification
	forged int
}

func (h *webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	err := notify.Verify(webhookSecret, r.Header.Get(wire.NotifyTimestampHeader), r.Header.Get(wire.NotifySignatureHeader), body, time.Now(), time.Minute)
	var n notify.Notification
	if err != nil || json.Unmarshal(body, &n) != nil {
		h.forged++
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	h.got = append(h.got, n)
}

// kinds lists the kinds of the notifications received for a proposal.
func (h *webhook) kinds(tenant, id string) (kinds []notify.Kind, forged int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.got {
		if n.Tenant == tenant && n.ProposalID == id {
			kinds = append(kinds, n.Kind)
		}
	}
	return kinds, h.forged
}

// webhookSecret signs the test's webhook notifications.
var webhookSecret = []byte("console-test-webhook-secret-0123456789")

func startGate(t *testing.T) *gate {
	t.Helper()
	return startGateWith(t, gateOptions{})
}

// startGateWithShadow starts the gate with the policy of shadowDir beside
// the live one, when it is not "" (serve --shadow-policies).
func startGateWithShadow(t *testing.T, shadowDir string) *gate {
	t.Helper()
	return startGateWith(t, gateOptions{shadow: shadowDir})
}

// gateOptions are what a gate runs beside the default: no shadow policy,
// no reviewer plugin (a proposal that needs review is blocked), the
// built-in budgets.
type gateOptions struct {
	// shadow is the directory of a shadow policy (serve --shadow-policies).
	shadow string
	// reviewer reviews through the bundled SOP reviewer in a plugin
	// process (this test binary, relaunched: see TestMain).
	reviewer bool
	// budgets is a budgets file's content (serve --budgets).
	budgets string
}

// sopPlugins runs the bundled SOP reviewer out of process.
func sopPlugins(t *testing.T) *plugins.Host { return bustest.SOPHost(t, pluginEnv) }

// startGateWith starts the gate with opts.
func startGateWith(t *testing.T, opts gateOptions) *gate {
	t.Helper()
	shadowDir := opts.shadow
	s := natstest.Server(t)
	nc, js := natstest.Connect(t, s)
	ctx := t.Context()
	res, err := bus.Setup(ctx, js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{nc: nc, js: js, res: res, store: store.New(res.Verdicts), auditKey: make([]byte, audit.MinKeyLen)}
	_, _ = rand.Read(g.auditKey)
	g.alice, g.bob, g.root, g.mallory = newOperatorKey(t, "alice"), newOperatorKey(t, "bob"), newOperatorKey(t, "root"), newOperatorKey(t, "mallory")
	ops, err := operator.ParseList("operators.yaml", fmt.Appendf(nil,
		"operators:\n  - id: alice\n    key: %s\n    tenants: [acme]\n  - id: bob\n    key: %s\n    tenants: [globex]\n  - id: root\n    key: %s\n",
		g.alice.pub, g.bob.pub, g.root.pub))
	if err != nil {
		t.Fatal(err)
	}
	// The live policy is the default bundle holding every dns_* action
	// for an operator (config.operator_holds).
	holds := filepath.Join(t.TempDir(), "holds.yaml")
	if err := os.WriteFile(holds, []byte("gated:\n  config:\n    operator_holds:\n      actions: {\"*\": [\"dns_*\"]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	live := compilePolicy(t, policies.Sources{DataFiles: []string{holds}})
	reg, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	var limits *budget.Config
	if opts.budgets != "" {
		if limits, err = budget.ParseConfig("budgets.yaml", []byte(opts.budgets)); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := budget.Setup(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	g.budgets = budget.New(kv, limits, nil)
	cfg := engine.Config{Policy: live, Personas: reg, Router: bustest.NoPlugins{}, Store: g.store, Budgets: g.budgets}
	if opts.reviewer {
		cfg.Router = sopPlugins(t)
	}
	if shadowDir != "" {
		cfg.Shadow = compilePolicy(t, policies.Sources{Dir: shadowDir})
	}
	eng, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	aud := natstest.AuditWriter(t, js, audit.Config{Key: g.auditKey})
	// Every trail publishes the proposal's status where someone listens,
	// as serve's do: the embedded server says who subscribes, and a
	// watch's ask is answered.
	statuses := status.NewPublisher(nc, zaptest.NewLogger(t))
	statuses.SetInterest(s.GlobalAccount().SubscriptionInterest)
	if err := statuses.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(statuses.Stop)
	g.trails = statuses.Trails(aud.Trail)
	w, err := intake.NewWorker(nc, js, res, eng, g.trails, bus.Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(5 * time.Second) })
	publish := func(_ context.Context, v *gated.Verdict) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return nc.Publish(wire.VerdictSubject(v.Tenant, v.ProposalID), data)
	}
	ep, err := operator.NewEndpoint(ops, eng, g.trails, intake.NewFollowUps(js, g.store).Send, publish, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := intake.StartService(nc, intake.ServiceConfig{Operators: ep}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop(0) })
	if g.fleet, err = fleet.NewClient(nc); err != nil {
		t.Fatal(err)
	}
	g.console, err = console.New(console.Config{
		NC: nc, JS: js, Verdicts: res.Verdicts, Operators: ops, Trails: g.trails, AuditKeys: [][]byte{g.auditKey},
		System: func(context.Context) any {
			return map[string]any{"plugins": []map[string]any{{"name": "sop", "version": "1", "running": true, "pid": 42}}, "policy": map[string]any{"revision": "test-rev"}}
		},
		Budgets: g.budgets,
		Log:     zaptest.NewLogger(t),
		Now:     func() time.Time { return time.Now().Add(time.Duration(g.ahead.Load())) },
	})
	if err != nil {
		t.Fatal(err)
	}
	g.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f := g.intercept.Load(); f != nil {
			if answered := (*f)(r); answered != nil {
				defer answered()
			}
		}
		g.console.ServeHTTP(w, r)
	}))
	// The console's feeds end first, or the test server's Close would
	// wait on them.
	t.Cleanup(g.http.Close)
	t.Cleanup(g.console.Close)
	return g
}

// notifyHooks starts a notifier reading the audit stream, with one sink
// taking awaiting_operator and decided notifications to g.hooks. Only the
// tests that read the webhook start it: its notify.* records join the
// tenants' trails.
func (g *gate) notifyHooks(t *testing.T) {
	t.Helper()
	g.hooks = &webhook{}
	hookSrv := httptest.NewServer(g.hooks)
	t.Cleanup(hookSrv.Close)
	n, err := notify.New(g.js, &notify.Config{Sinks: []notify.Sink{{
		Name: "ops", URL: hookSrv.URL, Kinds: []notify.Kind{notify.KindAwaitingOperator, notify.KindDecided},
		Format: notify.FormatJSON, Secret: webhookSecret, Timeout: 2 * time.Second, MaxAttempts: 3,
		Backoff: 10 * time.Millisecond, MaxAge: time.Minute, Queue: 64,
	}}}, notify.Options{Trails: g.trails, Key: g.auditKey, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
}

// compilePolicy loads and compiles the bundle of src.
func compilePolicy(t *testing.T, src policies.Sources) *policies.Evaluator {
	t.Helper()
	b, err := policies.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := policies.Compile(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// proposal is a raw proposal of tenant on target service nginx. A
// "read" is approved by the default policy; a "denied" is a write that
// asks to skip review, which the policy rejects (no_skip_review).
func proposal(tenant, id, class, action string) []byte {
	radius := ""
	switch class {
	case "denied":
		class, radius = "write", `,"blast_radius":"single_device","flags":{"skip_review":true}`
	case "read":
	default:
		radius = `,"blast_radius":"single_device"`
	}
	return fmt.Appendf(nil, `{"v":1,"id":%q,"tenant":%q,"action":%q,"class":%q,"target":{"service":"nginx"}%s,"requested_by":{"agent":"agent-1","session":"s-1"}}`,
		id, tenant, action, class, radius)
}

// propose sends a proposal through the fleet client and waits for its
// verdict.
func (g *gate) propose(t *testing.T, tenant, id, class, action string) *gated.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	v, err := g.fleet.ProposeRaw(ctx, proposal(tenant, id, class, action))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// hold stores a run verdict of tenant held for an operator's decision on
// the manual criterion ux-check, as the engine holds one (engine/runflow.go).
func (g *gate) hold(t *testing.T, tenant, id string) *gated.Verdict {
	t.Helper()
	v := &gated.Verdict{
		V: 1, ProposalID: id, Tenant: tenant, Action: "run_review", Kind: gated.KindRun, Outcome: gated.OutcomeBlocked,
		Stage: gated.StageReview, Reason: "awaiting an operator decision on manual criteria ux-check",
		ProposalSHA256: strings.Repeat("ab", 32), AuditSeq: 1, DecidedAt: time.Now().UTC().Add(-time.Minute), Agent: "worker-1",
		Run: &gated.RunVerdict{
			RunID: "run-" + id, Worker: "worker-1", Round: 1, MaxRounds: 5, AwaitingOperator: []string{"ux-check"},
			Criteria: []gated.CriterionEval{{ID: "tests", Pass: true, Kind: gated.CriterionCommandResult, Required: true, JudgedBy: gated.JudgedByPolicy}},
		},
	}
	if _, err := g.store.Create(t.Context(), v); err != nil {
		t.Fatal(err)
	}
	return v
}

// client is a browser-like HTTP client of the console: it keeps cookies
// and sends the console's own Origin.
type client struct {
	t      *testing.T
	g      *gate
	hc     *http.Client
	origin string
}

func (g *gate) client(t *testing.T) *client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &client{t: t, g: g, hc: &http.Client{Jar: jar, Timeout: 30 * time.Second}, origin: g.http.URL}
}

// do sends a request and returns the status and body.
func (c *client) do(method, path string, body []byte) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.g.http.URL+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
	}
	res, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return res.StatusCode, data
}

// getJSON GETs path, wants want, and decodes the answer into v.
func (c *client) getJSON(path string, want int, v any) {
	c.t.Helper()
	code, body := c.do(http.MethodGet, path, nil)
	if code != want {
		c.t.Fatalf("GET %s: %d %s, want %d", path, code, body, want)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			c.t.Fatalf("GET %s: %v\n%s", path, err, body)
		}
	}
}

// challenge asks for a sign-in challenge.
func (c *client) challenge() string {
	c.t.Helper()
	var ch struct {
		Challenge string `json:"challenge"`
		Prefix    string `json:"prefix"`
	}
	c.getJSON("/api/challenge", http.StatusOK, &ch)
	if ch.Prefix != console.SignInPrefix {
		c.t.Fatalf("prefix %q", ch.Prefix)
	}
	return ch.Challenge
}

// signIn signs in as k and fails the test unless it works.
func (c *client) signIn(k operatorKey) {
	c.t.Helper()
	ch := c.challenge()
	body, _ := json.Marshal(map[string]string{"key": k.pub, "challenge": ch, "sig": k.signRaw(c.t, []byte(console.SignInPrefix+ch))})
	if code, data := c.do(http.MethodPost, "/api/signin", body); code != http.StatusOK {
		c.t.Fatalf("sign-in as %s: %d %s", k.id, code, data)
	}
}

// decide posts a decision signed by k (as the browser sends it) and
// returns the status and answer.
func (c *client) decide(k operatorKey, m operator.Message) (int, []byte) {
	c.t.Helper()
	body, hdr, err := operator.Sign(k.seed, m)
	if err != nil {
		c.t.Fatal(err)
	}
	req, _ := json.Marshal(map[string]string{"body": string(body), "key": hdr.Get(wire.OperatorKeyHeader), "sig": hdr.Get(wire.OperatorSigHeader)})
	return c.do(http.MethodPost, "/api/decisions", req)
}

// feed opens the live feed at path and returns the verdicts it streams;
// the stream ends with the test.
func (c *client) feed(path string) <-chan gated.Verdict {
	c.t.Helper()
	ctx, cancel := context.WithCancel(c.t.Context())
	c.t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.g.http.URL+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	hc := *c.hc
	hc.Timeout = 0
	res, err := hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		c.t.Fatalf("GET %s: %d %s", path, res.StatusCode, body)
	}
	out := make(chan gated.Verdict, 64)
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	// The first line is the stream's opening comment: after it, the watch
	// is in place.
	if !sc.Scan() {
		c.t.Fatalf("GET %s: the stream ended at once: %v", path, sc.Err())
	}
	go func() {
		defer res.Body.Close()
		defer close(out)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "verdict":
				var v gated.Verdict
				if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &v) == nil {
					out <- v
				}
			}
		}
	}()
	return out
}

// refusals returns the console.refused records of tenant.
func (g *gate) refusals(t *testing.T, tenant string) []map[string]any {
	t.Helper()
	var out []map[string]any
	err := audit.Read(t.Context(), g.js, audit.Query{Tenant: tenant}, func(e audit.Entry) error {
		if e.Record == nil {
			return nil
		}
		for _, ev := range e.Record.Events() {
			if ev.Event != gated.EventConsoleRefused {
				continue
			}
			var d map[string]any
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
