package main

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/store"
)

func TestVerdictGet(t *testing.T) {
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	stored := &gated.Verdict{V: 1, ProposalID: "p-1", Tenant: "acme", Action: "host_restart_service", Kind: gated.KindAction,
		Outcome: gated.OutcomeRejected, Stage: gated.StagePolicy, Reason: "no", DecidedAt: time.Now().UTC(), AuditSeq: 42}
	if _, err := store.New(res.Verdicts).Create(t.Context(), stored); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := "nats://" + ln.Addr().String()
	ln.Close()

	tests := []struct {
		note string
		args []string
		code int
		out  string // in stdout
		err  string // in the error
	}{
		{note: "found", args: []string{"acme", "p-1", "--nats-url", s.ClientURL()}, code: 0, out: `"audit_seq": 42`},
		{note: "not found", args: []string{"acme", "p-2", "--nats-url", s.ClientURL()}, code: 3, err: "tenant acme, proposal p-2"},
		{note: "other tenant", args: []string{"initech", "p-1", "--nats-url", s.ClientURL()}, code: 3, err: "tenant initech"},
		{note: "bad tenant", args: []string{"ACME", "p-1", "--nats-url", s.ClientURL()}, code: 2, err: "tenant"},
		{note: "dotted id", args: []string{"acme", "p.1", "--nats-url", s.ClientURL()}, code: 2, err: "id"},
		{note: "one argument", args: []string{"acme"}, code: 2, err: "missing ID"},
		{note: "no NATS", args: []string{"acme", "p-1", "--nats-url", unreachable}, code: 1, err: "connecting to NATS"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			code, out, err := runGated(t, append([]string{"verdict", "get"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d (%v), want %d\n%s", code, err, tc.code, out)
			}
			if tc.out != "" && !strings.Contains(out, tc.out) {
				t.Fatalf("stdout lacks %q:\n%s", tc.out, out)
			}
			if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err = %v, want it to say %q", err, tc.err)
			}
			if tc.code == 0 {
				var v gated.Verdict
				if err := json.Unmarshal([]byte(out), &v); err != nil || v.ProposalID != "p-1" || v.Outcome != gated.OutcomeRejected {
					t.Fatalf("stdout is not the stored verdict (%v):\n%s", err, out)
				}
			}
		})
	}
}
