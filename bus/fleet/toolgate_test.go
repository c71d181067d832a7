package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
)

// fakeProposer answers every proposal with a verdict of one outcome, or
// with an error, and records what it was sent.
type fakeProposer struct {
	outcome gated.Outcome
	err     error
	// tamper edits the verdict before it is returned.
	tamper func(*gated.Verdict)

	mu    sync.Mutex
	sent  []*gated.Proposal
	ctxOK []bool // whether each call's context had a deadline
}

func (f *fakeProposer) Propose(ctx context.Context, p *gated.Proposal) (*gated.Verdict, error) {
	f.mu.Lock()
	cp := *p
	f.sent = append(f.sent, &cp)
	_, ok := ctx.Deadline()
	f.ctxOK = append(f.ctxOK, ok)
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	v := &gated.Verdict{V: 1, ProposalID: p.ID, Tenant: p.Tenant, Action: p.Action, Kind: gated.KindAction,
		Outcome: f.outcome, Approved: f.outcome == gated.OutcomeApproved, Stage: gated.StageReview, Reason: "fake " + string(f.outcome)}
	if f.tamper != nil {
		f.tamper(v)
	}
	return v, fleet.CheckVerdict(v)
}

func (f *fakeProposer) proposals() []*gated.Proposal {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*gated.Proposal(nil), f.sent...)
}

type restartArgs struct {
	Host    string
	Service string
}

var restartSpec = fleet.ToolSpec[restartArgs]{
	Action: "host_restart_service",
	Class:  gated.ClassWrite,
	Describe: func(a restartArgs) fleet.Change {
		return fleet.Change{
			Target:      map[string]any{"host": a.Host, "service": a.Service},
			Reason:      a.Service + " on " + a.Host + " stopped answering",
			BlastRadius: gated.BlastSingleDevice,
			IncidentID:  "INC-7",
		}
	},
}

// countingTool counts its runs.
type countingTool struct{ runs atomic.Int32 }

func (c *countingTool) run(_ context.Context, a restartArgs) (string, error) {
	c.runs.Add(1)
	return "restarted " + a.Service, nil
}

var identity = fleet.Identity{Tenant: "acme", Agent: "ops-agent", Session: "s-1",
	Operator: &gated.Principal{ID: "alice", Roles: []string{"sre"}}}

