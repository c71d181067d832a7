package engine_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/grant"
)

// withGrants gives the harness's engine a grant key ring (5-minute
// grants) and returns the ring.
func withGrants(t *testing.T, ring **grant.Ring) func(*harness) {
	return func(h *harness) {
		r, err := grant.NewRing(h.now.Add(-time.Hour), 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		*ring = r
		h.cfg.Grants = engine.GrantIssuer{Ring: func() *grant.Ring { return r }, TTL: 5 * time.Minute}
	}
}

// checkGrant verifies v's grant as an executor would, for the target
// given as JSON, and checks its claims and the grant.issued record.
func checkGrant(t *testing.T, h *harness, ring *grant.Ring, v *gated.Verdict, target string, reviewers []grant.Reviewer, events []gated.AuditEvent) {
	t.Helper()
	c, err := grant.Verify(v.Grant, ring.Public(h.now), h.now, grant.Expect{
		Tenant: v.Tenant, ProposalID: v.ProposalID, ProposalSHA256: v.ProposalSHA256, Action: v.Action, Target: []byte(target),
	})
	if err != nil {
		t.Fatalf("the approved verdict's grant does not verify: %v", err)
	}
	if c.PolicyRevision != v.Policy.Revision || c.ExpiresAt-c.IssuedAt != 300 || c.IssuedAt != h.now.Unix() {
		t.Errorf("claims %+v: want policy revision %s, issued now, 5 minutes", c, v.Policy.Revision)
	}
	if !slices.Equal(c.Reviewers, reviewers) {
		t.Errorf("reviewers %+v, want %+v", c.Reviewers, reviewers)
	}
	i := slices.IndexFunc(events, func(ev gated.AuditEvent) bool { return ev.Event == gated.EventGrantIssued })
	if i < 0 || events[len(events)-1].Event != gated.EventVerdict {
		t.Fatalf("events %v: want grant.issued before verdict.decided", names(events))
	}
	var d struct {
		GID        string `json:"gid"`
		Tenant     string `json:"tenant"`
		ProposalID string `json:"proposal_id"`
		KID        string `json:"kid"`
		Exp        int64  `json:"exp"`
	}
	decodeData(t, events[i], &d)
	if d.GID != c.GID || d.KID != ring.Active().KID || d.Exp != c.ExpiresAt || d.ProposalID != v.ProposalID {
		t.Errorf("grant.issued %+v does not name the grant %+v", d, c)
	}
}

func names(evs []gated.AuditEvent) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Event)
	}
	return out
}

// TestGrantOnApprovalsOnly: every approved action verdict carries a grant
// that verifies; no other outcome carries one.
func TestGrantOnApprovalsOnly(t *testing.T) {
	const target = `{"device_id":7,"service":"nginx","tags":["production"]}`
	sop := []grant.Reviewer{{Plugin: "sop", PluginVersion: "1.2.3", Persona: "reviewer"}}
	t.Run("reviewed approval", func(t *testing.T) {
		var ring *grant.Ring
		h := newHarness(t, withGrants(t, &ring))
		v, tr := h.mustDecide(t, testSubject, proposalJSON(t, nil), "")
		if v.Outcome != gated.OutcomeApproved {
			t.Fatalf("outcome %s: %s", v.Outcome, v.Reason)
		}
		checkGrant(t, h, ring, v, target, sop, tr.all())
		if stored := h.store.stored(t, "acme", "p1"); stored.Grant != v.Grant {
			t.Error("the stored verdict does not carry the grant")
		}
		again, err := h.decideOn(t.Context(), h.stream.trail(), testSubject, proposalJSON(t, nil), "")
		if err != nil || again.Grant != v.Grant {
			t.Errorf("a replay answered grant %q (%v), want the stored verdict's", again.Grant, err)
		}
	})
	t.Run("policy-only approval", func(t *testing.T) {
		var ring *grant.Ring
		h := newHarness(t, withGrants(t, &ring))
		v, tr := h.mustDecide(t, "gated.proposals.acme.host_list_services", proposalJSON(t, map[string]any{"action": "host_list_services", "class": "read", "blast_radius": nil}), "")
		if v.Outcome != gated.OutcomeApproved || h.reviewer.calls() != 0 {
			t.Fatalf("outcome %s after %d reviews: %s", v.Outcome, h.reviewer.calls(), v.Reason)
		}
		checkGrant(t, h, ring, v, target, []grant.Reviewer{}, tr.all())
	})
	noGrant := []struct {
		note    string
		opt     func(*harness)
		subject string
		data    func(t *testing.T) []byte
		want    gated.Outcome
	}{
		{"reviewer rejects", func(h *harness) {
			h.reviewer.answer = approvalWith(func(r *engine.ReviewResult) { r.Text, r.Decision = "Decision: reject", gated.DecisionReject })
		}, testSubject, func(t *testing.T) []byte { return proposalJSON(t, nil) }, gated.OutcomeRejected},
		{"policy denies", nil, testSubject, func(t *testing.T) []byte {
			return proposalJSON(t, map[string]any{"flags": map[string]any{"skip_review": true}})
		}, gated.OutcomeRejected},
		{"invalid", nil, testSubject, func(t *testing.T) []byte { return proposalJSON(t, map[string]any{"class": "maybe"}) }, gated.OutcomeInvalid},
		{"reviewer fails", func(h *harness) { h.reviewer.answer = answer(engine.ReviewResult{}, errors.New("plugin crashed")) },
			testSubject, func(t *testing.T) []byte { return proposalJSON(t, nil) }, gated.OutcomeError},
		{"no reviewer", func(h *harness) { h.router.err = engine.ErrNoReviewer },
			testSubject, func(t *testing.T) []byte { return proposalJSON(t, nil) }, gated.OutcomeBlocked},
	}
	for _, tc := range noGrant {
		t.Run(tc.note, func(t *testing.T) {
			var ring *grant.Ring
			h := newHarness(t, withGrants(t, &ring))
			if tc.opt != nil {
				tc.opt(h)
			}
			v, tr := h.mustDecide(t, tc.subject, tc.data(t), "")
			if v.Outcome != tc.want {
				t.Fatalf("outcome %s, want %s: %s", v.Outcome, tc.want, v.Reason)
			}
			if v.Grant != "" || slices.Contains(tr.names(), gated.EventGrantIssued) {
				t.Errorf("a %s verdict carries a grant (%q) or audited one (%v)", v.Outcome, v.Grant, tr.names())
			}
		})
	}
}

