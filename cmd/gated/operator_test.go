package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nkeys"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/policies"
)

func TestOperatorKeygen(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	seedFile := filepath.Join(dir, "alice.seed")
	code, out, err := runGated(t, "operator", "keygen", "--out", seedFile, "--id", "alice", "--tenant", "acme", "--tenant", "globex")
	if code != 0 {
		t.Fatalf("exit %d: %v", code, err)
	}
	st, err := os.Stat(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("seed file mode %04o, want 0600", st.Mode().Perm())
	}
	seed, err := os.ReadFile(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(seed)
	if err != nil {
		t.Fatalf("the seed file holds no user seed: %v", err)
	}
	pub, _ := kp.PublicKey()
	first, snippet, _ := strings.Cut(out, "\n")
	if first != pub {
		t.Fatalf("first line %q, want the public key %s", first, pub)
	}
	if strings.Contains(out, strings.TrimSpace(string(seed))) {
		t.Fatal("keygen printed the seed")
	}
	// The printed entry is a working operators file.
	list, err := operator.ParseList("snippet", []byte(snippet))
	if err != nil {
		t.Fatalf("the printed entry does not parse: %v\n%s", err, snippet)
	}
	ops := list.Signers()
	if len(ops) != 1 || ops[0].ID != "alice" || ops[0].Key != pub || strings.Join(ops[0].Tenants, ",") != "acme,globex" {
		t.Fatalf("printed entry = %+v", ops)
	}

	tests := []struct {
		note string
		args []string
		want string
	}{
		{note: "never overwrites", args: []string{"--out", seedFile}, want: "never overwrites"},
		{note: "no --out", args: nil, want: "--out is required"},
		{note: "bad id", args: []string{"--out", filepath.Join(dir, "b.seed"), "--id", "bob smith"}, want: "--id"},
		{note: "bad tenant", args: []string{"--out", filepath.Join(dir, "c.seed"), "--tenant", "ACME"}, want: "--tenant"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			code, _, err := runGated(t, append([]string{"operator", "keygen"}, tc.args...)...)
			if code != exitUsage || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("exit %d, %v; want 2 saying %q", code, err, tc.want)
			}
		})
	}
	again, err := os.ReadFile(seedFile)
	if err != nil || string(again) != string(seed) {
		t.Fatal("the refused keygen changed the seed file")
	}
	// The empty entry (no --id, no --tenant) is a template, still YAML.
	code, out, err = runGated(t, "operator", "keygen", "--out", filepath.Join(dir, "d.seed"))
	if code != 0 || !strings.Contains(out, "id: OPERATOR_ID") || !strings.Contains(out, "tenants: []") {
		t.Fatalf("exit %d, %v:\n%s", code, err, out)
	}
}

// operatorFixture is gated's operator endpoint on a real server, engine
// and store, with operator alice (tenant acme) and her seed file.
type operatorFixture struct {
	url      string
	store    *store.Verdicts
	seedFile string
}

