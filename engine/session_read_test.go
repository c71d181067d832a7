package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/policies"
)

// countingSessions counts the reads of the flow state, which it gives as
// a secret read a minute before the harness's clock, or fails with err.
type countingSessions struct {
	reads atomic.Int64
	at    time.Time
	err   error
}

func (s *countingSessions) Session(context.Context, string, string) (gated.SessionState, error) {
	s.reads.Add(1)
	if s.err != nil {
		return gated.SessionState{}, s.err
	}
	return gated.NewSessionState([]gated.ExecutedAction{{ProposalID: "p-read", Action: "read_secret", Labels: []string{"secret"}, At: s.at}}), nil
}

// compileFlows is the default bundle with the flow rules on, or with
// labels only when on is false.
func compileFlows(t *testing.T, on bool) *policies.Evaluator {
	t.Helper()
	b, err := policies.Default()
	if err != nil {
		t.Fatal(err)
	}
	flows := map[string]any{"labels": map[string]any{"send_email": []any{"egress"}}}
	if on {
		flows["rules"] = map[string]any{"egress_after_private": true}
	}
	b.Data["gated"].(map[string]any)["config"].(map[string]any)["flows"] = flows
	e, err := policies.Compile(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestSessionReadOnlyWhenAPolicyCanReadIt: the flow state is not read for
// a policy that cannot read input.session (the flow rules off), is read
// once for one that can, even when the engine was told otherwise, and a
// state that cannot be read refuses the proposal when the rules are on.
func TestSessionReadOnlyWhenAPolicyCanReadIt(t *testing.T) {
	send := map[string]any{"class": "read", "blast_radius": nil, "action": "send_email"}
	off, on := compileFlows(t, false), compileFlows(t, true)
	no := func() bool { return false }
	for _, tc := range []struct {
		note     string
		live     *policies.Evaluator
		reads    func() bool
		err      error
		want     gated.Outcome
		wantRule string
		count    int64
	}{
		{note: "flow rules off", live: off, reads: off.ReadsSession, want: gated.OutcomeApproved},
		{note: "flow rules on", live: on, reads: on.ReadsSession, want: gated.OutcomeRejected, wantRule: "flow_egress_after_private", count: 1},
		{note: "flow rules on, the engine told they are off", live: on, reads: no, want: gated.OutcomeRejected, wantRule: "flow_egress_after_private", count: 1},
		{note: "flow rules on, the state unreadable", live: on, reads: on.ReadsSession, err: errors.New("bucket gone"),
			want: gated.OutcomeRejected, wantRule: "flow_state_unreadable", count: 1},
	} {
		t.Run(tc.note, func(t *testing.T) {
			sessions := &countingSessions{err: tc.err}
			h := newHarness(t, func(h *harness) {
				h.cfg.Policy, h.cfg.Sessions, h.cfg.PolicyReadsSession = tc.live, sessions, tc.reads
				sessions.at = h.now.Add(-time.Minute)
			})
			v, _ := h.mustDecide(t, "gated.proposals.acme.send_email", proposalJSON(t, send), "")
			if v.Outcome != tc.want {
				t.Fatalf("verdict %s at %s (%s), want %s", v.Outcome, v.Stage, v.Reason, tc.want)
			}
			if tc.wantRule != "" && (v.Policy == nil || len(v.Policy.Rules) == 0 || v.Policy.Rules[0] != tc.wantRule) {
				t.Errorf("policy %+v, want rule %s", v.Policy, tc.wantRule)
			}
			if tc.wantRule == "flow_egress_after_private" && !strings.Contains(v.Reason, "read_secret (proposal p-read)") {
				t.Errorf("reason %q does not name the earlier read", v.Reason)
			}
			if got := sessions.reads.Load(); got != tc.count {
				t.Errorf("the flow state was read %d times, want %d", got, tc.count)
			}
		})
	}
}
