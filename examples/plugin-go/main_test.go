package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/plugins"
)

// The test binary is also the plugin: with GATED_EXAMPLE_PLUGIN set it
// serves instead of testing, so the tests below run it as gated would, in
// its own process over gRPC.
func TestMain(m *testing.M) {
	if os.Getenv("GATED_EXAMPLE_PLUGIN") != "" {
		main()
		return
	}
	os.Exit(m.Run())
}

func TestIncidentReviewerThroughTheHost(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sum, err := plugins.FileSHA256(exe)
	if err != nil {
		t.Fatal(err)
	}
	spec := plugins.Spec{Name: "incident", Path: exe, SHA256: sum, Env: []string{"GATED_EXAMPLE_PLUGIN=1"}}
	host, err := plugins.NewHost(zaptest.NewLogger(t), spec.Name, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if err := host.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	persona := &engine.Persona{Name: "incident", Plugin: "incident", PermissionMode: "read-only",
		RequiredGates: []string{"incident_linked", "rollback_known"}}
	reviewer, err := host.Route(persona)
	if err != nil {
		t.Fatal(err)
	}
	sop := &gated.SOP{ID: "SOP-001", Title: "Restart a service", Rollback: "start the previous unit"}
	tests := []struct {
		note     string
		incident string
		tools    []string
		approved bool
	}{
		{note: "incident and SOP", incident: "INC-7", tools: []string{"get_sop_text"}, approved: true},
		{note: "no incident", tools: []string{"get_sop_text"}},
		{note: "SOP tool not in the bag", incident: "INC-7"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			p := &gated.Proposal{V: 1, ID: "p1", Tenant: "acme", Kind: gated.KindAction, Action: "host_restart_service",
				Class: gated.ClassWrite, BlastRadius: gated.BlastSingleDevice, IncidentID: tc.incident}
			raw, _ := json.Marshal(p)
			res, err := reviewer.Review(t.Context(), engine.ReviewRequest{
				ReviewID: "rv-" + tc.note, Proposal: p, ProposalJSON: raw, Persona: persona,
				Tools: tc.tools, SOP: sop, Deadline: time.Now().Add(time.Minute),
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok, why := engine.Judge(res, persona); ok != tc.approved {
				t.Fatalf("approved = %v (%s), want %v\n%s", ok, why, tc.approved, res.Text)
			}
		})
	}
}

// TestRunByHand runs the plugin as a person would, without gated: -h and
// --help say what it is and how gated runs it, and exit 0; anything else
// is refused with go-plugin's explanation and exit 1.
func TestRunByHand(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		note string
		args []string
		exit int
		say  []string
	}{
		{note: "-h", args: []string{"-h"}, exit: 0, say: []string{"incident-reviewer 0.1.0", "gated plugins lock"}},
		{note: "--help", args: []string{"--help"}, exit: 0, say: []string{"incident-reviewer 0.1.0", "--plugins-dir"}},
		{note: "no arguments", exit: 1, say: []string{"not meant to be executed directly"}},
		{note: "help after another argument", args: []string{"serve", "--help"}, exit: 1, say: []string{"not meant to be executed directly"}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			cmd := exec.Command(exe, tc.args...)
			cmd.Env = append(os.Environ(), "GATED_EXAMPLE_PLUGIN=1")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			out := stdout.String()
			if tc.exit != 0 {
				out += stderr.String()
			}
			if code != tc.exit {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.exit, stdout.String(), stderr.String())
			}
			for _, say := range tc.say {
				if !strings.Contains(out, say) {
					t.Errorf("output lacks %q\nstdout: %s\nstderr: %s", say, stdout.String(), stderr.String())
				}
			}
		})
	}
}
