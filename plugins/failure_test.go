package plugins_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/status"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/grant"
	"github.com/gated/gated/plugins"
)

// A reviewer that fails, whatever the way, fails the proposal with a
// verdict that says so in a sentence gated wrote: which reviewer, and
// crashed, timed out, answered what gated cannot read, or reported an
// error. What the plugin said (a panic and its stack, its own error text)
// is for the operator: it is in gated's log and in the review's audit
// record, never in anything the tenant reads.
//
// Each case runs the whole path: gated's intake on an in-process NATS
// server, the engine with the bundled policy and personas, and the test
// binary relaunched as the bundled reviewer's plugin (TestMain), which
// fails in its own way.
func TestReviewerFailureStaysOffTheVerdict(t *testing.T) {
	tests := []struct {
		note    string
		mode    string
		timeout time.Duration // the engine's review timeout; 0 for its default
		outcome gated.Outcome
		// failure is the audited kind of failure, and says is what the
		// verdict's reason says of the reviewer.
		failure string
		says    string
		// audited must be in the review's audit record, logged in gated's
		// log: what the operator gets of the failure.
		audited, logged []string
	}{
		{
			note: "a panic the SDK recovers", mode: "panic", outcome: gated.OutcomeError,
			failure: "crashed", says: "crashed",
			audited: []string{"reviewer panicked: reviewer bug", "goroutine ", ".go:"},
			logged:  []string{"reviewer panicked: reviewer bug", "goroutine "},
		},
		{
			note: "a panic that kills the plugin", mode: "panic-exit", outcome: gated.OutcomeError,
			failure: "crashed", says: "crashed",
			audited: []string{"exited"},
			logged:  []string{"panic: reviewer bug off the review's goroutine", "goroutine ", ".go:"},
		},
		{
			note: "a plugin that exits", mode: "crash", outcome: gated.OutcomeError,
			failure: "crashed", says: "crashed",
			audited: []string{"exited"}, logged: []string{"exited"},
		},
		{
			note: "an answer too large to read", mode: "oversize", outcome: gated.OutcomeError,
			failure: "unusable_answer", says: "returned an answer gated could not read",
			audited: []string{"larger than max"}, logged: []string{"larger than max"},
		},
		{
			note: "the plugin's own error, over several lines", mode: "error-text", outcome: gated.OutcomeError,
			failure: "reported_error", says: "reported an error",
			audited: []string{"provider refused the request", "/home/builder/src/reviewer/main.go:42"},
			logged:  []string{"provider refused the request", "/home/builder/src/reviewer/main.go:42"},
		},
		{
			note: "a review past its deadline", mode: "slow", timeout: time.Second, outcome: gated.OutcomeTimeout,
			failure: "timeout", says: "timed out",
			audited: []string{"deadline exceeded"}, logged: []string{"deadline exceeded"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			g := startFailingGate(t, tc.mode, tc.timeout)
			id := "fail-" + tc.mode
			v := g.propose(t, bustest.Proposal(id, "destructive", "db_drop_table", ""))

			if v.Outcome != tc.outcome || v.Approved || v.Stage != gated.StageReview {
				t.Fatalf("verdict %s (approved %v) at %s: %s; want %s at review", v.Outcome, v.Approved, v.Stage, v.Reason, tc.outcome)
			}
			t.Run("the tenant reads that the reviewer failed, and how", func(t *testing.T) {
				want := "reviewer sop (persona dba) " + tc.says
				if !strings.Contains(v.Reason, want) {
					t.Errorf("reason %q does not say %q", v.Reason, want)
				}
				if strings.ContainsAny(v.Reason, "\r\n") {
					t.Errorf("reason %q is more than one line", v.Reason)
				}
				raw, err := json.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				for _, leak := range tenantLeaks(t) {
					if strings.Contains(string(raw), leak) {
						t.Errorf("the verdict the tenant reads holds %q:\n%s", leak, raw)
					}
				}
			})
			t.Run("the operator reads what the plugin said", func(t *testing.T) {
				done := reviewFinished(t, g, id)
				if done.Failure != tc.failure || done.Outcome != tc.outcome || done.Plugin != "sop" {
					t.Errorf("review.finished says failure %q, outcome %q, plugin %q; want %q, %q, sop",
						done.Failure, done.Outcome, done.Plugin, tc.failure, tc.outcome)
				}
				for _, s := range tc.audited {
					if !strings.Contains(done.Error, s) {
						t.Errorf("review.finished error %q does not hold %q", done.Error, s)
					}
				}
				for _, s := range tc.logged {
					g.waitLogged(t, s)
				}
			})
		})
	}
}

