package test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/gated/gated"
)

// buildExamplePlugin builds examples/plugin-go into a fresh plugin
// directory and returns the directory.
func buildExamplePlugin(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "plugins.d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "incident"), "../examples/plugin-go")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the example plugin: %v\n%s", err, out)
	}
	return dir
}

func gatedCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return run(t, exec.Command(gatedBin, args...))
}

// incidentProposal writes a proposal routed to the incident persona.
// Its target is the device named by the id's first two dash-separated
// parts, so "inc-2" and "inc-2-again" are on the same device.
func incidentProposal(t *testing.T, dir, id, incident, blast string) string {
	t.Helper()
	parts := strings.SplitN(id, "-", 3)
	device := strings.Join(parts[:min(2, len(parts))], "-")
	body := fmt.Sprintf(`{"v":1,"id":%q,"tenant":"acme","action":"host_restart_service","class":"write",
"target":{"device_id":%q,"service":"nginx"},"reason":"health checks fail","blast_radius":%q,
"requested_by":{"agent":"ops-agent"},"incident_id":%q,"reviewer":"incident"}`, id, device, blast, incident)
	path := filepath.Join(dir, id+".json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func proposeVerdict(t *testing.T, g *serveProc, path string) (int, gated.Verdict) {
	t.Helper()
	code, out, stderr := propose(t, g.natsURL, "-f", path)
	var v gated.Verdict
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s: exit %d, no verdict: %v\n%s%s", filepath.Base(path), code, err, out, stderr)
	}
	return code, v
}

// TestThirdPartyPlugin takes the example plugin through what an operator
// does: the conformance run, pinning, serving reviews with brokered tool
// calls, a quorum with the bundled reviewer, relaunch after a kill, and
// refusal once the binary is modified.
func TestThirdPartyPlugin(t *testing.T) {
	dir := buildExamplePlugin(t)
	bin := filepath.Join(dir, "incident")

	code, stdout, stderr := gatedCLI(t, "plugins", "test", bin)
	if code != 0 || strings.Count(stdout, "PASS  ") != 9 {
		t.Fatalf("conformance: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr = gatedCLI(t, "plugins", "verify", dir); code != 1 || !strings.Contains(stdout+stderr, "gated plugins lock") {
		t.Fatalf("verify before lock: exit %d, want 1 and advice to lock\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr = gatedCLI(t, "plugins", "lock", dir); code != 0 {
		t.Fatalf("lock: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr = gatedCLI(t, "plugins", "verify", dir); code != 0 {
		t.Fatalf("verify: exit %d\n%s%s", code, stdout, stderr)
	}

	g := startGated(t, "--plugins-dir", dir)
	props := t.TempDir()
	// The incident persona the proposal names reviews beside the routed
	// reviewer, not instead of it.
	code, v := proposeVerdict(t, g, incidentProposal(t, props, "inc-1", "INC-7", "single_device"))
	if code != 0 || v.Outcome != gated.OutcomeApproved || len(v.Reviews) != 2 || v.Reviews[0].Persona != "reviewer" || v.Reviews[1].Plugin != "incident" {
		t.Fatalf("incident change: exit %d, %s: %s, reviews %+v", code, v.Outcome, v.Reason, v.Reviews)
	}
	var tools []string
	for _, rec := range auditRecords(t, g.natsURL, "acme", "inc-1") {
		if rec.ev.Event == gated.EventToolCalled {
			var d struct{ Tool, Plugin string }
			_ = json.Unmarshal(rec.ev.Data, &d)
			tools = append(tools, d.Plugin+"/"+d.Tool)
		}
	}
	slices.Sort(tools)
	if strings.Join(tools, ",") != "incident/get_sop_text,sop/get_sop_text" {
		t.Errorf("tool calls audited: %v, want one get_sop_text by each reviewer", tools)
	}

	_, v = proposeVerdict(t, g, incidentProposal(t, props, "inc-2", "", "single_device"))
	if v.Outcome != gated.OutcomeRejected || len(v.Reviews) != 2 || !slicesContain(v.Reviews[1].MissingGates, "incident_linked") && v.Reviews[1].Decision != gated.DecisionReject {
		t.Fatalf("change without incident: %s: %s", v.Outcome, v.Reason)
	}

	// A tenant-wide change needs two reviewers: the bundled reviewer and
	// the incident persona both approve.
	_, v = proposeVerdict(t, g, incidentProposal(t, props, "inc-3", "INC-7", "tenant_wide"))
	if v.Outcome != gated.OutcomeApproved || len(v.Reviews) != 2 {
		t.Fatalf("tenant-wide change: %s: %s, %d reviews", v.Outcome, v.Reason, len(v.Reviews))
	}
	personas := v.Reviews[0].Persona + "," + v.Reviews[1].Persona
	if personas != "reviewer,incident" {
		t.Errorf("quorum reviewers %s, want reviewer,incident", personas)
	}

	// The same rejected proposal again, under a new id, is answered from
	// the first rejection.
	_, v = proposeVerdict(t, g, incidentProposal(t, props, "inc-2-again", "", "single_device"))
	if v.Outcome != gated.OutcomeRejected || v.Stage != gated.StageDedupe || v.DuplicateOf != "inc-2" {
		t.Fatalf("repeat of a rejection: %s at %s (duplicate of %q): %s", v.Outcome, v.Stage, v.DuplicateOf, v.Reason)
	}

	// Kill the plugin: gated relaunches it and reviews go on.
	var pid int
	_, doc := readyz(t, g)
	for _, p := range doc.Plugins {
		if p.Name == "incident" {
			pid = p.PID
		}
	}
	if pid == 0 {
		t.Fatalf("readyz lists no incident plugin: %+v", doc.Plugins)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, []int{pid})
	waitFor(t, "the incident plugin to be relaunched", func() bool {
		_, doc := readyz(t, g)
		for _, p := range doc.Plugins {
			if p.Name == "incident" && p.Running && p.PID != pid {
				return true
			}
		}
		return false
	})
	if _, v = proposeVerdict(t, g, incidentProposal(t, props, "inc-4", "INC-7", "single_device")); v.Outcome != gated.OutcomeApproved {
		t.Fatalf("after relaunch: %s: %s", v.Outcome, v.Reason)
	}

	// A modified binary fails verification and is refused at start.
	// It is swapped on disk, as an attacker would: the running copy is busy.
	orig, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	swapped := bin + ".new"
	if err := os.WriteFile(swapped, append(orig, "tampered"...), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(swapped, bin); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr = gatedCLI(t, "plugins", "verify", dir); code != 1 || !strings.Contains(stdout, "modified") {
		t.Fatalf("verify after tampering: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = gatedCLI(t, "serve", "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:0", "--plugins-dir", dir)
	if code == 0 || !strings.Contains(stderr, "sha256") || !strings.Contains(stderr, "incident") {
		t.Fatalf("serve with a tampered plugin: exit %d, want a refusal naming the plugin and its checksum\n%s%s", code, stdout, stderr)
	}
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