func TestToolGateRunsToolOnlyOnApproval(t *testing.T) {
	tests := []struct {
		note    string
		fake    *fakeProposer
		runs    int32
		wantErr error
	}{
		{note: "approved", fake: &fakeProposer{outcome: gated.OutcomeApproved}, runs: 1},
		{note: "rejected", fake: &fakeProposer{outcome: gated.OutcomeRejected}, wantErr: fleet.ErrReviewRejected},
		{note: "blocked", fake: &fakeProposer{outcome: gated.OutcomeBlocked}, wantErr: fleet.ErrReviewBlocked},
		{note: "error", fake: &fakeProposer{outcome: gated.OutcomeError}, wantErr: fleet.ErrReviewError},
		{note: "timeout verdict", fake: &fakeProposer{outcome: gated.OutcomeTimeout}, wantErr: fleet.ErrReviewTimeout},
		{note: "invalid", fake: &fakeProposer{outcome: gated.OutcomeInvalid}, wantErr: fleet.ErrProposalInvalid},
		{note: "no verdict", fake: &fakeProposer{err: fmt.Errorf("%w: test", fleet.ErrNoVerdict)}, wantErr: fleet.ErrNoVerdict},
		{note: "transport failure", fake: &fakeProposer{err: errors.New("connection closed")}},
		{note: "id reused", fake: &fakeProposer{err: fleet.ErrIDReused}, wantErr: fleet.ErrIDReused},
		{
			note: "approval that says approved false",
			fake: &fakeProposer{outcome: gated.OutcomeApproved, tamper: func(v *gated.Verdict) { v.Approved = false }}, wantErr: fleet.ErrNotApproved,
		},
		{
			note: "approval of another proposal",
			fake: &fakeProposer{outcome: gated.OutcomeApproved, tamper: func(v *gated.Verdict) { v.ProposalID = "someone-else" }}, wantErr: fleet.ErrNotApproved,
		},
		{
			note: "approval of another action",
			fake: &fakeProposer{outcome: gated.OutcomeApproved, tamper: func(v *gated.Verdict) { v.Action = "host_list_services" }}, wantErr: fleet.ErrNotApproved,
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			var seen []*gated.Verdict
			g, err := fleet.NewToolGate(tc.fake, identity, fleet.WithoutGrantCheck(), fleet.WithVerdictObserver(func(_ *gated.Proposal, v *gated.Verdict) { seen = append(seen, v) }))
			if err != nil {
				t.Fatal(err)
			}
			var tool countingTool
			restart := fleet.Guard(g, restartSpec, tool.run)
			out, err := restart(t.Context(), restartArgs{Host: "web-7", Service: "nginx"})
			if got := tool.runs.Load(); got != tc.runs {
				t.Fatalf("tool ran %d times, want %d (err %v)", got, tc.runs, err)
			}
			if len(tc.fake.proposals()) != 1 {
				t.Fatalf("%d proposals sent, want 1", len(tc.fake.proposals()))
			}
			if tc.runs == 1 {
				if err != nil || out != "restarted nginx" {
					t.Fatalf("approved call returned %q, %v", out, err)
				}
				return
			}
			if err == nil || out != "" {
				t.Fatalf("refused call returned %q, %v; want the zero value and an error", out, err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			var ve *fleet.VerdictError
			if errors.As(err, &ve) && (len(seen) != 1 || seen[0] != ve.Verdict) {
				t.Errorf("observer saw %v; the verdict was %v", seen, ve.Verdict)
			}
		})
	}
}

func TestToolGateBuildsTheProposal(t *testing.T) {
	fake := &fakeProposer{outcome: gated.OutcomeApproved}
	id := identity
	id.Reviewer = "reviewer"
	g, err := fleet.NewToolGate(fake, id, fleet.WithoutGrantCheck(), fleet.WithProposalIDs(func() string { return "fixed-1" }))
	if err != nil {
		t.Fatal(err)
	}
	var tool countingTool
	if _, err := fleet.Guard(g, restartSpec, tool.run)(t.Context(), restartArgs{Host: "web-7", Service: "nginx"}); err != nil {
		t.Fatal(err)
	}
	p := fake.proposals()[0]
	switch {
	case p.ID != "fixed-1", p.Tenant != "acme", p.Action != "host_restart_service", p.Class != gated.ClassWrite:
		t.Fatalf("address: %+v", p)
	case p.Target["host"] != "web-7" || p.Target["service"] != "nginx":
		t.Fatalf("target %v", p.Target)
	case p.Reason != "nginx on web-7 stopped answering", p.BlastRadius != gated.BlastSingleDevice, p.IncidentID != "INC-7":
		t.Fatalf("change: %+v", p)
	case p.RequestedBy == nil || p.RequestedBy.Agent != "ops-agent" || p.RequestedBy.Session != "s-1":
		t.Fatalf("requested_by %+v", p.RequestedBy)
	case p.Operator == nil || p.Operator.ID != "alice", p.Reviewer != "reviewer", p.V != gated.SchemaVersion:
		t.Fatalf("identity: %+v", p)
	}
	if !fake.ctxOK[0] {
		t.Error("the review had no deadline although the caller's context had none")
	}
	// The proposal is one gated decodes strictly.
	if _, err := gated.DecodeProposal(mustJSON(t, p), "acme", "host_restart_service", gated.Limits{}); err != nil {
		t.Fatalf("gated would refuse the ToolGate's proposal: %v", err)
	}
}

func TestToolGateReadNeverProposes(t *testing.T) {
	fake := &fakeProposer{outcome: gated.OutcomeRejected}
	g, err := fleet.NewToolGate(fake, identity, fleet.WithoutGrantCheck())
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	list := fleet.Guard(g, fleet.ToolSpec[string]{Action: "host_list_services", Class: gated.ClassRead},
		func(_ context.Context, host string) ([]string, error) { runs++; return []string{"nginx"}, nil })
	for range 3 {
		out, err := list(t.Context(), "web-7")
		if err != nil || len(out) != 1 {
			t.Fatalf("read returned %v, %v", out, err)
		}
	}
	if runs != 3 || len(fake.proposals()) != 0 {
		t.Fatalf("read ran %d times with %d proposals; want 3 runs, no proposal", runs, len(fake.proposals()))
	}
	if v, err := g.Authorize(t.Context(), "host_list_services", gated.ClassRead, fleet.Change{}); v != nil || err != nil {
		t.Fatalf("Authorize(read) = %v, %v; want nil, nil", v, err)
	}
}

func TestToolGateRefusesUnusableSpecs(t *testing.T) {
	fake := &fakeProposer{outcome: gated.OutcomeApproved}
	g, err := fleet.NewToolGate(fake, identity, fleet.WithoutGrantCheck())
	if err != nil {
		t.Fatal(err)
	}
	describe := restartSpec.Describe
	tests := []struct {
		note string
		g    *fleet.ToolGate
		spec fleet.ToolSpec[restartArgs]
	}{
		{note: "bad action", g: g, spec: fleet.ToolSpec[restartArgs]{Action: "host.restart", Class: gated.ClassWrite, Describe: describe}},
		{note: "unknown class", g: g, spec: fleet.ToolSpec[restartArgs]{Action: "host_restart_service", Class: "maybe", Describe: describe}},
		{note: "no class", g: g, spec: fleet.ToolSpec[restartArgs]{Action: "host_restart_service", Describe: describe}},
		{note: "write without Describe", g: g, spec: fleet.ToolSpec[restartArgs]{Action: "host_restart_service", Class: gated.ClassWrite}},
		{note: "nil gate", g: nil, spec: restartSpec},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			var tool countingTool
			_, err := fleet.Guard(tc.g, tc.spec, tool.run)(t.Context(), restartArgs{})
			if !errors.Is(err, fleet.ErrInvalidToolSpec) || tool.runs.Load() != 0 {
				t.Fatalf("err = %v, runs %d; want ErrInvalidToolSpec and no run", err, tool.runs.Load())
			}
		})
	}
	if len(fake.proposals()) != 0 {
		t.Errorf("unusable specs sent %d proposals", len(fake.proposals()))
	}
	for _, id := range []fleet.Identity{{Agent: "a"}, {Tenant: "acme"}, {Tenant: "acme", Agent: "a", Operator: &gated.Principal{}}, {Tenant: "acme", Agent: "a", Reviewer: "Bad Name"}} {
		if _, err := fleet.NewToolGate(fake, id, fleet.WithoutGrantCheck()); !errors.Is(err, fleet.ErrInvalidConfig) {
			t.Errorf("NewToolGate(%+v): err = %v, want ErrInvalidConfig", id, err)
		}
	}
}