// tenantLeaks are what no verdict may hold: the marks of a stack trace and
// of a plugin's own text, and the paths this code was built from.
func tenantLeaks(t *testing.T) []string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return []string{
		"goroutine ", ".go:", "panic:", "panicked", "reviewer bug", "[running]",
		"provider refused", "/home/builder", "Decision: approve", "xxxxxxxx",
		"rpc error", "pid ", filepath.Dir(wd),
	}
}

// failingGate is gated's intake reviewing through a host whose only
// plugin, sop, is the test binary serving one of TestMain's failing
// reviewers; logs is what gated logged, ring the key ring its grants are
// signed with.
type failingGate struct {
	client *fleet.Client
	res    *bus.Resources
	logs   *observer.ObservedLogs
	ring   *grant.Ring
}

// gateOptions says how startGate sets gated up besides its plugin.
type gateOptions struct {
	// timeout is the engine's review timeout; 0 for its default.
	timeout time.Duration
	// unstarted leaves the plugin to be launched by the first review
	// routed to it, as a plugin that exited is relaunched: the host is
	// not started.
	unstarted bool
}

func startFailingGate(t *testing.T, mode string, timeout time.Duration) *failingGate {
	t.Helper()
	return startGate(t, mode, gateOptions{timeout: timeout})
}

// startGate starts gated's intake, signing a grant on every approved
// action, with the test binary serving TestMain's reviewer mode as its
// plugin sop.
func startGate(t *testing.T, mode string, opts gateOptions) *failingGate {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sum, err := plugins.FileSHA256(exe)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))
	host, err := plugins.NewHost(log, "sop", plugins.Spec{Name: "sop", Path: exe, SHA256: sum, Env: []string{"GATED_TEST_PLUGIN=" + mode}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	if !opts.unstarted {
		if err := host.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	ring, err := grant.NewRing(time.Now().Add(-time.Minute), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	s := bustest.Server(t)
	nc, js := bustest.Connect(t, s)
	cfg := bus.Config{}
	res, err := bus.Setup(t.Context(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	aud := bustest.AuditWriter(t, js, audit.Config{Log: log})
	eng := bustest.EngineWith(t, engine.Config{Policy: bustest.Policy(t), Router: host, Store: store.New(res.Verdicts), ReviewTimeout: opts.timeout,
		Grants: engine.GrantIssuer{Ring: func() *grant.Ring { return ring }, TTL: 5 * time.Minute}})
	w, err := intake.NewWorker(nc, js, res, eng, status.NewPublisher(nc, nil).Trails(aud.Trail), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(5 * time.Second) })
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &failingGate{client: client, res: res, logs: logs, ring: ring}
}

func (g *failingGate) propose(t *testing.T, data []byte) *gated.Verdict {
	t.Helper()
	f := &bustest.Fleet{Client: g.client}
	return f.Propose(t, data)
}

// waitLogged waits up to 5 s for gated's log to hold s, in a message or
// a field: a plugin's stderr reaches the log on a goroutine of its own.
func (g *failingGate) waitLogged(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, e := range g.logs.All() {
			if strings.Contains(e.Message, s) {
				return
			}
			for _, f := range e.Context {
				if strings.Contains(f.String, s) || (f.Interface != nil && strings.Contains(errString(f.Interface), s)) {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("gated's log does not hold %q", s)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func errString(v any) string {
	if err, ok := v.(error); ok {
		return err.Error()
	}
	return ""
}

// reviewFinishedData is the data of a review.finished record of a review
// that failed.
type reviewFinishedData struct {
	Plugin  string        `json:"plugin"`
	Outcome gated.Outcome `json:"outcome"`
	Failure string        `json:"failure"`
	Error   string        `json:"error"`
}

// reviewFinished returns the data of the one review.finished record of
// proposal id of tenant acme.
func reviewFinished(t *testing.T, g *failingGate, id string) reviewFinishedData {
	t.Helper()
	var found []reviewFinishedData
	for _, ev := range bustest.AuditRecords(t, g.res.Audit, "acme", id) {
		if ev.Event != gated.EventReviewDone {
			continue
		}
		var d reviewFinishedData
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatalf("review.finished data %s: %v", ev.Data, err)
		}
		found = append(found, d)
	}
	if len(found) != 1 {
		t.Fatalf("%d review.finished records of %s, want 1", len(found), id)
	}
	return found[0]
}
