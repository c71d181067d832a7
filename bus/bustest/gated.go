package bustest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/grants"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/server"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/policies"
)

// defaultPolicy is the default bundle, compiled once per test binary.
var defaultPolicy = sync.OnceValues(func() (*policies.Evaluator, error) {
	b, err := policies.Default()
	if err != nil {
		return nil, err
	}
	return policies.Compile(context.Background(), b)
})

// Policy returns the default policy bundle, compiled once per test binary.
func Policy(tb testing.TB) *policies.Evaluator {
	tb.Helper()
	pol, err := defaultPolicy()
	if err != nil {
		tb.Fatal(err)
	}
	return pol
}

// Engine returns the engine serve builds: the default bundle and the
// built-in personas, over store, reviewing through router.
func Engine(tb testing.TB, store engine.VerdictStore, router engine.Router) *engine.Engine {
	tb.Helper()
	return EngineWith(tb, engine.Config{Policy: Policy(tb), Router: router, Store: store})
}

// EngineWith returns an engine of cfg, with the built-in personas when
// cfg names none.
func EngineWith(tb testing.TB, cfg engine.Config) *engine.Engine {
	tb.Helper()
	if cfg.Personas == nil {
		reg, err := personas.Builtin()
		if err != nil {
			tb.Fatal(err)
		}
		cfg.Personas = reg
	}
	eng, err := engine.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return eng
}

// NoPlugins routes no persona: every proposal that needs a review is
// blocked.
type NoPlugins struct{}

// Route refuses every persona with engine.ErrNoReviewer.
func (NoPlugins) Route(*engine.Persona) (engine.Reviewer, error) {
	return nil, fmt.Errorf("%w: no plugins run in this test", engine.ErrNoReviewer)
}

// Gated is the gate `gated serve` runs (internal/server), on its embedded
// NATS server in a test temp dir: its streams and bucket, its audit
// writer and key, grants, budgets, metrics and the worker. No reviewer
// plugin runs, so proposals that need a review are blocked; the
// end-to-end suite in test/ covers reviews.
type Gated struct {
	// NC and JS are a connection to the server, for the test's own use.
	NC *nats.Conn
	JS jetstream.JetStream
	// Resources are the streams and bucket bus.Setup created.
	Resources *bus.Resources
	// Grants is gated's grant side.
	Grants *grants.Service
	// Audit is the audit writer gated records with.
	Audit *audit.Writer
	// DataDir is gated's data directory, which holds its audit key.
	DataDir string
}

// StartGrantingGated is StartGated with grants that live ttl. pol
// replaces the default policy when not nil.
func StartGrantingGated(t *testing.T, cfg bus.Config, ttl time.Duration, pol engine.Policy) *Gated {
	t.Helper()
	return startGated(t, nil, cfg, ttl, pol, "")
}

// StartGated starts gated as serve does, set up with cfg (its zero
// fields keep serve's defaults). wrap, when not nil, wraps the decider of
// its worker, so that a test can hold or script deliveries. Everything
// stops when the test ends.
func StartGated(t *testing.T, wrap func(intake.Decider) intake.Decider, cfg bus.Config) *Gated {
	t.Helper()
	return startGated(t, wrap, cfg, 0, nil, "")
}

// StartGatedOn is StartGated on the NATS server at url, as serve
// --nats-url runs, in place of an embedded one.
func StartGatedOn(t *testing.T, url string) *Gated {
	t.Helper()
	return startGated(t, nil, bus.Config{}, 0, nil, url)
}

