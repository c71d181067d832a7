package test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// runPolicyCLI runs `gated policy ARGS...` with the binary TestMain built
// and returns its exit code, stdout and stderr.
func runPolicyCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(gatedBin, append([]string{"policy"}, args...)...)
	// Flags may also come from GATED_* variables: keep the caller's out.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GATED_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	return run(t, cmd)
}

// policyDir writes files (name to content) into a new directory and
// returns it.
func policyDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// wantRun checks the exit code and that every pattern matches stdout and
// stderr together.
func wantRun(t *testing.T, code int, stdout, stderr string, wantCode int, patterns ...string) {
	t.Helper()
	if code != wantCode {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, wantCode, stdout, stderr)
	}
	all := stdout + "\n" + stderr
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(all) {
			t.Errorf("output does not match %q\nstdout:\n%s\nstderr:\n%s", p, stdout, stderr)
		}
	}
}

const (
	exampleProposals = "../examples/proposals"
	// failingTest is a test of the default bundle that cannot pass: a
	// proposal for "boom" is not denied.
	failingTest = `package mine_test

import data.gated

test_boom_is_denied if {
	count(gated.deny) > 0 with input as {"proposal": {"action": "boom"}}
}

test_mine_passes if true
`
	// unusedVariable compiles, except in strict mode.
	unusedVariable = `package gated

deny contains {"rule": "x", "message": "y"} if {
	x := 1
	input.proposal.action == "boom"
}
`
)

func TestPolicyTestDefaultBundle(t *testing.T) {
	code, out, errOut := runPolicyCLI(t, "test")
	wantRun(t, code, out, errOut, 0,
		`(?m)^PASS: (\d+)/(\d+) tests, coverage \d+\.\d%$`,
		`(?m)^  default/gated\.rego +\d+\.\d%`,
		`(?m)^  default/hard_rules\.rego +\d+\.\d%`,
		`(?m)^parity: PASS: the planned evaluator decides the \d+ inputs of these tests as topdown does$`)
	m := regexp.MustCompile(`PASS: (\d+)/(\d+) tests`).FindStringSubmatch(out)
	if m == nil || m[1] != m[2] || m[1] == "0" {
		t.Errorf("summary %v: want every one of a non-zero number of tests to pass", m)
	}
	if regexp.MustCompile(`(?m)^  \S+_test\.rego +\d`).MatchString(out) {
		t.Errorf("coverage lists a test file:\n%s", out)
	}
	if regexp.MustCompile(`(?m)^PASS  `).MatchString(out) {
		t.Errorf("without -v, passing tests are listed:\n%s", out)
	}

	code, out, errOut = runPolicyCLI(t, "test", "-v", "--run", "parallel_operation")
	wantRun(t, code, out, errOut, 0,
		`(?m)^PASS +data\.gated_test\.test_\w*parallel_operation\w* +\(.+\) +default/operations_test\.rego:\d+$`)
	if regexp.MustCompile(`(?m)^PASS +.*change_freeze`).MatchString(out) {
		t.Errorf("--run parallel_operation ran other tests:\n%s", out)
	}
}

