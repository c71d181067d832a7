package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/flow"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/internal/natstest"
)

// TestOperatorClearFlow runs gated operator clear-flow against gated's
// flow clear endpoint on a real server: nothing to clear, bad usage and
// an unknown key are refused and the state stays; alice's clear clears it.
func TestOperatorClearFlow(t *testing.T) {
	clearGatedEnv(t)
	s := natstest.Server(t)
	nc, js := natstest.Connect(t, s)
	ctx := t.Context()
	if _, err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	kv, err := flow.Setup(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	flows := flow.New(kv)
	auditor := natstest.AuditWriter(t, js, audit.Config{})
	dir := t.TempDir()
	seedFile, strangerSeed := filepath.Join(dir, "alice.seed"), filepath.Join(dir, "stranger.seed")
	pub, err := operator.WriteSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.WriteSeed(strangerSeed); err != nil {
		t.Fatal(err)
	}
	list, err := operator.ParseList("operators.yaml", []byte("operators:\n  - {id: alice, key: "+pub+", tenants: [acme]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := operator.NewFlowClearer(list, flows, auditor.Trail, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := intake.StartService(nc, intake.ServiceConfig{FlowClear: c}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop(0) })

	clearFlow := func(seed string, extra ...string) (int, string, error) {
		args := append([]string{"operator", "clear-flow", "acme", "mailer", "--operator", "alice", "--seed-file", seed, "--nats-url", s.ClientURL()}, extra...)
		return runGated(t, args...)
	}
	actions := func() int {
		t.Helper()
		st, err := flows.Session(context.WithoutCancel(ctx), "acme", "mailer")
		if err != nil {
			t.Fatal(err)
		}
		return len(st.Recent)
	}

	if code, out, err := clearFlow(seedFile, "--reason", "reviewed"); code != exitRefused || err == nil || !strings.Contains(err.Error(), "nothing to clear") {
		t.Fatalf("no state: exit %d, %v\n%s", code, err, out)
	}
	a := gated.ExecutedAction{ProposalID: "p-17", Action: "read_secret", Labels: []string{"secret"}, At: time.Now().UTC()}
	if err := flows.Record(ctx, "acme", "mailer", a, time.Hour, 32); err != nil {
		t.Fatal(err)
	}
	if code, out, err := clearFlow(seedFile); code != exitUsage || err == nil || !strings.Contains(err.Error(), "--reason is required") {
		t.Fatalf("no reason: exit %d, %v\n%s", code, err, out)
	}
	if code, out, err := clearFlow(strangerSeed, "--reason", "reviewed"); code != exitRefused || err == nil || !strings.Contains(err.Error(), "(401)") {
		t.Fatalf("unknown key: exit %d, %v\n%s", code, err, out)
	}
	if actions() != 1 {
		t.Fatal("a refused clear cleared the state")
	}
	code, out, err := clearFlow(seedFile, "--reason", "reviewed")
	if code != 0 {
		t.Fatalf("exit %d, %v\n%s", code, err, out)
	}
	var got operator.Cleared
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Actions != 1 || got.AuditSeq == 0 || got.Agent != "mailer" {
		t.Fatalf("output %s: %+v, %v", out, got, err)
	}
	if actions() != 0 {
		t.Fatal("the state stays after clear-flow")
	}
}