// startGated starts gated; its grants live ttl when above zero; on the
// server at url, or an embedded one when url is empty.
func startGated(t *testing.T, wrap func(intake.Decider) intake.Decider, cfg bus.Config, ttl time.Duration, pol engine.Policy, url string) *Gated {
	t.Helper()
	sc := server.Defaults()
	sc.DataDir, sc.NATSListen, sc.NATSURL = t.TempDir(), "127.0.0.1:0", url
	sc.PersonasWatch, sc.PolicyWatch, sc.ReviewService = false, false, false
	sc.ShutdownGrace = 5 * time.Second
	if ttl > 0 {
		sc.GrantTTL = ttl
	}
	// The budgets leave a test's bursts alone.
	sc.Budgets = writeFile(t, "budgets.yaml", testBudgets)
	for _, f := range []struct {
		set *int
		to  int
	}{{&sc.Replicas, cfg.Replicas}, {&sc.MaxInFlight, cfg.MaxInFlight}, {&sc.TenantMaxInFlight, cfg.TenantMaxInFlight},
		{&sc.MaxDeliver, cfg.MaxDeliver}, {&sc.MaxAckPending, cfg.MaxAckPending}} {
		if f.to != 0 {
			*f.set = f.to
		}
	}
	for _, f := range []struct {
		set *time.Duration
		to  time.Duration
	}{{&sc.VerdictTTL, cfg.VerdictTTL}, {&sc.AuditMaxAge, cfg.AuditMaxAge}, {&sc.AckWait, cfg.AckWait},
		{&sc.DuplicateWindow, cfg.DuplicateWindow}} {
		if f.to != 0 {
			*f.set = f.to
		}
	}
	opts := []server.Option{server.WithLogger(zaptest.NewLogger(t)), server.WithoutPlugins(), server.WithDecider(wrap)}
	if pol != nil {
		opts = append(opts, server.WithPolicy(pol))
	}
	s, err := server.New(sc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.WithoutCancel(t.Context())
	if err := s.Build(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping gated: %v", err)
		}
	})
	nc, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &Gated{NC: nc, JS: js, Resources: s.Resources(), Grants: s.Grants(), Audit: s.Audit(), DataDir: sc.DataDir}
}

// testBudgets are limits no test reaches.
const testBudgets = `defaults:
  tenant: {proposals: unlimited, reads: unlimited, reviews_in_flight: 100000, holds_pending: 100000}
  agent: {proposals: unlimited, reads: unlimited, reviews_in_flight: 100000, holds_pending: 100000}
`

// writeFile writes data to a file named name in a test temp dir and
// returns its path.
func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Gatekeeper is a Decider that holds every delivery until Open, and
// reports each one as it arrives; StartGated(t, k.Wrap, cfg) installs it.
// It lets a test act while a proposal is published but not yet decided.
type Gatekeeper struct {
	// Arrived receives the Nats-Msg-Id of every delivery as it is held. It
	// is buffered (64): a test that holds more must read it.
	Arrived chan string

	next    intake.Decider
	release chan struct{}
	once    sync.Once
}

// NewGatekeeper returns a closed Gatekeeper: every delivery waits for Open.
func NewGatekeeper() *Gatekeeper {
	return &Gatekeeper{Arrived: make(chan string, 64), release: make(chan struct{})}
}

// Open lets every held delivery, and every later one, through.
func (k *Gatekeeper) Open() { k.once.Do(func() { close(k.release) }) }

// Wrap makes k hold deliveries for d.
func (k *Gatekeeper) Wrap(d intake.Decider) intake.Decider { k.next = d; return k }

// Decide reports the delivery, waits until k is open or ctx ends, then
// hands the delivery on.
func (k *Gatekeeper) Decide(ctx context.Context, d engine.Delivery) (*gated.Verdict, error) {
	k.Arrived <- d.MsgID
	select {
	case <-k.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return k.next.Decide(ctx, d)
}

// GiveUp hands the delivery on at once.
func (k *Gatekeeper) GiveUp(ctx context.Context, d engine.Delivery, cause error) *gated.Verdict {
	return k.next.GiveUp(ctx, d, cause)
}

// StartHeldGated is StartGated with every proposal held by k until it
// opens, at the latest when the test ends, before the worker stops.
func StartHeldGated(t *testing.T, k *Gatekeeper) *Gated {
	t.Helper()
	g := StartGated(t, k.Wrap, bus.Config{})
	t.Cleanup(k.Open)
	return g
}
