package engine_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/policies"
)

// compileWith compiles the default bundle with extra modules.
func compileWith(t *testing.T, extra map[string]string) *policies.Evaluator {
	t.Helper()
	b, err := policies.Default()
	if err != nil {
		t.Fatal(err)
	}
	for name, src := range extra {
		b.Modules[name] = src
	}
	ev, err := policies.Compile(t.Context(), b)
	if err != nil {
		t.Fatalf("compiling the bundle: %v", err)
	}
	return ev
}

// denyNginx denies every proposal on the nginx service, reads included.
const denyNginx = `package gated

deny contains {"rule": "nginx_frozen", "message": "nginx is frozen"} if {
	input.proposal.target.service == "nginx"
}
`

// explodeOnIncident fails at run time on every proposal of incident
// INC-9.
const explodeOnIncident = `package gated

deny contains {"rule": "reason_budget", "message": "too expensive"} if {
	input.proposal.incident_id == "INC-9"
	to_number(input.proposal.reason) > 100
}
`

// TestShadowNeverChangesTheVerdict decides proposals with a live policy
// and a real candidate beside it that decides otherwise: the verdict is
// always the live policy's, and each difference is audited with both
// decisions and reported to OnShadow.
func TestShadowNeverChangesTheVerdict(t *testing.T) {
	read := map[string]any{"class": "read", "blast_radius": nil, "action": "host_list_services"}
	cases := []struct {
		note           string
		live, shadow   map[string]string
		override       map[string]any
		subject        string
		want           gated.Outcome
		wantReviews    int
		wantLive       string
		wantShadow     string
		wantKinds      []string
		wantRules      []string
		wantShadowDiff bool
	}{
		{
			note: "shadow approves what live rejects", live: map[string]string{"x.rego": denyNginx},
			override: read, subject: "gated.proposals.acme.host_list_services",
			want: gated.OutcomeRejected, wantLive: "rejected", wantShadow: "approved",
			wantKinds: []string{gated.ShadowDiffOutcome}, wantRules: []string{"nginx_frozen"}, wantShadowDiff: true,
		},
		{
			note: "shadow rejects what live approves", shadow: map[string]string{"x.rego": denyNginx},
			override: read, subject: "gated.proposals.acme.host_list_services",
			want: gated.OutcomeApproved, wantLive: "approved", wantShadow: "rejected",
			wantKinds: []string{gated.ShadowDiffOutcome}, wantRules: []string{"nginx_frozen"}, wantShadowDiff: true,
		},
		{
			note: "shadow rejects what live sends to an approving review", shadow: map[string]string{"x.rego": denyNginx},
			subject: testSubject, want: gated.OutcomeApproved, wantReviews: 1, wantLive: "review", wantShadow: "rejected",
			wantKinds: []string{gated.ShadowDiffOutcome}, wantRules: []string{"nginx_frozen"}, wantShadowDiff: true,
		},
		{
			note: "shadow that fails to evaluate is a difference of kind error", shadow: map[string]string{"x.rego": explodeOnIncident},
			override: map[string]any{"class": "read", "blast_radius": nil, "action": "host_list_services", "incident_id": "INC-9"}, subject: "gated.proposals.acme.host_list_services",
			want: gated.OutcomeApproved, wantLive: "approved", wantShadow: "error",
			wantKinds: []string{gated.ShadowDiffError, gated.ShadowDiffOutcome}, wantShadowDiff: true,
		},
		{
			note: "shadow that agrees records no difference", shadow: map[string]string{"x.rego": "package gated\n\nunused_marker := true\n"},
			override: read, subject: "gated.proposals.acme.host_list_services",
			want: gated.OutcomeApproved, wantLive: "approved", wantShadow: "approved", wantKinds: []string{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			live, shadow := compileWith(t, tc.live), compileWith(t, tc.shadow)
			var mu sync.Mutex
			var heard []gated.ShadowComparison
			h := newHarness(t, func(h *harness) {
				h.cfg.Policy, h.cfg.Shadow = live, shadow
				h.cfg.OnShadow = func(_ *gated.Proposal, c gated.ShadowComparison) {
					mu.Lock()
					heard = append(heard, c)
					mu.Unlock()
				}
			})
			v, tr := h.mustDecide(t, tc.subject, proposalJSON(t, tc.override), "")
			if v.Outcome != tc.want {
				t.Fatalf("verdict %s at %s (%s), want %s: the shadow changed the verdict", v.Outcome, v.Stage, v.Reason, tc.want)
			}
			if v.Policy == nil || v.Policy.Revision != live.Revision() {
				t.Errorf("verdict policy %+v, want the live revision %s", v.Policy, live.Revision())
			}
			if got := h.reviewer.calls(); got != tc.wantReviews {
				t.Errorf("reviewer called %d times, want %d", got, tc.wantReviews)
			}
			if len(heard) != 1 {
				t.Fatalf("OnShadow heard %d comparisons, want 1", len(heard))
			}
			c := heard[0]
			if c.Live.Outcome != tc.wantLive || c.Shadow.Outcome != tc.wantShadow || !slices.Equal(c.Kinds, tc.wantKinds) || !slices.Equal(c.Rules, tc.wantRules) {
				t.Errorf("comparison live %s shadow %s kinds %v rules %v; want live %s shadow %s kinds %v rules %v",
					c.Live.Outcome, c.Shadow.Outcome, c.Kinds, c.Rules, tc.wantLive, tc.wantShadow, tc.wantKinds, tc.wantRules)
			}
			if c.Live.Revision != live.Revision() || c.Shadow.Revision != shadow.Revision() {
				t.Errorf("comparison revisions live %s shadow %s, want %s and %s", c.Live.Revision, c.Shadow.Revision, live.Revision(), shadow.Revision())
			}
			var decided struct {
				ShadowRevision string `json:"shadow_revision"`
			}
			var differs []gated.ShadowComparison
			for _, ev := range tr.all() {
				switch ev.Event {
				case gated.EventPolicyDecided:
					if err := json.Unmarshal(ev.Data, &decided); err != nil {
						t.Fatal(err)
					}
				case gated.EventPolicyShadowDiffers:
					var got gated.ShadowComparison
					if err := json.Unmarshal(ev.Data, &got); err != nil {
						t.Fatal(err)
					}
					differs = append(differs, got)
				}
			}
			if decided.ShadowRevision != shadow.Revision() {
				t.Errorf("policy.decided shadow_revision %q, want %q", decided.ShadowRevision, shadow.Revision())
			}
			if !tc.wantShadowDiff {
				if len(differs) != 0 {
					t.Errorf("recorded %d policy.shadow_differs events for agreeing decisions", len(differs))
				}
				return
			}
			if len(differs) != 1 {
				t.Fatalf("recorded %d policy.shadow_differs events, want 1: %v", len(differs), tr.names())
			}
			got := differs[0]
			if got.Live.Outcome != tc.wantLive || got.Shadow.Outcome != tc.wantShadow || !slices.Equal(got.Kinds, tc.wantKinds) {
				t.Errorf("audited live %s shadow %s kinds %v; want %s, %s, %v", got.Live.Outcome, got.Shadow.Outcome, got.Kinds, tc.wantLive, tc.wantShadow, tc.wantKinds)
			}
			if tc.wantShadow == "error" && got.Shadow.Error == "" {
				t.Error("audited shadow error has no message")
			}
			if tc.wantShadow == "rejected" && !slices.ContainsFunc(got.Shadow.Denies, func(d gated.Deny) bool { return d.Rule == "nginx_frozen" }) {
				t.Errorf("audited shadow denies %v lack nginx_frozen", got.Shadow.Denies)
			}
		})
	}
}

