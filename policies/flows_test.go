package policies

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// flowsOnData is data.gated.config.flows with both bundled rules on.
func flowsOnData() map[string]any {
	return map[string]any{
		"labels": map[string]any{"read_secret": []any{"secret"}, "fetch_page": []any{"untrusted"}, "send_email": []any{"egress"}},
		"window": "1h",
		"rules":  map[string]any{"egress_after_private": true, "write_after_untrusted": "review"},
	}
}

// withFlows is the default bundle with flows as data.gated.config.flows.
func withFlows(t *testing.T, flows map[string]any) *Bundle {
	t.Helper()
	b := mustDefault(t)
	config := b.Data["gated"].(map[string]any)["config"].(map[string]any)
	config["flows"] = flows
	return b
}

// TestReadsSession: the flow state is read only for a bundle that can
// read input.session: the bundled flow rules count only when data turns
// one on, any other rule whenever it can reach it.
func TestReadsSession(t *testing.T) {
	off := flowsOnData()
	delete(off, "rules")
	allOff := flowsOnData()
	allOff["rules"] = map[string]any{"egress_after_private": false}
	for _, tc := range []struct {
		note  string
		flows map[string]any
		extra string
		reads bool
	}{
		{note: "the default bundle"},
		{note: "labels but no rule on", flows: off},
		{note: "every rule off", flows: allOff},
		{note: "a flow rule on", flows: flowsOnData(), reads: true},
		{note: "a rule of the author's", extra: `seen contains l if some l in input.session.labels`, reads: true},
		{note: "input whole", extra: `whole := x if { x := input }`, reads: true},
		{note: "other members of input", extra: `acts contains a if { a := input.proposal.action }`},
	} {
		t.Run(tc.note, func(t *testing.T) {
			b := mustDefault(t)
			if tc.flows != nil {
				b = withFlows(t, tc.flows)
			}
			if tc.extra != "" {
				b.Modules = maps.Clone(b.Modules)
				b.Modules["extra.rego"] = "package gated\n\n" + tc.extra + "\n"
			}
			e, err := Compile(t.Context(), b)
			if err != nil {
				t.Fatal(err)
			}
			if e.ReadsSession() != tc.reads {
				t.Fatalf("ReadsSession() = %v, want %v", e.ReadsSession(), tc.reads)
			}
			_, err = e.Evaluate(t.Context(), engine.PolicyInput{Proposal: writeProposal(), Persona: reviewerPersona, SessionUnread: true})
			if tc.reads != errors.Is(err, engine.ErrSessionUnread) {
				t.Errorf("Evaluate of an input without its flow state: %v", err)
			}
		})
	}
}