func TestToolGateDoesNotRunAfterCallerGaveUp(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	fake := &fakeProposer{outcome: gated.OutcomeApproved, tamper: func(*gated.Verdict) { cancel() }}
	g, err := fleet.NewToolGate(fake, identity, fleet.WithoutGrantCheck())
	if err != nil {
		t.Fatal(err)
	}
	var tool countingTool
	if _, err := fleet.Guard(g, restartSpec, tool.run)(ctx, restartArgs{}); !errors.Is(err, context.Canceled) || tool.runs.Load() != 0 {
		t.Fatalf("err = %v, runs %d; want context.Canceled and no run", err, tool.runs.Load())
	}
}

// TestToolGateThroughGated drives the ToolGate through the real client and
// worker: a read runs without a proposal, the engine's verdicts decide
// the rest, and a call that gets no verdict in time never runs.
func TestToolGateThroughGated(t *testing.T) {
	g := bustest.StartFleet(t, withScript, bus.Config{})
	var ids atomic.Int32
	gate, err := fleet.NewToolGate(g.Client, identity, fleet.WithProposalIDs(func() string { return fmt.Sprintf("gate-%d", ids.Add(1)) }))
	if err != nil {
		t.Fatal(err)
	}
	var tool countingTool
	listed := 0
	list := fleet.Guard(gate, fleet.ToolSpec[restartArgs]{Action: "host_list_services", Class: gated.ClassRead},
		func(context.Context, restartArgs) (string, error) { listed++; return "nginx", nil })
	if _, err := list(t.Context(), restartArgs{}); err != nil || listed != 1 {
		t.Fatalf("read: %v, ran %d", err, listed)
	}
	if n := ids.Load(); n != 0 {
		t.Fatalf("a read used %d proposal ids", n)
	}
	// No reviewer plugin runs here, so the restart is blocked.
	restart := fleet.Guard(gate, restartSpec, tool.run)
	if _, err := restart(t.Context(), restartArgs{Host: "web-7", Service: "nginx"}); !errors.Is(err, fleet.ErrReviewBlocked) {
		t.Fatalf("restart: err = %v, want ErrReviewBlocked", err)
	}
	timeoutSpec := restartSpec
	timeoutSpec.Action = "outcome_timeout"
	if _, err := fleet.Guard(gate, timeoutSpec, tool.run)(t.Context(), restartArgs{Host: "web-8"}); !errors.Is(err, fleet.ErrReviewTimeout) {
		t.Fatalf("timeout: err = %v, want ErrReviewTimeout", err)
	}
	approvedSpec := restartSpec
	approvedSpec.Action = "outcome_approved" // the scripted decider sets approved false: not an approval
	if _, err := fleet.Guard(gate, approvedSpec, tool.run)(t.Context(), restartArgs{Host: "web-9"}); !errors.Is(err, fleet.ErrNotApproved) {
		t.Fatalf("outcome approved with approved false: err = %v, want ErrNotApproved", err)
	}
	if n := tool.runs.Load(); n != 0 {
		t.Fatalf("the tool ran %d times without an approval", n)
	}

	// Nothing answers on a server without a worker: the call gives up at
	// the ToolGate's review timeout and the tool never runs.
	srv := natstest.Server(t)
	nc, js := natstest.Connect(t, srv)
	if _, err := bus.Setup(t.Context(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := fleet.NewToolGate(client, identity, fleet.WithReviewTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Guard(slow, restartSpec, tool.run)(t.Context(), restartArgs{Host: "web-10"}); !errors.Is(err, fleet.ErrNoVerdict) {
		t.Fatalf("unanswered: err = %v, want ErrNoVerdict", err)
	}
	if n := tool.runs.Load(); n != 0 {
		t.Fatalf("the tool ran %d times without a verdict", n)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// opsArgs are the arguments of a tool that takes a map: what a runtime
// that decodes a model's tool call hands its tools.
type opsArgs struct {
	Host string         `json:"host"`
	Opts map[string]any `json:"opts"`
}

// TestGuardRunsWhatWasReviewed: the tool runs with exactly the arguments
// the proposal carried, whatever the caller does to its own values while
// the review is pending, and the proposal carries every argument, not
// only what Describe put in the target.
func TestGuardRunsWhatWasReviewed(t *testing.T) {
	args := opsArgs{Host: "web-7", Opts: map[string]any{"service": "nginx"}}
	// The caller's map changes while gated reviews: another goroutine of
	// the agent, or the agent itself reusing its arguments.
	fake := &fakeProposer{outcome: gated.OutcomeApproved, tamper: func(*gated.Verdict) { args.Opts["service"] = "sshd" }}
	g, err := fleet.NewToolGate(fake, identity, fleet.WithoutGrantCheck())
	if err != nil {
		t.Fatal(err)
	}
	spec := fleet.ToolSpec[opsArgs]{Action: "host_restart_service", Class: gated.ClassWrite, Describe: func(a opsArgs) fleet.Change {
		return fleet.Change{Target: map[string]any{"host": a.Host}, BlastRadius: gated.BlastSingleDevice}
	}}
	var ran opsArgs
	_, err = fleet.Guard(g, spec, func(_ context.Context, a opsArgs) (string, error) { ran = a; return "ok", nil })(t.Context(), args)
	if err != nil {
		t.Fatal(err)
	}
	p := fake.proposals()[0]
	opts, _ := p.Arguments["opts"].(map[string]any)
	if p.Arguments["host"] != "web-7" || opts["service"] != "nginx" {
		t.Fatalf("the proposal's arguments are %v, want every argument of the call", p.Arguments)
	}
	if ran.Host != "web-7" || ran.Opts["service"] != "nginx" {
		t.Fatalf("the tool ran with %+v; gated reviewed %v", ran, p.Arguments)
	}
	if _, err := gated.DecodeProposal(mustJSON(t, p), "acme", "host_restart_service", gated.Limits{}); err != nil {
		t.Fatalf("gated would refuse the ToolGate's proposal: %v", err)
	}
}

// TestGuardRefusesArgumentsThatAreNotJSON: arguments a reviewer cannot
// read, or that readers disagree on, never run.
func TestGuardRefusesArgumentsThatAreNotJSON(t *testing.T) {
	fake := &fakeProposer{outcome: gated.OutcomeApproved}
	g, err := fleet.NewToolGate(fake, identity, fleet.WithoutGrantCheck())
	if err != nil {
		t.Fatal(err)
	}
	describe := func(any) fleet.Change { return fleet.Change{BlastRadius: gated.BlastSingleDevice} }
	runs := 0
	tool := func(context.Context, any) (string, error) { runs++; return "ok", nil }
	guarded := fleet.Guard(g, fleet.ToolSpec[any]{Action: "host_restart_service", Class: gated.ClassWrite, Describe: describe}, tool)
	for _, tc := range []struct {
		note string
		args any
		want string
	}{
		{note: "not an object", args: []string{"web-7"}, want: "JSON object"},
		{note: "not JSON", args: map[string]any{"done": make(chan int)}, want: "JSON"},
		{note: "keys equal under case folding", args: map[string]any{"host": "web-7", "hoſt": "db-1"}, want: "differ only by case"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			_, err := guarded(t.Context(), tc.args)
			if !errors.Is(err, fleet.ErrInvalidToolSpec) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrInvalidToolSpec saying %q", err, tc.want)
			}
		})
	}
	if runs != 0 || len(fake.proposals()) != 0 {
		t.Fatalf("%d runs, %d proposals, want none", runs, len(fake.proposals()))
	}
}