// TestCompareShadow checks the kinds of difference on decisions built by
// hand.
func TestCompareShadow(t *testing.T) {
	deny := func(rules ...string) []gated.Deny {
		out := []gated.Deny{}
		for _, r := range rules {
			out = append(out, gated.Deny{Rule: r, Message: r})
		}
		return out
	}
	route := func(persona string, quorum int) *gated.Route {
		return &gated.Route{Required: true, Persona: persona, Quorum: quorum}
	}
	cases := []struct {
		note         string
		live, shadow gated.ShadowDecision
		kinds, rules []string
	}{
		{note: "same review", live: gated.ShadowDecision{Outcome: "review", Denies: deny(), Route: route("reviewer", 1)},
			shadow: gated.ShadowDecision{Outcome: "review", Denies: deny(), Route: route("reviewer", 1)}, kinds: []string{}},
		{note: "other persona", live: gated.ShadowDecision{Outcome: "review", Denies: deny(), Route: route("reviewer", 1)},
			shadow: gated.ShadowDecision{Outcome: "review", Denies: deny(), Route: route("dba", 1)}, kinds: []string{"route"}},
		{note: "higher quorum", live: gated.ShadowDecision{Outcome: "review", Denies: deny(), Route: route("reviewer", 1)},
			shadow: gated.ShadowDecision{Outcome: "review", Denies: deny(), Route: route("reviewer", 2)}, kinds: []string{"route"}},
		{note: "other deny rule", live: gated.ShadowDecision{Outcome: "rejected", Denies: deny("a", "b")},
			shadow: gated.ShadowDecision{Outcome: "rejected", Denies: deny("b", "c")}, kinds: []string{"denies"}, rules: []string{"a", "c"}},
		{note: "live error, shadow decides", live: gated.ShadowDecision{Outcome: "error", Denies: deny(), Error: "boom"},
			shadow: gated.ShadowDecision{Outcome: "approved", Denies: deny()}, kinds: []string{"error", "outcome"}},
		{note: "both error", live: gated.ShadowDecision{Outcome: "error", Denies: deny(), Error: "boom"},
			shadow: gated.ShadowDecision{Outcome: "error", Denies: deny(), Error: "boom"}, kinds: []string{"error"}},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			c := engine.CompareShadow(tc.live, tc.shadow)
			if !slices.Equal(c.Kinds, tc.kinds) || !slices.Equal(c.Rules, tc.rules) {
				t.Errorf("kinds %v rules %v, want %v and %v", c.Kinds, c.Rules, tc.kinds, tc.rules)
			}
			if c.Differs() != (len(tc.kinds) > 0) {
				t.Errorf("Differs() = %v with kinds %v", c.Differs(), c.Kinds)
			}
		})
	}
}