// TestFlowsOnBothEvaluators decides the bundled flow rules, on, with the
// planned evaluator and with topdown: both refuse egress after a secret
// read within the window, naming it, route a write after untrusted
// content to review with the flow, and deny on a state they cannot read.
func TestFlowsOnBothEvaluators(t *testing.T) {
	b := withFlows(t, flowsOnData())
	planned, err := Compile(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	if st := planned.Plan(); st.Evaluator != EvaluatorPlanned {
		t.Fatalf("the bundle with flows on is not planned: %+v", st)
	}
	topdown, err := Compile(t.Context(), b, Topdown())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	state := func(ago time.Duration, action string, labels ...string) *gated.SessionState {
		st := gated.NewSessionState([]gated.ExecutedAction{{ProposalID: "earlier", Action: action, Labels: labels, At: now.Add(-ago)}})
		return &st
	}
	send := func(p *gated.Proposal) { p.Action = "send_email" }
	tests := []struct {
		note      string
		mutate    func(*gated.Proposal)
		session   *gated.SessionState
		wantDeny  string
		wantRoute string
		wantWhy   string
	}{
		{note: "egress after a secret read", mutate: send, session: state(time.Minute, "read_secret", "secret"),
			wantDeny: "flow_egress_after_private", wantWhy: "read_secret (proposal earlier)"},
		{note: "egress after the window", mutate: send, session: state(2*time.Hour, "read_secret", "secret"), wantRoute: "route_class"},
		{note: "egress after nothing", mutate: send, session: state(time.Minute, "host_list_services"), wantRoute: "route_class"},
		{note: "egress the agent labels", mutate: func(p *gated.Proposal) { p.Labels = []string{"egress"} },
			session: state(time.Minute, "read_secret", "secret"), wantDeny: "flow_egress_after_private"},
		{note: "write after untrusted content", mutate: func(*gated.Proposal) {}, session: state(time.Minute, "fetch_page", "untrusted"),
			wantRoute: "flow_write_after_untrusted", wantWhy: "fetch_page (proposal earlier)"},
		{note: "state unreadable", mutate: send, session: &gated.SessionState{Error: "the bucket is gone"},
			wantDeny: "flow_state_unreadable", wantWhy: "the bucket is gone"},
		{note: "state not read", mutate: send, wantDeny: "flow_state_unreadable"},
	}
	for _, ev := range []struct {
		name string
		e    *Evaluator
	}{{"planned", planned}, {"topdown", topdown}} {
		for _, tc := range tests {
			t.Run(ev.name+"/"+tc.note, func(t *testing.T) {
				p := writeProposal()
				tc.mutate(p)
				d, err := ev.e.Evaluate(t.Context(), engine.PolicyInput{Proposal: p, Persona: reviewerPersona, Session: tc.session, Now: now})
				if err != nil {
					t.Fatal(err)
				}
				said := d.Review.Why
				if tc.wantDeny != "" {
					if len(d.Denies) == 0 || d.Denies[0].Rule != tc.wantDeny {
						t.Fatalf("denies = %+v, want %s", d.Denies, tc.wantDeny)
					}
					said = d.Denies[0].Message
				} else if len(d.Denies) != 0 || d.Review.Rule != tc.wantRoute {
					t.Fatalf("denies %+v, route %q; want none and %q", d.Denies, d.Review.Rule, tc.wantRoute)
				}
				if !strings.Contains(said, tc.wantWhy) {
					t.Errorf("%q does not name %q", said, tc.wantWhy)
				}
			})
		}
	}
}

// TestFlowsOfRefusesBadData: data.gated.config.flows that would make the
// rules misjudge refuses the bundle, naming the member.
func TestFlowsOfRefusesBadData(t *testing.T) {
	for _, tc := range []struct {
		note, member string
		set          func(map[string]any)
	}{
		{"a window that is not a duration", "window", func(f map[string]any) { f["window"] = "an hour" }},
		{"a negative window", "window", func(f map[string]any) { f["window"] = "-1h" }},
		{"a label not spelled as one", "labels", func(f map[string]any) { f["labels"] = map[string]any{"x": []any{"Secret"}} }},
		{"too many labels for an action", "labels", func(f map[string]any) {
			many := make([]any, gated.MaxLabels+1)
			for i := range many {
				many[i] = fmt.Sprintf("l%d", i)
			}
			f["labels"] = map[string]any{"x": many}
		}},
		{"too many recent actions", "max_recent", func(f map[string]any) { f["max_recent"] = MaxFlowRecent + 1 }},
		{"a rule mode of no meaning", "rules.egress_after_private", func(f map[string]any) {
			f["rules"] = map[string]any{"egress_after_private": "yes"}
		}},
	} {
		t.Run(tc.note, func(t *testing.T) {
			f := flowsOnData()
			tc.set(f)
			_, err := Compile(t.Context(), withFlows(t, f))
			if !errors.Is(err, ErrInvalidBundle) || !strings.Contains(err.Error(), "flows."+tc.member) {
				t.Fatalf("Compile = %v, want ErrInvalidBundle naming flows.%s", err, tc.member)
			}
		})
	}
	f, err := flowsOf(withFlows(t, flowsOnData()).Data)
	if err != nil || !f.On || f.Window != time.Hour || f.MaxRecent != DefaultFlowRecent {
		t.Fatalf("flowsOf = %+v, %v", f, err)
	}
	if got := f.LabelsOf("send_email", []string{"pii", "egress"}); strings.Join(got, ",") != "egress,pii" {
		t.Errorf("LabelsOf = %q, want the data's and the proposal's, each once", got)
	}
}
