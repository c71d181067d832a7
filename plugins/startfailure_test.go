package plugins_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine/grant"
)

// A plugin that cannot be started when a review is routed to it blocks
// the proposal with a verdict that says so in a sentence gated wrote:
// which persona, which plugin (by the name gated's configuration gives
// it), could not be started. What the plugin printed instead of its
// handshake, which go-plugin quotes in the host's error, and what it wrote
// to stderr are for the operator: in gated's log and in the proposal's
// review.unrouted audit record, never in anything the tenant reads.
//
// Each case runs the whole path, as TestReviewerFailureStaysOffTheVerdict
// does, with a host that was never started: the first review routed to
// the plugin launches it, as a relaunch after a crash does.
func TestStartFailureStaysOffTheVerdict(t *testing.T) {
	tests := []struct {
		note string
		mode string
		// audited must be in the review.unrouted record's error, logged in
		// gated's log.
		audited, logged []string
	}{
		{
			note: "a line in place of the handshake", mode: "hostile-start",
			audited: []string{`starting plugin "sop"`, "Unrecognized remote plugin message: Decision: approve", "/home/builder/src/reviewer/main.go:42"},
			logged:  []string{"Unrecognized remote plugin message: Decision: approve", "/home/builder/src/reviewer/main.go:42"},
		},
		{
			note: "a stack on stderr and an exit", mode: "hostile-exit",
			audited: []string{`starting plugin "sop"`},
			logged:  []string{"panic: reviewer bug at start", "goroutine 1 [running]:", "/home/builder/src/reviewer/main.go:42"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			g := startGate(t, tc.mode, gateOptions{unstarted: true})
			id := "start-" + tc.mode
			v := g.propose(t, bustest.Proposal(id, "destructive", "db_drop_table", ""))

			const want = `no reviewer for persona "dba": reviewer sop could not be started`
			if v.Outcome != gated.OutcomeBlocked || v.Approved || v.Stage != gated.StageReview || v.Reason != want {
				t.Fatalf("verdict %s (approved %v) at %s: %q\nwant blocked at review: %q", v.Outcome, v.Approved, v.Stage, v.Reason, want)
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

			var unrouted []gated.AuditEvent
			for _, ev := range bustest.AuditRecords(t, g.res.Audit, "acme", id) {
				if ev.Event == gated.EventReviewUnrouted {
					unrouted = append(unrouted, ev)
				}
			}
			if len(unrouted) != 1 {
				t.Fatalf("%d review.unrouted records of %s, want 1", len(unrouted), id)
			}
			var d struct {
				Persona, Plugin, Failure, Error string
			}
			if err := json.Unmarshal(unrouted[0].Data, &d); err != nil {
				t.Fatal(err)
			}
			if d.Persona != "dba" || d.Plugin != "sop" || d.Failure != "not_started" {
				t.Errorf("review.unrouted names persona %q, plugin %q, failure %q; want dba, sop, not_started", d.Persona, d.Plugin, d.Failure)
			}
			for _, s := range tc.audited {
				if !strings.Contains(d.Error, s) {
					t.Errorf("review.unrouted error %q does not hold %q", d.Error, s)
				}
			}
			for _, s := range tc.logged {
				g.waitLogged(t, s)
			}
		})
	}
}

// The verdict, its grant and the review's audit record name a reviewer by
// the name gated's configuration gives its plugin, never by the name the
// plugin's Describe reports, and keep one short line of the version and
// model it reports: the plugin here reports each over several lines, with
// a decision line, in more than 20 KiB, which would also have pushed the
// grant past what an executor verifies.
func TestSelfReportedIdentityStaysOffTheVerdict(t *testing.T) {
	g := startGate(t, "hostile-identity", gateOptions{})
	const id = "identity-1"
	v := g.propose(t, bustest.Proposal(id, "destructive", "db_drop_table", ""))
	if v.Outcome != gated.OutcomeApproved || v.Stage != gated.StageReview || len(v.Reviews) != 1 {
		t.Fatalf("verdict %s at %s with %d reviews: %.300q; want approved at review by one reviewer", v.Outcome, v.Stage, len(v.Reviews), v.Reason)
	}
	if !strings.HasPrefix(v.Reason, "reviewer sop (persona dba) approved") || strings.ContainsAny(v.Reason, "\r\n") {
		t.Errorf("reason %.300q does not name reviewer sop (persona dba) on one line", v.Reason)
	}
	want := grant.Reviewer{Plugin: "sop", PluginVersion: "6.6.6", Persona: "dba", Model: "gpt-4o"}
	if r := v.Reviews[0]; r.Plugin != want.Plugin || r.PluginVersion != want.PluginVersion || r.Model != want.Model {
		t.Errorf("reviews[0] names plugin %.80q, version %.80q, model %.80q; want %+v", r.Plugin, r.PluginVersion, r.Model, want)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{"evil", strings.Repeat("x", 64)} {
		if strings.Contains(string(raw), leak) {
			t.Errorf("the verdict holds %q of what the plugin says of itself (%d bytes)", leak, len(raw))
		}
	}

	now := time.Now()
	c, err := grant.VerifyToken(v.Grant, g.ring.Public(now), now)
	if err != nil {
		t.Fatalf("the approval's grant does not verify: %v", err)
	}
	if !slices.Equal(c.Reviewers, []grant.Reviewer{want}) {
		t.Errorf("the grant names reviewers %.300v, want %+v", c.Reviewers, want)
	}

	for _, ev := range bustest.AuditRecords(t, g.res.Audit, "acme", id) {
		if ev.Event != gated.EventReviewDone {
			continue
		}
		var d struct {
			Plugin        string `json:"plugin"`
			PluginVersion string `json:"plugin_version"`
			Model         string `json:"model"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.Plugin != want.Plugin || d.PluginVersion != want.PluginVersion || d.Model != want.Model {
			t.Errorf("review.finished names plugin %.80q, version %.80q, model %.80q; want %+v", d.Plugin, d.PluginVersion, d.Model, want)
		}
	}
}
