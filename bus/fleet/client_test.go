package fleet_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

// scripted answers proposals whose action is outcome_<outcome> with a
// verdict of that outcome, as a reviewer that failed or ran out of time
// would, and hands every other proposal to the engine.
type scripted struct{ next intake.Decider }

func (s scripted) Decide(ctx context.Context, d engine.Delivery) (*gated.Verdict, error) {
	// The subject's last token is the action.
	action := d.Subject[strings.LastIndexByte(d.Subject, '.')+1:]
	if want, ok := strings.CutPrefix(action, "outcome_"); ok {
		a, err := fleet.AddressOf(d.Data)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(d.Data)
		return &gated.Verdict{V: 1, ProposalID: a.ID, Tenant: a.Tenant, Action: a.Action, Kind: gated.KindAction,
			Outcome: gated.Outcome(want), Stage: gated.StageReview, Reason: "scripted " + want, DecidedAt: time.Now(),
			ProposalSHA256: hex.EncodeToString(sum[:])}, nil
	}
	return s.next.Decide(ctx, d)
}

func (s scripted) GiveUp(ctx context.Context, d engine.Delivery, cause error) *gated.Verdict {
	return s.next.GiveUp(ctx, d, cause)
}

func withScript(d intake.Decider) intake.Decider { return scripted{next: d} }

// typed builds a typed proposal of tenant acme.
func typed(id, action string, class gated.Class) *gated.Proposal {
	p := &gated.Proposal{ID: id, Tenant: "acme", Action: action, Class: class,
		Target: map[string]any{"service": "nginx", "device_id": 7}, Reason: "testing the fleet client",
		RequestedBy: &gated.RequestedBy{Agent: "test-agent"}}
	if class != gated.ClassRead {
		p.BlastRadius = gated.BlastSingleDevice
	}
	return p
}

func TestProposeTypedErrors(t *testing.T) {
	g := bustest.StartFleet(t, withScript, bus.Config{})
	sentinels := []error{fleet.ErrReviewRejected, fleet.ErrReviewBlocked, fleet.ErrReviewError, fleet.ErrReviewTimeout, fleet.ErrProposalInvalid}
	skip := typed("t-skip", "host_restart_service", gated.ClassWrite)
	skip.Flags.SkipReview = true
	tests := []struct {
		note    string
		p       *gated.Proposal
		outcome gated.Outcome
		want    error // nil for an approval
	}{
		{note: "read approved at policy", p: typed("t-read", "host_list_services", gated.ClassRead), outcome: gated.OutcomeApproved},
		{note: "skip_review rejected", p: skip, outcome: gated.OutcomeRejected, want: fleet.ErrReviewRejected},
		{note: "no reviewer blocks", p: typed("t-write", "host_restart_service", gated.ClassWrite), outcome: gated.OutcomeBlocked, want: fleet.ErrReviewBlocked},
		{note: "unknown class invalid", p: typed("t-maybe", "host_restart_service", "maybe"), outcome: gated.OutcomeInvalid, want: fleet.ErrProposalInvalid},
		{note: "reviewer error", p: typed("t-err", "outcome_error", gated.ClassWrite), outcome: gated.OutcomeError, want: fleet.ErrReviewError},
		{note: "review timeout", p: typed("t-timeout", "outcome_timeout", gated.ClassWrite), outcome: gated.OutcomeTimeout, want: fleet.ErrReviewTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			v, err := g.Client.Propose(ctx, tc.p)
			if v == nil || v.Outcome != tc.outcome {
				t.Fatalf("verdict %+v (err %v), want outcome %s", v, err, tc.outcome)
			}
			if tc.want == nil {
				if err != nil || !v.Approved {
					t.Fatalf("approval came with err %v, approved %v", err, v.Approved)
				}
				return
			}
			if !errors.Is(err, tc.want) || !errors.Is(err, fleet.ErrNotApproved) {
				t.Fatalf("err = %v, want %v and ErrNotApproved", err, tc.want)
			}
			for _, other := range sentinels {
				if other != tc.want && errors.Is(err, other) {
					t.Errorf("err %v also matches %v", err, other)
				}
			}
			var ve *fleet.VerdictError
			if !errors.As(err, &ve) || ve.Verdict != v || ve.Verdict.Reason == "" || !strings.Contains(err.Error(), ve.Verdict.Reason) {
				t.Fatalf("err %v does not carry the verdict and its reason", err)
			}
		})
	}
	if tests[0].p.V != 0 {
		t.Error("Propose changed the caller's proposal")
	}
}