func TestPolicyTestJSON(t *testing.T) {
	code, out, errOut := runPolicyCLI(t, "test", "--format", "json")
	wantRun(t, code, out, errOut, 0)
	var doc struct {
		Tests []struct {
			Package, Name, Location, Result string
			DurationNS                      int64 `json:"duration_ns"`
		}
		Summary struct {
			Total, Passed, Failed, Errored int
			Coverage                       float64
		}
		Coverage []struct {
			File     string
			Coverage float64
		}
		Parity struct {
			Evaluator     struct{ Evaluator string }
			Compared      int
			Disagreements []any
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	if p := doc.Parity; p.Evaluator.Evaluator != "planned" || p.Compared < 100 || p.Disagreements == nil || len(p.Disagreements) != 0 {
		t.Errorf("parity %+v: want the planned evaluator compared on the tests' inputs, no disagreement", p)
	}
	if len(doc.Tests) == 0 || doc.Summary.Total != len(doc.Tests) || doc.Summary.Passed != doc.Summary.Total || doc.Summary.Failed != 0 {
		t.Fatalf("summary %+v for %d tests", doc.Summary, len(doc.Tests))
	}
	for _, tc := range doc.Tests {
		if tc.Result != "pass" || tc.Package == "" || !strings.HasPrefix(tc.Name, "test_") || !strings.Contains(tc.Location, "_test.rego:") {
			t.Errorf("test %+v", tc)
		}
	}
	files := map[string]bool{}
	for _, c := range doc.Coverage {
		files[c.File] = true
	}
	if !files["default/gated.rego"] || files["default/gated_test.rego"] || doc.Summary.Coverage <= 50 {
		t.Errorf("coverage %+v, overall %.1f: want default/gated.rego, no test files, a plausible total", doc.Coverage, doc.Summary.Coverage)
	}
}

func TestPolicyTestFailingTest(t *testing.T) {
	dir := policyDir(t, map[string]string{"mine_test.rego": failingTest})
	code, out, errOut := runPolicyCLI(t, "test", dir)
	wantRun(t, code, out, errOut, 1,
		`(?m)^FAIL +data\.mine_test\.test_boom_is_denied +\(.+\) +.*mine_test\.rego:5$`,
		`(?m)^FAIL: \d+/\d+ tests, 1 failed, coverage`,
		`1 of \d+ tests did not pass`)
	if strings.Contains(out, "test_mine_passes") {
		t.Errorf("without -v a passing test is listed:\n%s", out)
	}

	// The same directory alone, without the default bundle: its two tests.
	code, out, errOut = runPolicyCLI(t, "test", "-v", "--policies-replace", dir)
	wantRun(t, code, out, errOut, 1,
		`(?m)^PASS +data\.mine_test\.test_mine_passes`,
		`(?m)^FAIL: 1/2 tests, 1 failed`)
	if strings.Contains(out, "default/") {
		t.Errorf("--policies-replace still ran the default bundle:\n%s", out)
	}
}

func TestPolicyTestNoTests(t *testing.T) {
	code, out, errOut := runPolicyCLI(t, "test", "--run", "^no_such_test$")
	wantRun(t, code, out, errOut, 0, `no tests match --run`)

	dir := policyDir(t, map[string]string{"gated.rego": "package gated\n\ndecision := {\"deny\": [], \"review\": {\"required\": false}}\n"})
	code, out, errOut = runPolicyCLI(t, "test", "--policies-replace", dir)
	wantRun(t, code, out, errOut, 0, `no tests found`)
}

func TestPolicyCheck(t *testing.T) {
	code, out, errOut := runPolicyCLI(t, "check")
	wantRun(t, code, out, errOut, 0,
		`(?m)^checked default/gated\.rego$`,
		`(?m)^ok: revision sha256:[0-9a-f]{24}\b`,
		`(?m)^evaluator: planned$`)
}

// TestPolicyCheckWarnsAboutWidePatterns: an SOP or skip pattern with **
// spans any number of words of an action; check says so and still
// passes. The default bundle has no such pattern.
func TestPolicyCheckWarnsAboutWidePatterns(t *testing.T) {
	code, out, errOut := runPolicyCLI(t, "check")
	wantRun(t, code, out, errOut, 0)
	if strings.Contains(errOut, "warning:") {
		t.Errorf("the default bundle has warnings:\n%s", errOut)
	}
	data := filepath.Join(t.TempDir(), "wide.yaml")
	if err := os.WriteFile(data, []byte(`gated:
  config:
    skip_review_actions: ["k8s_get_**"]
  sops:
    - id: SOP-WIDE
      actions: ["rotate_**"]
      rollback: re-enable the old credential
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runPolicyCLI(t, "check", "--policy-data", data)
	wantRun(t, code, out, errOut, 0,
		`(?m)^warning: data\.gated\.sops\[\d+\] \(SOP-WIDE\): action pattern "rotate_\*\*" has \*\*, which spans any number of words`,
		`(?m)^warning: data\.gated\.config\.skip_review_actions: "k8s_get_\*\*" has \*\*`,
		`(?m)^ok: revision`)
}

// TestPolicyCheckRefusesBadActionPatterns: an action pattern that does
// not compile fails check, naming the pattern and where it is, even where
// no sample proposal would meet it.
func TestPolicyCheckRefusesBadActionPatterns(t *testing.T) {
	data := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(data, []byte(`gated:
  config:
    reviewer_overrides:
      - actions: ["host_restart_[service"]
        personas: [oncall]
    skip_review_actions: [""]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runPolicyCLI(t, "check", "--policy-data", data)
	wantRun(t, code, out, errOut, 1,
		`data\.gated\.config\.reviewer_overrides\[0\]\.actions\[0\]: "host_restart_\[service" is not a valid action pattern: it does not compile`,
		`data\.gated\.config\.skip_review_actions\[0\]: "" is not a valid action pattern: an empty pattern matches no action`)
}

func TestPolicyEvaluatorFlag(t *testing.T) {
	code, out, errOut := runPolicyCLI(t, "check", "--policy-evaluator", "topdown")
	wantRun(t, code, out, errOut, 0, `(?m)^evaluator: topdown \(turned off\)$`)

	// A policy that calls http.send is decided by topdown, and check says why.
	dir := policyDir(t, map[string]string{"remote.rego": `package gated

deny contains {"rule": "remote", "message": "m"} if {
	input.proposal.tenant == "nobody"
	http.send({"method": "get", "url": "http://127.0.0.1:9"}).status_code == 200
}
`})
	code, out, errOut = runPolicyCLI(t, "check", dir)
	wantRun(t, code, out, errOut, 0, `(?m)^evaluator: topdown \(.*built-in http\.send\)$`)

	code, out, errOut = runPolicyCLI(t, "eval", "--policy-evaluator", "fast", "-f", filepath.Join(exampleProposals, "approved.json"))
	wantRun(t, code, out, errOut, 2, `--policy-evaluator "fast": want auto or topdown`)
}

func TestPolicyCheckSyntaxError(t *testing.T) {
	dir := policyDir(t, map[string]string{"bad.rego": "package gated\n\ndeny contains {\"rule\": \"x\", \"message\": \"y\"} if {\n\tinput.proposal.action ==\n}\n"})
	code, out, errOut := runPolicyCLI(t, "check", dir)
	wantRun(t, code, out, errOut, 1, `bad\.rego:5: rego_parse_error`, `gated policy test`)
	if strings.Contains(out, "ok: revision") {
		t.Errorf("check reported ok:\n%s", out)
	}
}

func TestPolicyCheckStrictUnusedVariable(t *testing.T) {
	dir := policyDir(t, map[string]string{"unused.rego": unusedVariable})
	code, out, errOut := runPolicyCLI(t, "check", dir)
	wantRun(t, code, out, errOut, 1, `unused\.rego:4: rego_compile_error: assigned var x unused`)

	// Plain compilation, which eval and the gate use, accepts the module.
	code, out, errOut = runPolicyCLI(t, "eval", "--policies", dir, "-f", filepath.Join(exampleProposals, "approved.json"))
	wantRun(t, code, out, errOut, 0, `needs review by reviewer`)
}

func TestPolicyCheckBadDataYAML(t *testing.T) {
	dir := policyDir(t, map[string]string{"extra.yaml": "gated:\n  config:\n    target_cooldown: : 5m\n"})
	data := filepath.Join(dir, "extra.yaml")
	code, out, errOut := runPolicyCLI(t, "check", "--policy-data", data)
	wantRun(t, code, out, errOut, 1, regexp.QuoteMeta(data)+`:3: `)

	// A data file in the policy directory is read the same way.
	code, out, errOut = runPolicyCLI(t, "check", dir)
	wantRun(t, code, out, errOut, 1, `extra\.yaml:3: `)
}

func TestPolicyEvalExamples(t *testing.T) {
	tests := []struct {
		file     string
		exit     int
		patterns []string
	}{
		{file: "rejected-skip-review.json", exit: 3, patterns: []string{
			`(?m)^rejected at policy$`,
			`(?m)^  deny no_skip_review: flags\.skip_review`,
			`(?m)^rules that fired:$`,
			`(?m)^  default/hard_rules\.rego:\d+ +data\.gated\.deny$`,
			`(?m)^policy revision sha256:[0-9a-f]+, evaluated in \d+ µs$`,
		}},
		{file: "approved.json", exit: 0, patterns: []string{
			`(?m)^needs review by reviewer \(quorum 1\)$`,
			`(?m)^review: +write actions need review$`,
			`(?m)^reviewer tools: +.*get_sop_text`,
			`(?m)^sop: +SOP-001\b`,
			`(?m)^  default/gated\.rego:\d+ +data\.gated\.decision$`,
			`(?m)\(default\)$`,
		}},
		{file: "read-pass-through.json", exit: 0, patterns: []string{
			`(?m)^approved at policy$`,
			`(?m)^sop: +none$`,
			`(?m)^  default/gated\.rego:\d+ +data\.gated\.read_pass_through$`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			code, out, errOut := runPolicyCLI(t, "eval", "-f", filepath.Join(exampleProposals, tc.file))
			wantRun(t, code, out, errOut, tc.exit, tc.patterns...)
			if tc.exit == 0 && strings.Contains(out, "deny ") {
				t.Errorf("an approving decision lists denies:\n%s", out)
			}
		})
	}
}

func TestPolicyEvalPersonas(t *testing.T) {
	// The proposal asks for the operator persona, which may write: with
	// examples/personas loaded the policy refuses it as a reviewer.
	file := filepath.Join(exampleProposals, "rejected-reviewer-tools.json")
	code, out, errOut := runPolicyCLI(t, "eval", "-f", file, "--personas", "../examples/personas")
	wantRun(t, code, out, errOut, 3, `(?m)^  deny reviewer_tool_denied: persona "operator"`, `(?m)^persona: +operator$`)

	// Without the persona files, the routed reviewer would review beside
	// an operator persona that is not there, so the gate blocks it, and
	// the dry run says so.
	code, out, errOut = runPolicyCLI(t, "eval", "-f", file)
	wantRun(t, code, out, errOut, 3, `(?m)^blocked at review: the proposal asks persona "operator" to review as well, and it cannot: not loaded$`,
		`(?m)^also reviewing: +operator`, `no persona named "operator" is loaded`)

	// --persona sets the persona the policy sees, whatever the routing.
	approved := filepath.Join(exampleProposals, "approved.json")
	code, out, errOut = runPolicyCLI(t, "eval", "-f", approved, "--personas", "../examples/personas", "--persona", "operator")
	wantRun(t, code, out, errOut, 3, `(?m)^  deny reviewer_tool_denied: persona "operator"`, `(?m)^persona: +operator$`)
}

func TestPolicyEvalFollowsRouting(t *testing.T) {
	// The configured default persona is operator: the first evaluation,
	// with the built-in reviewer, routes there, and the second one, with
	// the operator persona, refuses it as a reviewer.
	dir := policyDir(t, map[string]string{"route.yaml": "gated:\n  config:\n    default_persona: operator\n"})
	approved := filepath.Join(exampleProposals, "approved.json")
	code, out, errOut := runPolicyCLI(t, "eval", "-f", approved, "--personas", "../examples/personas",
		"--policy-data", filepath.Join(dir, "route.yaml"))
	wantRun(t, code, out, errOut, 3,
		`(?m)^  deny reviewer_tool_denied: persona "operator"`,
		`routed the review from persona reviewer to operator`,
		`(?m)^persona: +operator$`)
}

func TestPolicyEvalHistory(t *testing.T) {
	verdict := func(decidedAt string) string {
		return `[{"v": 1, "proposal_id": "other-1", "tenant": "acme", "action": "host_restart_service",
			"kind": "action", "outcome": "approved", "approved": true, "stage": "review", "reason": "ok",
			"decided_at": "` + decidedAt + `", "latency_ms": 12, "audit_seq": 7,
			"target_key": "acme/device_id=7", "agent": "other-agent"}]`
	}
	dir := policyDir(t, map[string]string{
		"recent.json": verdict("2026-03-01T11:58:00Z"),
		"old.json":    verdict("2026-03-01T11:00:00Z"),
		"bogus.json":  `[{"proposal_id": "x", "decided_at": "2026-03-01T11:58:00Z", "approver": "me"}]`,
		"nodate.json": `[{"proposal_id": "x", "outcome": "approved"}]`,
	})
	proposal := filepath.Join(exampleProposals, "approved.json")
	const now = "2026-03-01T12:00:00Z"

	code, out, errOut := runPolicyCLI(t, "eval", "-f", proposal, "--now", now, "--history", filepath.Join(dir, "recent.json"))
	wantRun(t, code, out, errOut, 3, `(?m)^rejected at policy$`,
		`(?m)^  deny parallel_operation: host_restart_service on the same target was approved 120s ago for agent other-agent \(proposal other-1\)`)

	code, out, errOut = runPolicyCLI(t, "eval", "-f", proposal, "--now", now, "--history", filepath.Join(dir, "old.json"))
	wantRun(t, code, out, errOut, 0, `(?m)^needs review by reviewer`)

	code, out, errOut = runPolicyCLI(t, "eval", "-f", proposal, "--history", filepath.Join(dir, "bogus.json"))
	wantRun(t, code, out, errOut, 1, `bogus\.json: verdict \[0\]: unknown field "approver"`)

	code, out, errOut = runPolicyCLI(t, "eval", "-f", proposal, "--history", filepath.Join(dir, "nodate.json"))
	wantRun(t, code, out, errOut, 1, `nodate\.json: verdict \[0\]: decided_at is missing`)
}

func TestPolicyEvalInvalidProposal(t *testing.T) {
	code, out, errOut := runPolicyCLI(t, "eval", "-f", filepath.Join(exampleProposals, "invalid.json"))
	wantRun(t, code, out, errOut, 1, `invalid\.json: field class: "maybe" must be one of`)

	dir := policyDir(t, map[string]string{"unknown.json": `{"v": 1, "id": "x", "tenant": "acme", "action": "host_list_services",
		"class": "read", "target": {}, "reason": "r", "requested_by": {"agent": "a", "sesion": "s"}}`})
	code, out, errOut = runPolicyCLI(t, "eval", "-f", filepath.Join(dir, "unknown.json"))
	wantRun(t, code, out, errOut, 1, `field requested_by\.sesion`)
}

func TestPolicyEvalJSON(t *testing.T) {
	code, out, errOut := runPolicyCLI(t, "eval", "--format", "json", "-f", filepath.Join(exampleProposals, "rejected-skip-review.json"))
	wantRun(t, code, out, errOut, 3)
	var doc struct {
		Outcome  string
		Decision struct {
			Deny   []struct{ Rule, Message string }
			Review struct {
				Required bool
				Persona  string
				Quorum   int
			}
			ReviewerTools []string `json:"reviewer_tools"`
			SOP           *struct{ ID string }
		}
		Fired []struct {
			Rule, Location string
			Default        bool
		}
		Revision string
		EvalUS   *int64 `json:"eval_us"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	d := doc.Decision
	if doc.Outcome != "rejected" || len(d.Deny) != 1 || d.Deny[0].Rule != "no_skip_review" || d.Deny[0].Message == "" {
		t.Errorf("outcome %q, denies %+v", doc.Outcome, d.Deny)
	}
	// A rejected proposal goes to no reviewer, so it gets no tool bag.
	if !d.Review.Required || d.Review.Persona != "reviewer" || d.Review.Quorum != 1 || len(d.ReviewerTools) != 0 || d.SOP == nil || d.SOP.ID != "SOP-001" {
		t.Errorf("decision %+v", d)
	}
	if !strings.HasPrefix(doc.Revision, "sha256:") || doc.EvalUS == nil {
		t.Errorf("revision %q, eval_us %v", doc.Revision, doc.EvalUS)
	}
	denyFired, defaults := false, 0
	for _, f := range doc.Fired {
		denyFired = denyFired || (f.Rule == "data.gated.deny" && strings.HasPrefix(f.Location, "default/hard_rules.rego:"))
		if f.Default {
			defaults++
		}
	}
	if !denyFired || defaults == 0 {
		t.Errorf("fired %+v: want data.gated.deny in default/hard_rules.rego and a default rule", doc.Fired)
	}
}

func TestPolicyUsage(t *testing.T) {
	approved := filepath.Join(exampleProposals, "approved.json")
	dir := policyDir(t, map[string]string{"x_test.rego": "package x_test\n\ntest_x if true\n"})
	tests := []struct {
		note string
		args []string
		say  string
	}{
		{note: "unknown persona", args: []string{"eval", "-f", approved, "--persona", "nobody"}, say: `--persona "nobody": no such persona \(known: .*reviewer`},
		{note: "no file", args: []string{"eval"}, say: `-f is required`},
		{note: "bad now", args: []string{"eval", "-f", approved, "--now", "noon"}, say: `--now "noon": want an RFC 3339 time`},
		{note: "bad format", args: []string{"test", "--format", "xml"}, say: `--format "xml": want text or json`},
		{note: "bad regex", args: []string{"test", "--run", "("}, say: `--run "\("`},
		{note: "replace without dir", args: []string{"check", "--policies-replace"}, say: `--policies-replace needs --policies DIR`},
		{note: "dir twice", args: []string{"test", dir, "--policies", dir}, say: `either as an argument or as --policies`},
		{note: "two dirs", args: []string{"check", dir, dir}, say: `accepts at most 1 arg`},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			code, out, errOut := runPolicyCLI(t, tc.args...)
			wantRun(t, code, out, errOut, 2, tc.say)
		})
	}
}

// copyDir copies the regular files of dir (not its subdirectories) into a
// new directory and returns it.
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, e.Name()), raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestPolicyCommandsOnTheDefaultBundle gives the repository's own policies/
// directory to the policy commands, as someone reading the source would:
// it holds the default bundle that gated embeds, so gated uses it once, in
// place of the embedded copy, and says so. A copy that differs from the
// embedded bundle is loaded on top of it as usual, and the error that
// every rule is defined twice says how to use it alone.
func TestPolicyCommandsOnTheDefaultBundle(t *testing.T) {
	code, out, errOut := runPolicyCLI(t, "test")
	wantRun(t, code, out, errOut, 0)
	embedded := regexp.MustCompile(`PASS: (\d+)/(\d+) tests`).FindStringSubmatch(out)
	if embedded == nil {
		t.Fatalf("no summary:\n%s", out)
	}
	note := `(?m)^note: \S*policies holds the default bundle gated embeds \(same files, same content\): using it in place of the embedded copy, as --policies-replace does$`
	tests := []struct {
		note     string
		args     []string
		exit     int
		patterns []string
	}{
		{note: "test", args: []string{"test", "../policies"}, exit: 0,
			patterns: []string{note, `(?m)^PASS: ` + embedded[1] + `/` + embedded[2] + ` tests`, `(?m)^  \.\./policies/gated\.rego +\d+\.\d%`}},
		{note: "check", args: []string{"check", "../policies"}, exit: 0, patterns: []string{note}},
		{note: "eval", args: []string{"eval", "--policies", "../policies", "-f", filepath.Join(exampleProposals, "approved.json")}, exit: 0,
			patterns: []string{note, `(?m)^needs review by reviewer \(quorum 1\)$`}},
		{note: "with --policies-replace, no note", args: []string{"check", "--policies-replace", "../policies"}, exit: 0},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			code, out, errOut := runPolicyCLI(t, tc.args...)
			wantRun(t, code, out, errOut, tc.exit, tc.patterns...)
			if len(tc.patterns) == 0 && strings.Contains(out+errOut, "note:") {
				t.Errorf("a note where none is due:\n%s%s", out, errOut)
			}
			if strings.Contains(out+errOut, "multiple default rules") {
				t.Errorf("the default bundle was loaded twice:\n%s%s", out, errOut)
			}
		})
	}

	t.Run("an edited copy", func(t *testing.T) {
		dir := copyDir(t, "../policies")
		raw, err := os.ReadFile(filepath.Join(dir, "operations.rego"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "operations.rego"), append(raw, "\n# edited\n"...), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runPolicyCLI(t, "check", dir)
		wantRun(t, code, out, errOut, 1, `multiple default rules`,
			`(?m)^note: \S+ has modules named like the default bundle's \(.*gated\.rego, .*operations\.rego.*\) but is not the bundle gated embeds: loaded on top of it, a copy of the bundle defines its rules twice; pass --policies-replace to use \S+ instead$`)
		code, out, errOut = runPolicyCLI(t, "test", "--policies-replace", dir)
		wantRun(t, code, out, errOut, 0, `(?m)^PASS: `+embedded[1]+`/`+embedded[2]+` tests`)
	})
}
