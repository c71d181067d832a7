package test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
)

// denyAction is a user policy module that refuses one action.
func denyAction(action string) string {
	return fmt.Sprintf(`package gated

deny contains {"rule": "no_%[1]s", "message": "%[1]s is refused here"} if input.proposal.action == "%[1]s"
`, action)
}

func writeProposalFile(t *testing.T, dir, id, action string) string {
	t.Helper()
	path := filepath.Join(dir, id+".json")
	body := fmt.Sprintf(`{"v":1,"id":%q,"tenant":"acme","action":%q,"class":"write",
"target":{"service":%q},"reason":"test","blast_radius":"single_device","requested_by":{"agent":"ops-agent"}}`, id, action, id)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// verdictOf proposes a file and returns the verdict.
func verdictOf(t *testing.T, g *serveProc, path string) gated.Verdict {
	t.Helper()
	_, out, stderr := propose(t, g.natsURL, "-f", path)
	var v gated.Verdict
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("propose %s: %v\n%s%s", path, err, out, stderr)
	}
	return v
}

func deniedBy(v gated.Verdict, rule string) bool {
	if v.Outcome != gated.OutcomeRejected || v.Policy == nil {
		return false
	}
	for _, d := range v.Policy.Denies {
		if d.Rule == rule {
			return true
		}
	}
	return false
}

type readyDoc struct {
	Ready  bool   `json:"ready"`
	Reason string `json:"reason"`
	Policy struct {
		Revision  string `json:"revision"`
		Stale     bool   `json:"stale"`
		Evaluator struct {
			Evaluator string `json:"evaluator"`
		} `json:"evaluator"`
		LastReload *struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		} `json:"last_reload"`
	} `json:"policy"`
	Plugins []struct {
		Name    string `json:"name"`
		PID     int    `json:"pid"`
		Running bool   `json:"running"`
	} `json:"plugins"`
}