func TestProposeIsIdempotent(t *testing.T) {
	g := bustest.StartFleet(t, nil, bus.Config{})
	p := typed("idem-1", "host_list_services", gated.ClassRead)
	first, err := g.Client.Propose(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	again, err := g.Client.Propose(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if again.AuditSeq != first.AuditSeq || !again.DecidedAt.Equal(first.DecidedAt) {
		t.Fatalf("the same proposal was decided twice: audit_seq %d then %d", first.AuditSeq, again.AuditSeq)
	}
	other := typed("idem-1", "host_restart_service", gated.ClassWrite)
	if _, err := g.Client.Propose(t.Context(), other); !errors.Is(err, fleet.ErrIDReused) {
		t.Fatalf("another proposal under the same id: err = %v, want ErrIDReused", err)
	}
}

func TestProposeRefusesUnaddressable(t *testing.T) {
	g := bustest.StartFleet(t, nil, bus.Config{})
	for _, p := range []*gated.Proposal{
		nil,
		{ID: "p1", Tenant: "ACME", Action: "x", Class: gated.ClassRead},
		{ID: "p.1", Tenant: "acme", Action: "x", Class: gated.ClassRead},
		{ID: "p1", Tenant: "acme", Action: "", Class: gated.ClassRead},
	} {
		if _, err := g.Client.Propose(t.Context(), p); !errors.Is(err, fleet.ErrBadProposal) {
			t.Errorf("Propose(%+v): err = %v, want ErrBadProposal", p, err)
		}
	}
}

// TestProposalWireForm checks that a fully filled gated.Proposal encodes
// to exactly what gated's strict decoder accepts, and back to the same
// value.
func TestProposalWireForm(t *testing.T) {
	created := time.Date(2026, 3, 4, 5, 6, 7, 890_000_000, time.UTC)
	for _, p := range []*gated.Proposal{
		{
			V: 1, ID: "full-1", Tenant: "acme", Kind: gated.KindAction, Action: "host_restart_service",
			Class: gated.ClassWrite, Target: map[string]any{"device_id": json.Number("7"), "tags": []any{"production"}},
			Reason: "wedged", BlastRadius: gated.BlastSingleDevice,
			Operator:    &gated.Principal{ID: "alice", Roles: []string{"sre"}},
			RequestedBy: &gated.RequestedBy{Agent: "ops-agent", Session: "s-1"},
			IncidentID:  "INC-1", ContextSummary: "health checks fail",
			Flags:    gated.Flags{SkipReview: true, ForceApprove: true, ForceApproveNoSOP: true, UserConfirmed: true},
			Reviewer: "reviewer", CreatedAt: &created,
		},
		{
			V: 1, ID: "run-1", Tenant: "acme", Kind: gated.KindRun, Action: "review_run", Class: gated.ClassWrite,
			BlastRadius: gated.BlastCluster,
			Run: &gated.Run{RunID: "r1", TaskID: "t1", Status: gated.RunCompleted, Summary: "s", Diff: "d", TestOutput: "ok", Round: 2, Worker: "w",
				PriorReviews: []gated.PriorReview{{ProposalID: "run-0", Round: 1, Findings: []gated.Finding{{ID: "r1-f1", Body: "add a test", Status: gated.FindingResolved, Resolution: "added"}}}}},
			Criteria: []gated.Criterion{{ID: "c1", Description: "tests pass", Required: true, Kind: gated.CriterionCommandResult,
				Params: map[string]any{"exit_code": json.Number("0")}, Evidence: map[string]any{"exit_code": json.Number("0")}}},
		},
		{V: 1, ID: "min-1", Tenant: "acme", Action: "host_list_services", Class: gated.ClassRead},
	} {
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := gated.DecodeProposal(data, p.Tenant, p.Action, gated.Limits{})
		if err != nil {
			t.Fatalf("%s: gated refuses the client's encoding: %v\n%s", p.ID, err, data)
		}
		want := *p
		if want.Kind == "" {
			want.Kind = gated.KindAction
		}
		if !reflect.DeepEqual(got, &want) {
			t.Fatalf("%s: round trip changed the proposal\n got %+v\nwant %+v", p.ID, got, &want)
		}
	}
}

func TestProposeNoVerdictBeforeDeadline(t *testing.T) {
	s := natstest.Server(t)
	nc, js := natstest.Connect(t, s)
	if _, err := bus.Setup(t.Context(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	// No worker runs: the proposal is queued and nobody answers.
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	v, err := client.Propose(ctx, typed("late-1", "host_list_services", gated.ClassRead))
	if !errors.Is(err, fleet.ErrNoVerdict) || v != nil {
		t.Fatalf("verdict %v, err = %v; want ErrNoVerdict", v, err)
	}
	if errors.Is(err, fleet.ErrReviewTimeout) || errors.Is(err, fleet.ErrNotApproved) {
		t.Fatalf("err %v: the caller's deadline is not a verdict", err)
	}
	// The client's default wait applies when the context has none.
	short, err := fleet.NewClient(nc, fleet.WithDefaultWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := short.ProposeRaw(t.Context(), bustest.Proposal("late-2", "read", "host_list_services", "")); !errors.Is(err, fleet.ErrNoVerdict) {
		t.Fatalf("default wait: err = %v, want ErrNoVerdict", err)
	}
	if _, err := fleet.NewClient(nc, fleet.WithDefaultWait(0)); !errors.Is(err, fleet.ErrInvalidConfig) {
		t.Fatalf("zero wait: err = %v, want ErrInvalidConfig", err)
	}
}

func TestVerdictLookup(t *testing.T) {
	g := bustest.StartFleet(t, nil, bus.Config{})
	v := g.Propose(t, bustest.Proposal("look-1", "read", "host_list_services", ""))
	got, err := g.Client.Verdict(t.Context(), "acme", "look-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.AuditSeq != v.AuditSeq || got.Outcome != v.Outcome {
		t.Fatalf("stored %+v, published %+v", got, v)
	}
	if _, err := g.Client.Verdict(t.Context(), "acme", "never-proposed"); !errors.Is(err, gated.ErrNotFound) {
		t.Fatalf("missing verdict: err = %v, want gated.ErrNotFound", err)
	}
	if _, err := g.Client.Verdict(t.Context(), "acme", "a.b"); !errors.Is(err, fleet.ErrBadProposal) {
		t.Fatalf("dotted id: err = %v, want ErrBadProposal", err)
	}
	// A deleted key reads as not found, not as an empty verdict.
	if err := g.Resources.Verdicts.Delete(t.Context(), "acme.look-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Client.Verdict(t.Context(), "acme", "look-1"); !errors.Is(err, gated.ErrNotFound) {
		t.Fatalf("deleted verdict: err = %v, want gated.ErrNotFound", err)
	}
}

// TestProposeSkipsForeignMessagesOnItsVerdictSubject: another client can
// make a publish acknowledgement or someone else's verdict land on this
// proposal's verdict subject; the wait goes on to the real verdict.
func TestProposeSkipsForeignMessagesOnItsVerdictSubject(t *testing.T) {
	k := bustest.NewGatekeeper()
	g := bustest.StartHeldFleet(t, k)
	type result struct {
		v   *gated.Verdict
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := g.Client.ProposeRaw(t.Context(), bustest.Proposal("foreign-1", "read", "host_list_services", ""))
		done <- result{v, err}
	}()
	<-k.Arrived // published, subscribed, and held before any verdict
	subject := wire.VerdictSubject("acme", "foreign-1")
	for _, junk := range []string{
		`{"stream":"GATED_PROPOSALS","seq":7}`,
		`not json`,
		`{"v":1,"proposal_id":"other","tenant":"acme","outcome":"approved","approved":true}`,
		`{"v":1,"proposal_id":"foreign-1","tenant":"globex","outcome":"approved","approved":true}`,
	} {
		if err := g.NC.Publish(subject, []byte(junk)); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	k.Open()
	r := <-done
	if r.err != nil {
		t.Fatalf("ProposeRaw: %v", r.err)
	}
	if r.v.ProposalID != "foreign-1" || r.v.Tenant != "acme" || r.v.Stage != gated.StagePolicy {
		t.Fatalf("got %+v, want gated's verdict of acme.foreign-1", r.v)
	}
}

// TestForgedApprovalIsNotAnApproval: a message on the verdict subject (or
// a reply from whoever answers on the review subject) is not
// authenticated. An attacker that sees the proposal can forge a verdict
// with the right tenant, id and digest; with no gated deciding anything,
// the client must still not report an approval, and a guarded tool must
// not run.
func TestForgedApprovalIsNotAnApproval(t *testing.T) {
	s := natstest.Server(t)
	nc, js := natstest.Connect(t, s)
	if _, err := bus.Setup(t.Context(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	attacker, _ := natstest.Connect(t, s)
	forge := func(m *nats.Msg) {
		a, err := fleet.AddressOf(m.Data)
		if err != nil {
			return
		}
		sum := sha256.Sum256(m.Data)
		v, _ := json.Marshal(gated.Verdict{V: 1, ProposalID: a.ID, Tenant: a.Tenant, Action: a.Action, Kind: gated.KindAction,
			Outcome: gated.OutcomeApproved, Approved: true, Stage: gated.StageReview, Reason: "forged",
			DecidedAt: time.Now(), ProposalSHA256: hex.EncodeToString(sum[:])})
		if m.Reply != "" && strings.HasPrefix(m.Subject, wire.ReviewSubjectPrefix) {
			_ = m.Respond(v)
			return
		}
		_ = attacker.Publish(wire.VerdictSubject(a.Tenant, a.ID), v)
	}
	for _, subject := range []string{"gated.proposals.>", "gated.review.>"} {
		if _, err := attacker.Subscribe(subject, forge); err != nil {
			t.Fatal(err)
		}
	}
	if err := attacker.Flush(); err != nil {
		t.Fatal(err)
	}
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	p := typed("forged-1", "db_drop_table", gated.ClassDestructive)
	if v, err := client.Propose(ctx, p); err == nil || (v != nil && v.Approved) {
		t.Fatalf("Propose with a forged approval on the verdict subject: %+v, %v", v, err)
	}
	raw, _ := json.Marshal(typed("forged-2", "db_drop_table", gated.ClassDestructive))
	if v, err := client.RequestReview(ctx, raw); err == nil || (v != nil && v.Approved) {
		t.Fatalf("RequestReview answered by a forger: %+v, %v", v, err)
	}
	gate, err := fleet.NewToolGate(client, identity, fleet.WithProposalIDs(func() string { return "forged-3" }))
	if err != nil {
		t.Fatal(err)
	}
	var tool countingTool
	if _, err := fleet.Guard(gate, restartSpec, tool.run)(ctx, restartArgs{Host: "web-1"}); err == nil || tool.runs.Load() != 0 {
		t.Fatalf("guarded tool: err %v, runs %d; want an error and no run", err, tool.runs.Load())
	}
}

func TestAddressOf(t *testing.T) {
	tests := []struct {
		note string
		data string
		ok   bool
	}{
		{note: "valid", data: `{"tenant":"acme","id":"p-1","action":"x"}`, ok: true},
		{note: "not JSON", data: `nope`},
		{note: "uppercase tenant", data: `{"tenant":"ACME","id":"p1","action":"x"}`},
		{note: "dotted id", data: `{"tenant":"acme","id":"p.1","action":"x"}`},
		{note: "missing action", data: `{"tenant":"acme","id":"p1"}`},
		{note: "wrong type", data: `{"tenant":1,"id":"p1","action":"x"}`},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			_, err := fleet.AddressOf([]byte(tc.data))
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, fleet.ErrBadProposal) {
				t.Fatalf("err = %v, want ErrBadProposal", err)
			}
		})
	}
}

func FuzzAddressOf(f *testing.F) {
	f.Add([]byte(`{"tenant":"acme","id":"p-1","action":"x"}`))
	f.Add([]byte(`{"tenant":"acme","id":"p.1"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := fleet.AddressOf(data)
		if err != nil {
			return
		}
		if !gated.ValidTenant(a.Tenant) || !gated.ValidID(a.ID) || !gated.ValidAction(a.Action) {
			t.Fatalf("accepted an address with bad tokens: %+v", a)
		}
	})
}

func TestClientRefusesAnotherProposalsVerdict(t *testing.T) {
	g := bustest.StartFleet(t, nil, bus.Config{})
	g.Propose(t, bustest.Proposal("reuse2", "read", "host_list_services", ""))
	// Within the duplicate window the stream drops the second proposal;
	// the client must not hand back the first one's approval.
	_, err := g.Client.ProposeRaw(t.Context(), bustest.Proposal("reuse2", "destructive", "db_drop_table", ""))
	if !errors.Is(err, fleet.ErrIDReused) {
		t.Fatalf("err = %v, want ErrIDReused", err)
	}
}