// BenchmarkDecideShadow measures what a shadow policy adds to deciding a
// policy-decided proposal (a read, approved at policy), against the same
// engine without one, on the default bundle and a real candidate.
func BenchmarkDecideShadow(b *testing.B) {
	b.Run("live", func(b *testing.B) { benchDecide(b, nil) })
	b.Run("live+shadow", func(b *testing.B) {
		b.Helper()
		bundle, err := policies.Default()
		if err != nil {
			b.Fatal(err)
		}
		bundle.Modules["x.rego"] = denyNginx
		shadow, err := policies.Compile(b.Context(), bundle)
		if err != nil {
			b.Fatal(err)
		}
		benchDecide(b, shadow)
	})
}

func benchDecide(b *testing.B, shadow engine.Policy) {
	eng, err := engine.New(engine.Config{
		Policy: defaultPolicy(b), Shadow: shadow, Personas: personaSet{"reviewer": reviewerPersona()},
		Router: &fakeRouter{reviewer: &fakeReviewer{answer: answer(approval(), nil)}}, Store: newMemStore(),
		DedupeWindow: -1,
	})
	if err != nil {
		b.Fatal(err)
	}
	stream := newAuditStream()
	const subject = "gated.proposals.acme.host_list_services"
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		data := proposalJSON(b, map[string]any{"id": fmt.Sprint("p", i), "class": "read", "blast_radius": nil, "action": "host_list_services",
			"target": map[string]any{"device_id": i, "service": "mysql"}})
		v, err := eng.Decide(b.Context(), engine.Delivery{Subject: subject, Data: data, Attempt: 1, Trail: stream.trail()})
		if err != nil || v.Outcome != gated.OutcomeApproved {
			b.Fatalf("verdict %v, err %v", v, err)
		}
	}
}