func readyz(t *testing.T, g *serveProc) (int, readyDoc) {
	t.Helper()
	resp, err := http.Get(g.httpURL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc readyDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, doc
}

func metricsText(t *testing.T, g *serveProc) string {
	t.Helper()
	_, body := httpGet(t, g, "/metrics")
	return body
}

// httpGet asks gated's --http listener for path and returns the status
// and the body.
func httpGet(t *testing.T, g *serveProc, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(g.httpURL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// waitFor polls cond until it holds or 30s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPolicyHotReload runs gated on a user policy directory and edits it
// underneath: a good change is in force for the next proposal, a broken
// one is refused (logged, audited, visible in /readyz and /metrics) while
// the last good policy keeps deciding, and a fix clears the alarm.
func TestPolicyHotReload(t *testing.T) {
	dir := t.TempDir()
	rule := filepath.Join(dir, "local.rego")
	if err := os.WriteFile(rule, []byte(denyAction("boom")), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGated(t, "--policies", dir, "--policy-poll", "0")
	props := t.TempDir()

	v := verdictOf(t, g, writeProposalFile(t, props, "boom-1", "boom"))
	if !deniedBy(v, "no_boom") {
		t.Fatalf("boom-1: %s %s, want no_boom", v.Outcome, v.Reason)
	}
	first := v.Policy.Revision
	if _, doc := readyz(t, g); doc.Policy.Revision != first || doc.Policy.Evaluator.Evaluator != "planned" {
		t.Fatalf("readyz revision %s (evaluator %q), verdict revision %s", doc.Policy.Revision, doc.Policy.Evaluator.Evaluator, first)
	}

	// A good change: bang is refused from now on, boom no longer.
	if err := os.WriteFile(rule, []byte(denyAction("bang")), 0o644); err != nil {
		t.Fatal(err)
	}
	var second string
	waitFor(t, "the new policy", func() bool {
		_, doc := readyz(t, g)
		second = doc.Policy.Revision
		return second != first
	})
	v = verdictOf(t, g, writeProposalFile(t, props, "bang-1", "bang"))
	if !deniedBy(v, "no_bang") || v.Policy.Revision != second {
		t.Fatalf("bang-1: %s %s (revision %s), want no_bang under %s", v.Outcome, v.Reason, v.Policy.Revision, second)
	}

	// A broken change is refused; the last good policy stays in force.
	if err := os.WriteFile(rule, []byte("package gated\n\ndeny contains x if {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var doc readyDoc
	waitFor(t, "the refused reload in /readyz", func() bool {
		var code int
		code, doc = readyz(t, g)
		return code == http.StatusServiceUnavailable && doc.Policy.Stale
	})
	if doc.Policy.Revision != second || doc.Policy.LastReload == nil || !strings.Contains(doc.Policy.LastReload.Error, "local.rego:") {
		t.Fatalf("readyz after a broken change: %+v", doc)
	}
	if m := metricsText(t, g); !strings.Contains(m, "gated_policy_stale 1") || !strings.Contains(m, `gated_policy_reloads_total{result="failed"} 1`) {
		t.Fatalf("metrics do not show the refused reload:\n%s", grepLines(m, "gated_policy"))
	}
	v = verdictOf(t, g, writeProposalFile(t, props, "bang-2", "bang"))
	if !deniedBy(v, "no_bang") || v.Policy.Revision != second {
		t.Fatalf("bang-2 under a broken policy file: %s %s, want the last good policy's no_bang", v.Outcome, v.Reason)
	}
	waitLog(t, g.logs, "policy reload refused")

	// The fix clears the alarm.
	if err := os.WriteFile(rule, []byte(denyAction("zap")), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "readiness after the fix", func() bool {
		code, doc := readyz(t, g)
		return code == http.StatusOK && !doc.Policy.Stale
	})
	v = verdictOf(t, g, writeProposalFile(t, props, "zap-1", "zap"))
	if !deniedBy(v, "no_zap") {
		t.Fatalf("zap-1: %s %s, want no_zap", v.Outcome, v.Reason)
	}
	m := metricsText(t, g)
	for _, want := range []string{"gated_policy_stale 0", `gated_policy_reloads_total{result="ok"} 2`, `evaluator="planned"`, "gated_policy_eval_seconds_count", `gated_verdicts_total{outcome="rejected",stage="policy"} 4`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q:\n%s", want, grepLines(m, "gated_"))
		}
	}

	// Every reload attempt is audited under gated's own tenant token.
	var events []string
	for _, rec := range auditRecords(t, g.natsURL, gated.UnknownTenant, "") {
		if strings.HasPrefix(rec.ev.Event, "policy.") {
			events = append(events, rec.ev.Event)
		}
	}
	if got := strings.Join(events, ","); got != "policy.reloaded,policy.reload_failed,policy.reloaded" {
		t.Fatalf("audited reloads %s", got)
	}
}

// TestServeRefusesABrokenPolicy checks that gated does not start on a
// policy it cannot trust, and says where the problem is.
func TestServeRefusesABrokenPolicy(t *testing.T) {
	for _, tc := range []struct{ note, file, body, want string }{
		{"syntax error", "bad.rego", "package gated\n\ndeny contains x if {\n", "bad.rego:"},
		{"invalid YAML data", "data.yaml", "gated:\n  config: [\n", "data.yaml:"},
		{"data that fails the checks", "data.yaml", "gated:\n  config:\n    change_freezes:\n      - name: x\n        start: soon\n        end: later\n", "change_freezes[0].start"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			code, out := gatedExit(t, "serve", "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:0", "--policies", dir)
			if code != 1 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, output %q; want exit 1 naming %q", code, out, tc.want)
			}
		})
	}
	code, out := gatedExit(t, "serve", "--data-dir", t.TempDir(), "--policies-replace")
	if code != 2 || !strings.Contains(out, "--policies-replace needs --policies") {
		t.Fatalf("--policies-replace alone: exit %d, %q", code, out)
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, substr) && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// gatedExit runs the gated binary to completion and returns its exit code
// and its output, stdout then stderr.
func gatedExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	code, stdout, stderr := run(t, exec.Command(gatedBin, args...))
	return code, stdout + stderr
}