func newOperatorFixture(t *testing.T) *operatorFixture {
	t.Helper()
	s := natstest.Server(t)
	nc, js := natstest.Connect(t, s)
	ctx := t.Context()
	res, err := bus.Setup(ctx, js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store := store.New(res.Verdicts)
	b, err := policies.Default()
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policies.Compile(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Config{Policy: pol, Personas: reg, Router: noRouter{}, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	auditor, err := audit.NewWriter(ctx, js, audit.Config{Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = auditor.Close(ctx)
	})

	dir := t.TempDir()
	seedFile := filepath.Join(dir, "alice.seed")
	pub, err := operator.WriteSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	list, err := operator.ParseList("operators.yaml", []byte("operators:\n  - {id: alice, key: "+pub+", tenants: [acme]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ep, err := operator.NewEndpoint(list, eng, auditor.Trail, intake.NewFollowUps(js, store).Send, operator.PublishVerdicts(nc), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := intake.StartService(nc, intake.ServiceConfig{Operators: ep}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop(0) })
	return &operatorFixture{url: s.ClientURL(), store: store, seedFile: seedFile}
}

type noRouter struct{}

func (noRouter) Route(*engine.Persona) (engine.Reviewer, error) {
	return nil, engine.ErrNoReviewer
}

// hold stores a run verdict held for the manual criteria awaiting.
func (f *operatorFixture) hold(t *testing.T, id string, awaiting ...string) {
	t.Helper()
	v := &gated.Verdict{
		V: 1, ProposalID: id, Tenant: "acme", Action: "run_review", Kind: gated.KindRun, Outcome: gated.OutcomeBlocked,
		Stage: gated.StageReview, Reason: "awaiting an operator decision", ProposalSHA256: strings.Repeat("0f", 32),
		AuditSeq: 3, DecidedAt: time.Now().UTC(),
		Run: &gated.RunVerdict{RunID: "run-" + id, Worker: "w1", Round: 1, MaxRounds: 3, AwaitingOperator: awaiting},
	}
	if _, err := f.store.Create(t.Context(), v); err != nil {
		t.Fatal(err)
	}
}

func TestOperatorDecide(t *testing.T) {
	clearGatedEnv(t)
	f := newOperatorFixture(t)
	f.hold(t, "held-1", "ux-check")
	f.hold(t, "held-2", "ux-check", "docs-check")
	f.hold(t, "held-3", "ux-check")

	strangerSeed := filepath.Join(t.TempDir(), "stranger.seed")
	if _, err := operator.WriteSeed(strangerSeed); err != nil {
		t.Fatal(err)
	}
	garbageSeed := filepath.Join(t.TempDir(), "garbage.seed")
	if err := os.WriteFile(garbageSeed, []byte("SUsecretbutbroken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := "nats://" + ln.Addr().String()
	ln.Close()
	bare := natstest.Server(t) // NATS, but no gated serving operator decisions
	_, bareJS := natstest.Connect(t, bare)
	bareRes, err := bus.Setup(t.Context(), bareJS, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	held := &gated.Verdict{V: 1, ProposalID: "held-1", Tenant: "acme", Kind: gated.KindRun, Outcome: gated.OutcomeBlocked,
		Stage: gated.StageReview, ProposalSHA256: strings.Repeat("0f", 32), AuditSeq: 3, DecidedAt: time.Now().UTC(),
		Run: &gated.RunVerdict{RunID: "r", Round: 1, AwaitingOperator: []string{"ux-check"}}}
	if _, err := store.New(bareRes.Verdicts).Create(t.Context(), held); err != nil {
		t.Fatal(err)
	}

	as := func(seed string, extra ...string) []string {
		return append([]string{"--operator", "alice", "--seed-file", seed, "--nats-url", f.url, "--timeout", "20s"}, extra...)
	}
	tests := []struct {
		note    string
		args    []string
		code    int
		out     string // in stdout
		err     string // in the error
		outcome gated.Outcome
	}{
		{note: "accepted", args: append([]string{"acme", "held-1", "--criterion", "ux-check=pass:screens look right", "--reason", "release 1.2"}, as(f.seedFile)...),
			code: 0, outcome: gated.OutcomeApproved},
		{note: "decided already", args: append([]string{"acme", "held-1", "--criterion", "ux-check=fail"}, as(f.seedFile)...),
			code: exitRefused, err: "not awaiting an operator decision"},
		{note: "failed criterion", args: append([]string{"acme", "held-3", "--criterion", "ux-check=fail:the dialog overflows"}, as(f.seedFile)...),
			code: 0, outcome: gated.OutcomeRejected, out: "the dialog overflows"},
		{note: "no verdict", args: append([]string{"acme", "never", "--criterion", "ux-check=pass"}, as(f.seedFile)...),
			code: exitRefused, err: "no verdict stored"},
		{note: "unknown key", args: append([]string{"acme", "held-2", "--criterion", "ux-check=pass", "--criterion", "docs-check=pass"}, as(strangerSeed)...),
			code: exitRefused, err: "(401): key"},
		{note: "criterion missing", args: append([]string{"acme", "held-2", "--criterion", "ux-check=pass"}, as(f.seedFile)...),
			code: exitUsage, err: "for docs-check too"},
		{note: "criterion not awaited", args: append([]string{"acme", "held-2", "--criterion", "ux-check=pass", "--criterion", "docs-check=pass", "--criterion", "perf=pass"}, as(f.seedFile)...),
			code: exitUsage, err: "--criterion perf: the verdict does not await it"},
		{note: "criterion twice", args: append([]string{"acme", "held-2", "--criterion", "ux-check=pass", "--criterion", "ux-check=fail"}, as(f.seedFile)...),
			code: exitUsage, err: "given twice"},
		{note: "criterion syntax", args: append([]string{"acme", "held-2", "--criterion", "ux-check:pass"}, as(f.seedFile)...),
			code: exitUsage, err: "want ID=pass or ID=fail"},
		{note: "criterion verdict", args: append([]string{"acme", "held-2", "--criterion", "ux-check=maybe"}, as(f.seedFile)...),
			code: exitUsage, err: "must be pass or fail"},
		{note: "no operator", args: []string{"acme", "held-2", "--criterion", "ux-check=pass", "--seed-file", f.seedFile, "--nats-url", f.url},
			code: exitUsage, err: "--operator is required"},
		{note: "no seed file", args: []string{"acme", "held-2", "--criterion", "ux-check=pass", "--operator", "alice", "--nats-url", f.url},
			code: exitUsage, err: "--seed-file is required"},
		{note: "garbage seed", args: append([]string{"acme", "held-2", "--criterion", "ux-check=pass"}, as(garbageSeed)...),
			code: exitUsage, err: "holds no nkey user seed"},
		{note: "approve on a held run", args: append([]string{"acme", "held-2", "--approve"}, as(f.seedFile)...),
			code: exitUsage, err: "judge each with --criterion"},
		{note: "approve and reject", args: append([]string{"acme", "held-2", "--approve", "--reject"}, as(f.seedFile)...),
			code: exitUsage, err: "exclude each other"},
		{note: "approve and criteria", args: append([]string{"acme", "held-2", "--approve", "--criterion", "ux-check=pass"}, as(f.seedFile)...),
			code: exitUsage, err: "one or the other"},
		{note: "no decision at all", args: append([]string{"acme", "held-2"}, as(f.seedFile)...),
			code: exitUsage, err: "give --approve or --reject"},
		{note: "bad tenant", args: append([]string{"ACME", "held-2"}, as(f.seedFile)...), code: exitUsage, err: "tenant"},
		{note: "one argument", args: append([]string{"acme"}, as(f.seedFile)...), code: exitUsage, err: "missing PROPOSAL_ID"},
		{note: "no NATS", args: []string{"acme", "held-2", "--criterion", "ux-check=pass", "--operator", "alice", "--seed-file", f.seedFile, "--nats-url", unreachable},
			code: exitFailure, err: "connecting to NATS"},
		{note: "no gated serving operators", args: []string{"acme", "held-1", "--criterion", "ux-check=pass", "--operator", "alice", "--seed-file", f.seedFile, "--nats-url", bare.ClientURL()},
			code: exitFailure, err: "--operators"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			code, out, err := runGated(t, append([]string{"operator", "decide"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d (%v), want %d\n%s", code, err, tc.code, out)
			}
			if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err = %v, want it to say %q", err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "secretbutbroken") {
				t.Fatalf("err = %v quotes the seed file", err)
			}
			if tc.out != "" && !strings.Contains(out, tc.out) {
				t.Fatalf("stdout lacks %q:\n%s", tc.out, out)
			}
			if tc.code != 0 {
				return
			}
			var v gated.Verdict
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("stdout is not a verdict: %v\n%s", err, out)
			}
			if v.Outcome != tc.outcome || v.Stage != gated.StageOperator {
				t.Fatalf("verdict %s/%s, want %s/operator: %s", v.Outcome, v.Stage, tc.outcome, v.Reason)
			}
			stored, err := f.store.Get(t.Context(), v.Tenant, v.ProposalID)
			if err != nil || stored.AuditSeq != v.AuditSeq {
				t.Fatalf("printed verdict is not the stored one: %v", err)
			}
		})
	}
}

func TestOperatorDecideTakesConnectionFlags(t *testing.T) {
	clearGatedEnv(t)
	_, help, err := runGated(t, "operator", "decide", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"--nats-url", "--nats-creds", "--nats-nkey", "--nats-user", "--nats-password",
		"--nats-token", "--nats-tls-ca", "--nats-tls-cert", "--nats-tls-key", "--nats-inbox-prefix", "--criterion", "--seed-file"} {
		if !strings.Contains(help, f+" ") {
			t.Errorf("gated operator decide has no %s", f)
		}
	}
}

// serve refuses a bad operators file before it starts anything, naming
// the file, whether the flag, the environment or the config file gives it.
func TestServeRefusesBadOperators(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, dir, "ops.yaml", "operators:\n  - id: alice\n    key: UNOTAKEY\n")
	cfg := writeFile(t, dir, "gated.yaml", "operators: ops.yaml\n")
	tests := []struct {
		note string
		env  map[string]string
		args []string
		want string
	}{
		{note: "flag", args: []string{"--operators", bad}, want: "ops.yaml:3: operators[0]: key: not an nkey public user key"},
		{note: "environment", env: map[string]string{"GATED_OPERATORS": bad}, want: "ops.yaml:3"},
		{note: "config file, relative to it", args: []string{"--config", cfg}, want: filepath.Join(dir, "ops.yaml") + ":3"},
		{note: "missing file", args: []string{"--operators", filepath.Join(dir, "none.yaml")}, want: "none.yaml"},
		{note: "without the review service", args: []string{"--operators", bad, "--review-service=false"}, want: "--operators needs --review-service"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			clearGatedEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			err := run(t.Context(), append([]string{"serve"}, tc.args...))
			wantUsageError(t, err, tc.want)
		})
	}
}

// verdictPublisher publishes what a fleet waiting on the verdict subject
// reads.
func TestVerdictPublisher(t *testing.T) {
	s := natstest.Server(t)
	nc, _ := natstest.Connect(t, s)
	sub, err := nc.SubscribeSync(wire.VerdictSubject("acme", "p-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	v := &gated.Verdict{V: 1, ProposalID: "p-1", Tenant: "acme", Outcome: gated.OutcomeApproved, Approved: true, Stage: gated.StageOperator}
	if err := operator.PublishVerdicts(nc)(t.Context(), v); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var got gated.Verdict
	if err := json.Unmarshal(m.Data, &got); err != nil || got.Stage != gated.StageOperator || !got.Approved {
		t.Fatalf("published %s (%v)", m.Data, err)
	}
}

// serve with --operators serves the operator endpoint with the engine,
// the audit trail, the run stream and the verdict subject behind it: a
// decision made with the CLI replaces a held verdict, and the new verdict
// is published.
func TestServeAcceptsOperatorDecisions(t *testing.T) {
	clearGatedEnv(t)
	s := natstest.Server(t)
	nc, js := natstest.Connect(t, s)
	dir := t.TempDir()
	seedFile := filepath.Join(dir, "alice.seed")
	pub, err := operator.WriteSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	ops := writeFile(t, dir, "operators.yaml", "operators:\n  - id: alice\n    key: "+pub+"\n    tenants: [acme]\n")

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--nats-url", s.ClientURL(), "--data-dir", t.TempDir(), "--operators", ops, "--log-level", "error", "--log-format", "json"})
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		m, err := nc.Request("$SRV.INFO."+intake.ServiceName, nil, 2*time.Second)
		if err == nil && strings.Contains(string(m.Data), `"name":"`+operator.EndpointName+`"`) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve returned before serving operator decisions: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no operator endpoint after 60s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	kv, err := js.KeyValue(t.Context(), wire.VerdictBucket)
	if err != nil {
		t.Fatal(err)
	}
	store := store.New(kv)
	(&operatorFixture{store: store}).hold(t, "held-serve", "ux-check")
	sub, err := nc.SubscribeSync(wire.VerdictSubject("acme", "held-serve"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	code, out, err := runGated(t, "operator", "decide", "acme", "held-serve", "--criterion", "ux-check=fail:the dialog overflows",
		"--operator", "alice", "--seed-file", seedFile, "--nats-url", s.ClientURL())
	if code != 0 {
		t.Fatalf("exit %d: %v\n%s", code, err, out)
	}
	var v gated.Verdict
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("stdout is not a verdict: %v\n%s", err, out)
	}
	if v.Outcome != gated.OutcomeRejected || v.Stage != gated.StageOperator || v.Run == nil || v.Run.Next != gated.NextContinuation {
		t.Fatalf("verdict %s/%s: %s (run %+v)", v.Outcome, v.Stage, v.Reason, v.Run)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("the new verdict was not published: %v", err)
	}
	var published gated.Verdict
	if err := json.Unmarshal(m.Data, &published); err != nil || published.AuditSeq != v.AuditSeq {
		t.Fatalf("published %s (%v)", m.Data, err)
	}
	runs, err := js.Stream(t.Context(), wire.RunsStream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runs.GetLastMsgForSubject(t.Context(), v.Run.FollowUpSubject); err != nil {
		t.Fatalf("no continuation on %s in %s: %v", v.Run.FollowUpSubject, wire.RunsStream, err)
	}

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not stop within 60s")
	}
}
