package test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
)

// writeFile writes body to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSOPCoverageDoesNotStretch: SOP-003 covers rotate_*_credentials, one
// word between rotate and credentials. An action that only starts and ends
// like it is not covered, so the bundled reviewer rejects it, however
// much it would do; words joined by dashes are words too.
func TestSOPCoverageDoesNotStretch(t *testing.T) {
	g := startGated(t)
	client := fleetClient(t, g.natsURL)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		note, action string
		approved     bool
	}{
		{note: "one word", action: "rotate_db_credentials", approved: true},
		{note: "a sentence", action: "rotate_db_credentials_then_drop_all_credentials"},
		{note: "a sentence in dashes", action: "rotate_db-then-drop-all_credentials"},
		{note: "a dashed sentence", action: "rotate_db-credentials-then-drop-all_credentials"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			p := &gated.Proposal{V: 1, ID: "stretch-" + strings.ReplaceAll(tc.note, " ", "-"), Tenant: "acme",
				Action: tc.action, Class: gated.ClassDestructive, BlastRadius: gated.BlastCluster,
				Target: map[string]any{"cluster": "orders-" + tc.note}, Reason: "rotation is due",
				RequestedBy: &gated.RequestedBy{Agent: "ops-agent"}}
			v, err := client.Propose(ctx, p)
			if v == nil {
				t.Fatalf("no verdict: %v", err)
			}
			if v.Approved != tc.approved {
				t.Fatalf("%s: %s at %s: %s (sop %v), want approved %v", tc.action, v.Outcome, v.Stage, v.Reason, reviewSOPs(v), tc.approved)
			}
			if !tc.approved && (v.Outcome != gated.OutcomeRejected || len(v.Reviews) != 1 || v.Reviews[0].SOPID != "") {
				t.Fatalf("%s: %s: %s, reviews %+v; want a rejection naming no SOP", tc.action, v.Outcome, v.Reason, v.Reviews)
			}
		})
	}
}

func reviewSOPs(v *gated.Verdict) []string {
	var ids []string
	for _, r := range v.Reviews {
		ids = append(ids, r.SOPID)
	}
	return ids
}

// oncallPersona is a persona an agent might prefer: served by the bundled
// reviewer, it requires one gate only.
const oncallPersona = `---
name: oncall
description: A lenient reviewer an agent might pick for itself.
permission_mode: read-only
plugin: sop
tools:
  - get_sop_text
required_gates:
  - rollback_known
---
Approve when a rollback is known.
`

// TestProposalReviewerAddsScrutiny: a proposal that names a reviewer gets
// that reviewer in addition to the persona the policy routes to, never
// instead of it, unless the policy data allows that override for the
// action.
func TestProposalReviewerAddsScrutiny(t *testing.T) {
	personas := t.TempDir()
	writeFile(t, personas, "oncall.md", oncallPersona)
	proposal := func(id string) *gated.Proposal {
		return &gated.Proposal{V: 1, ID: id, Tenant: "acme", Action: "host_restart_service", Class: gated.ClassWrite,
			BlastRadius: gated.BlastSingleDevice, Target: map[string]any{"device_id": id, "service": "nginx"},
			Reason: "wedged", RequestedBy: &gated.RequestedBy{Agent: "ops-agent"}, Reviewer: "oncall"}
	}
	names := func(v *gated.Verdict) string {
		var out []string
		for _, r := range v.Reviews {
			out = append(out, r.Persona)
		}
		return strings.Join(out, ",")
	}

	t.Run("added", func(t *testing.T) {
		g := startGated(t, "--personas", personas)
		client := fleetClient(t, g.natsURL)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		v, err := client.Propose(ctx, proposal("pick-1"))
		if err != nil || names(v) != "reviewer,oncall" {
			t.Fatalf("%v: %s: %s, reviewed by %q, want reviewer,oncall", err, v.Outcome, v.Reason, names(v))
		}
	})
	t.Run("override allowed", func(t *testing.T) {
		data := writeFile(t, t.TempDir(), "overrides.yaml", `gated:
  config:
    reviewer_overrides:
      - actions: [host_restart_service]
        personas: [oncall]
`)
		g := startGated(t, "--personas", personas, "--policy-data", data)
		client := fleetClient(t, g.natsURL)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		v, err := client.Propose(ctx, proposal("pick-2"))
		if err != nil || names(v) != "oncall" {
			t.Fatalf("%v: %s: %s, reviewed by %q, want oncall alone", err, v.Outcome, v.Reason, names(v))
		}
	})
}