// TestGrantOnHeldActions: an operator's approval of a held action carries
// a grant naming the operator; the held verdict, a rejection and a
// timeout carry none.
func TestGrantOnHeldActions(t *testing.T) {
	heldTarget := `{"zone":"example.org"}`
	for _, tc := range []struct {
		note     string
		settle   func(h *harness, held *gated.Verdict) (*gated.Verdict, []gated.AuditEvent, error)
		approved bool
	}{
		{"operator approves", func(h *harness, held *gated.Verdict) (*gated.Verdict, []gated.AuditEvent, error) {
			tr := h.stream.trail()
			v, err := h.eng.Resolve(t.Context(), actionDecision(held, engine.OperatorApprove), tr)
			return v, tr.all(), err
		}, true},
		{"operator rejects", func(h *harness, held *gated.Verdict) (*gated.Verdict, []gated.AuditEvent, error) {
			tr := h.stream.trail()
			v, err := h.eng.Resolve(t.Context(), actionDecision(held, engine.OperatorReject), tr)
			return v, tr.all(), err
		}, false},
		{"deadline passes", func(h *harness, held *gated.Verdict) (*gated.Verdict, []gated.AuditEvent, error) {
			h.advance(15 * time.Minute)
			tr := h.stream.trail()
			v, err := h.eng.Expire(t.Context(), "acme", "p1", tr)
			return v, tr.all(), err
		}, false},
	} {
		t.Run(tc.note, func(t *testing.T) {
			ev, err := holdingPolicy()
			if err != nil {
				t.Fatal(err)
			}
			var ring *grant.Ring
			h := newHarness(t, func(h *harness) { h.cfg.Policy = ev }, withGrants(t, &ring))
			held := decideHeld(t, h)
			if held.Grant != "" {
				t.Fatal("a held verdict carries a grant")
			}
			v, events, err := tc.settle(h, held)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.approved {
				if v.Grant != "" || slices.Contains(names(events), gated.EventGrantIssued) {
					t.Errorf("a %s verdict carries a grant", v.Outcome)
				}
				return
			}
			checkGrant(t, h, ring, v, heldTarget, []grant.Reviewer{{Plugin: "operator", Persona: "alice"}}, events)
			if stored := h.store.stored(t, "acme", "p1"); stored.Grant != v.Grant {
				t.Error("the stored verdict does not carry the grant")
			}
		})
	}
}

// failingGranter cannot sign.
type failingGranter struct{}

func (failingGranter) Grant(c grant.Claims, _ time.Time) (string, grant.Claims, string, error) {
	return "", c, "", errors.New("signing key unavailable")
}

// TestGrantFailureStoresNothing: an approval whose grant cannot be signed
// is not stored, so the delivery is retried; it never goes out without
// its grant.
func TestGrantFailureStoresNothing(t *testing.T) {
	h := newHarness(t, func(h *harness) { h.cfg.Grants = failingGranter{} })
	_, err := h.decideOn(t.Context(), h.stream.trail(), testSubject, proposalJSON(t, nil), "")
	if err == nil {
		t.Fatal("an approval without its grant was decided")
	}
	if h.store.size() != 0 {
		t.Errorf("the store holds %d verdicts", h.store.size())
	}
}

func decodeData(t *testing.T, ev gated.AuditEvent, into any) {
	t.Helper()
	if err := json.Unmarshal(ev.Data, into); err != nil {
		t.Fatalf("event %s data: %v", ev.Event, err)
	}
}