// endedRun is round 1 of a run that ended with status, with no criteria.
func endedRun(id, task, status string) *gated.Proposal {
	return &gated.Proposal{
		V: 1, ID: id, Tenant: "acme", Kind: gated.KindRun, Action: "code_change",
		Class: gated.ClassWrite, BlastRadius: gated.BlastSingleDevice,
		RequestedBy: &gated.RequestedBy{Agent: "orchestrator"},
		Run:         &gated.Run{RunID: id, TaskID: task, Status: status, Round: 1, Worker: "coder-1", Summary: "stopped"},
	}
}

// TestRunThatDidNotCompleteIsNotApproved: a failed or canceled run is
// never approved, reviewed or not, unless the policy data accepts that
// status for the run's task; the verdict then names the status.
func TestRunThatDidNotCompleteIsNotApproved(t *testing.T) {
	data := writeFile(t, t.TempDir(), "runs.yaml", `gated:
  config:
    run_review:
      accept_terminal:
        nightly-probe: [failed]
      tenants:
        acme: {policy: always}
        globex: {policy: on_success}
`)
	g := startGated(t, "--policy-data", data)
	client := fleetClient(t, g.natsURL)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		note, tenant, task, status string
		approved                   bool
	}{
		{note: "reviewed completed", tenant: "acme", task: "T-1", status: gated.RunCompleted, approved: true},
		{note: "reviewed failed", tenant: "acme", task: "T-1", status: gated.RunFailed},
		{note: "reviewed canceled", tenant: "acme", task: "T-1", status: gated.RunCanceled},
		{note: "unreviewed failed", tenant: "globex", task: "T-1", status: gated.RunFailed},
		{note: "unreviewed canceled", tenant: "globex", task: "T-1", status: gated.RunCanceled},
		{note: "reviewed canceled of a task whose failure is accepted", tenant: "acme", task: "nightly-probe", status: gated.RunCanceled},
		{note: "reviewed accepted failure", tenant: "acme", task: "nightly-probe", status: gated.RunFailed, approved: true},
		{note: "unreviewed accepted failure", tenant: "globex", task: "nightly-probe", status: gated.RunFailed, approved: true},
	} {
		t.Run(tc.note, func(t *testing.T) {
			p := endedRun("ended-"+strings.ReplaceAll(tc.note, " ", "-"), tc.task, tc.status)
			p.Tenant = tc.tenant
			v, err := client.Propose(ctx, p)
			if v == nil {
				t.Fatalf("no verdict: %v", err)
			}
			if v.Approved != tc.approved {
				t.Fatalf("%s run: %s at %s: %s; want approved %v", tc.status, v.Outcome, v.Stage, v.Reason, tc.approved)
			}
			if !tc.approved && !errors.Is(err, fleet.ErrReviewRejected) {
				t.Fatalf("%s run: %v (%s: %s), want a rejection", tc.status, err, v.Outcome, v.Reason)
			}
			if tc.approved && tc.status != gated.RunCompleted && !strings.Contains(v.Reason, "accepted terminal status "+tc.status) {
				t.Errorf("reason %q does not say which terminal status was accepted", v.Reason)
			}
			if !tc.approved && !strings.Contains(v.Reason, tc.status) {
				t.Errorf("reason %q does not name the run's status %s", v.Reason, tc.status)
			}
		})
	}
}
