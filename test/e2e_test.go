// Package test holds the end-to-end suites: they build the real gated
// binary and run it as a user would, against its embedded NATS server,
// with its reviewer plugin in a separate process.
package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine/wire"
)

var gatedBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gated-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gatedBin = filepath.Join(dir, "gated")
	build := exec.Command("go", "build", "-o", gatedBin, "../cmd/gated")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building gated:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return bustest.FreeAddr(t)
}

// gated is a running `gated serve`.
type serveProc struct {
	cmd     *exec.Cmd
	natsURL string
	httpURL string
	logs    *syncBuffer
	exited  chan error
}

func startGated(t *testing.T, extra ...string) *serveProc {
	t.Helper()
	natsAddr, httpAddr := freeAddr(t), freeAddr(t)
	args := append([]string{"serve", "--data-dir", t.TempDir(), "--nats-listen", natsAddr,
		"--http", httpAddr, "--personas", "../examples/personas", "--log-format", "json"}, extra...)
	cmd := exec.Command(gatedBin, args...)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &serveProc{cmd: cmd, natsURL: "nats://" + natsAddr, httpURL: "http://" + httpAddr, logs: logs, exited: make(chan error, 1)}
	go func() { g.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-g.exited
		if t.Failed() {
			t.Logf("gated logs:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return g
			}
		}
		select {
		case err := <-g.exited:
			g.exited <- err // for the cleanup, which waits for the exit
			t.Fatalf("gated exited before it was ready: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gated not ready after 30s\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// propose runs `gated propose` and returns its exit code and stdout.
func propose(t *testing.T, natsURL string, args ...string) (int, []byte, string) {
	t.Helper()
	cmd := exec.Command(gatedBin, append([]string{"propose", "--nats-url", natsURL, "--wait", "30s"}, args...)...)
	code, stdout, stderr := run(t, cmd)
	return code, []byte(stdout), stderr
}

// run runs cmd to completion, killing it after a minute, and returns its
// exit code, stdout and stderr.
func run(t *testing.T, cmd *exec.Cmd) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatal(err)
	return 0, "", ""
}

type auditRecord struct {
	seq uint64
	ev  gated.AuditEvent
}

// auditStream opens the audit stream on a connection of its own, closed
// when the test ends, and returns it with its state at this moment.
func auditStream(ctx context.Context, t *testing.T, natsURL string) (jetstream.Stream, *jetstream.StreamInfo) {
	t.Helper()
	return openAudit(ctx, t, connectJS(t, natsURL))
}

// openAudit returns the audit stream of js with its state at this moment.
func openAudit(ctx context.Context, t *testing.T, js jetstream.JetStream) (jetstream.Stream, *jetstream.StreamInfo) {
	t.Helper()
	stream, err := js.Stream(ctx, "GATED_AUDIT")
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream, info
}

// tenantAudit returns every audit event filed under tenant in the audit
// stream of js, in stream order.
func tenantAudit(ctx context.Context, t *testing.T, js jetstream.JetStream, tenant string) []auditRecord {
	t.Helper()
	stream, info := openAudit(ctx, t, js)
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{wire.AuditSubjectPrefix + tenant + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(int(info.State.Msgs))
	if err != nil {
		t.Fatal(err)
	}
	var out []auditRecord
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		rec, err := audit.DecodeRecord(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			t.Fatalf("audit message at seq %d is not a record: %v", md.Sequence.Stream, err)
		}
		for _, ev := range rec.Events() {
			out = append(out, auditRecord{seq: md.Sequence.Stream, ev: ev})
		}
	}
	return out
}

// auditRecords returns every audit event of one proposal, in stream order.
func auditRecords(t *testing.T, natsURL, tenant, id string) []auditRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var out []auditRecord
	for _, rec := range tenantAudit(ctx, t, connectJS(t, natsURL), tenant) {
		if rec.ev.ProposalID == id {
			out = append(out, rec)
		}
	}
	return out
}

// TestExampleProposals proposes every file of examples/proposals in file
// order to one fresh gated, as the README's demo does, and checks each
// verdict, its exact policy denies (so one example's approval cannot
// leak into a later one's verdict unnoticed), its audit trail, and that
// the README's demo table lists the files in that order with the outcome
// and stage a fresh run prints.
func TestExampleProposals(t *testing.T) {
	g := startGated(t)
	gatedPID := g.cmd.Process.Pid
	// An approval's grant is issued just before its verdict.
	reviewed := []string{gated.EventReceived, gated.EventPolicyDecided, gated.EventReviewStarted, gated.EventToolCalled, gated.EventReviewDone,
		gated.EventGrantIssued, gated.EventVerdict}
	policyOnly := []string{gated.EventReceived, gated.EventPolicyDecided, gated.EventVerdict}
	policyApproved := []string{gated.EventReceived, gated.EventPolicyDecided, gated.EventGrantIssued, gated.EventVerdict}
	tests := map[string]struct {
		exit    int
		outcome gated.Outcome
		stage   gated.Stage
		denies  []string // every policy deny, in order
		events  []string
	}{
		"approved.json":                      {exit: 0, outcome: gated.OutcomeApproved, stage: gated.StageReview, events: reviewed},
		"initech-restart.json":               {exit: 0, outcome: gated.OutcomeApproved, stage: gated.StageReview, events: reviewed},
		"invalid.json":                       {exit: 3, outcome: gated.OutcomeInvalid, stage: gated.StageValidation, events: []string{gated.EventReceived, gated.EventInvalid, gated.EventVerdict}},
		"read-pass-through.json":             {exit: 0, outcome: gated.OutcomeApproved, stage: gated.StagePolicy, events: policyApproved},
		"rejected-force-approve-no-sop.json": {exit: 3, outcome: gated.OutcomeRejected, stage: gated.StagePolicy, denies: []string{"unsupported_force_approve"}, events: policyOnly},
		"rejected-force-approve.json":        {exit: 3, outcome: gated.OutcomeRejected, stage: gated.StagePolicy, denies: []string{"unsupported_force_approve"}, events: policyOnly},
		"rejected-no-sop.json": {exit: 3, outcome: gated.OutcomeRejected, stage: gated.StageReview,
			events: []string{gated.EventReceived, gated.EventPolicyDecided, gated.EventReviewStarted, gated.EventReviewDone, gated.EventVerdict}},
		"rejected-reviewer-tools.json": {exit: 3, outcome: gated.OutcomeRejected, stage: gated.StagePolicy, denies: []string{"reviewer_tool_denied"}, events: policyOnly},
		"rejected-skip-review.json":    {exit: 3, outcome: gated.OutcomeRejected, stage: gated.StagePolicy, denies: []string{"no_skip_review"}, events: policyOnly},
	}
	examples, err := filepath.Glob("../examples/proposals/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(examples) != len(tests) {
		t.Fatalf("examples/proposals has %d files and this test covers %d: cover every example", len(examples), len(tests))
	}
	table := readmeDemoTable(t)
	var files []string
	for _, path := range examples { // Glob sorts: the order of ls, as a newcomer runs them
		files = append(files, filepath.Base(path))
	}
	var listed []string
	for _, row := range table {
		listed = append(listed, row.file)
	}
	if strings.Join(listed, " ") != strings.Join(files, " ") {
		t.Errorf("the README's demo table lists %v; want every example in file order: %v", listed, files)
	}
	for i, file := range files {
		tc, ok := tests[file]
		if !ok {
			t.Fatalf("examples/proposals/%s is not covered by this test", file)
		}
		t.Run(file, func(t *testing.T) {
			code, out, stderr := propose(t, g.natsURL, "-f", filepath.Join("../examples/proposals", file))
			if code != tc.exit {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.exit, out, stderr)
			}
			var v gated.Verdict
			if err := json.Unmarshal(out, &v); err != nil {
				t.Fatalf("stdout is not a verdict: %v\n%s", err, out)
			}
			if v.Outcome != tc.outcome || v.Stage != tc.stage {
				t.Fatalf("verdict %s at %s (%s), want %s at %s", v.Outcome, v.Stage, v.Reason, tc.outcome, tc.stage)
			}
			if i < len(table) && table[i].file == file && (table[i].outcome != string(v.Outcome) || table[i].stage != string(v.Stage)) {
				t.Errorf("the README's demo table says %s at %s; a fresh run prints %s at %s", table[i].outcome, table[i].stage, v.Outcome, v.Stage)
			}
			if v.Reason == "" {
				t.Error("verdict has no reason")
			}
			var denies []string
			if v.Policy != nil {
				for _, d := range v.Policy.Denies {
					denies = append(denies, d.Rule)
				}
			}
			if strings.Join(denies, ",") != strings.Join(tc.denies, ",") {
				t.Errorf("policy denies %v, want exactly %v (%s)", denies, tc.denies, v.Reason)
			}
			if tc.stage != gated.StageValidation && (v.Policy == nil || !strings.HasPrefix(v.Policy.Revision, "sha256:")) {
				t.Errorf("verdict carries no policy revision: %+v", v.Policy)
			}

			recs := auditRecords(t, g.natsURL, v.Tenant, v.ProposalID)
			var names []string
			for _, r := range recs {
				names = append(names, r.ev.Event)
			}
			if strings.Join(names, ",") != strings.Join(tc.events, ",") {
				t.Fatalf("audit events %v, want %v", names, tc.events)
			}
			if last := recs[len(recs)-1]; last.seq != v.AuditSeq {
				t.Errorf("verdict audit_seq %d, but the verdict event is at %d", v.AuditSeq, last.seq)
			}
			if tc.stage == gated.StageReview {
				assertReviewedOutOfProcess(t, recs, gatedPID)
			}
		})
	}
}

// demoRow is one row of the README's demo table.
type demoRow struct{ file, outcome, stage string }

// readmeDemoTable reads the table of the README's demo: the rows under
// the header "| file | outcome | stage | why |".
func readmeDemoTable(t *testing.T) []demoRow {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []demoRow
	in := false
	for _, line := range strings.Split(string(readme), "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		switch {
		case !in && len(cells) == 4 && cells[0] == "file" && cells[1] == "outcome" && cells[2] == "stage":
			in = true
		case in && strings.HasPrefix(strings.TrimSpace(line), "|---"):
		case in && strings.HasPrefix(strings.TrimSpace(line), "|") && len(cells) == 4:
			rows = append(rows, demoRow{file: cells[0], outcome: cells[1], stage: cells[2]})
		case in:
			if len(rows) == 0 {
				t.Fatal("the README's demo table has no rows")
			}
			return rows
		}
	}
	t.Fatal("the README has no demo table (| file | outcome | stage | why |)")
	return nil
}

func TestProposeUsage(t *testing.T) {
	dir := t.TempDir()
	notJSON := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(notJSON, []byte("restart it"), 0o600); err != nil {
		t.Fatal(err)
	}
	noTenant := filepath.Join(dir, "notenant.json")
	if err := os.WriteFile(noTenant, []byte(`{"id":"x","action":"y"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	unreachable := "nats://" + freeAddr(t)
	tests := []struct {
		note string
		args []string
		exit int
		say  string
	}{
		{note: "no file", args: nil, exit: 2, say: "-f is required"},
		{note: "missing file", args: []string{"-f", filepath.Join(dir, "nope.json")}, exit: 2, say: "no such file"},
		{note: "not JSON", args: []string{"-f", notJSON}, exit: 2, say: "not valid JSON"},
		{note: "no tenant", args: []string{"-f", noTenant}, exit: 2, say: "tenant"},
		{note: "unknown flag", args: []string{"--bogus"}, exit: 2, say: "unknown flag"},
		{note: "no server", args: []string{"-f", "../examples/proposals/approved.json"}, exit: 1, say: "is gated serve running"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			code, _, stderr := propose(t, unreachable, tc.args...)
			if code != tc.exit || !strings.Contains(stderr, tc.say) {
				t.Fatalf("exit %d, stderr %q; want exit %d saying %q", code, stderr, tc.exit, tc.say)
			}
		})
	}
}

func TestServeRefusesShortReviewTimeout(t *testing.T) {
	cmd := exec.Command(gatedBin, "serve", "--review-timeout", "10s", "--data-dir", t.TempDir())
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("err = %v, want exit 2\n%s", err, out)
	}
	if !strings.Contains(string(out), "below the 30s minimum") {
		t.Fatalf("output does not explain the limit:\n%s", out)
	}
}

// TestVerdictsSurviveRestart checks that the verdict store is durable: a
// proposal replayed after gated restarts on the same data directory gets
// the stored verdict.
func TestVerdictsSurviveRestart(t *testing.T) {
	dataDir := t.TempDir()
	natsAddr := freeAddr(t)
	run := func() (*exec.Cmd, chan error, *syncBuffer) {
		cmd := exec.Command(gatedBin, "serve", "--data-dir", dataDir, "--nats-listen", natsAddr, "--log-format", "json")
		logs := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		waitLog(t, logs, "gated is ready")
		return cmd, done, logs
	}
	cmd, done, _ := run()
	code, first, stderr := propose(t, "nats://"+natsAddr, "-f", "../examples/proposals/approved.json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	<-done
	cmd, done, _ = run()
	defer func() { _ = cmd.Process.Kill(); <-done }()
	code, again, stderr := propose(t, "nats://"+natsAddr, "-f", "../examples/proposals/approved.json")
	if code != 0 {
		t.Fatalf("exit %d after restart: %s", code, stderr)
	}
	var a, b gated.Verdict
	_ = json.Unmarshal(first, &a)
	_ = json.Unmarshal(again, &b)
	if !a.DecidedAt.Equal(b.DecidedAt) || a.AuditSeq != b.AuditSeq {
		t.Fatalf("after restart the proposal was decided again: %v/%d vs %v/%d", a.DecidedAt, a.AuditSeq, b.DecidedAt, b.AuditSeq)
	}
}

func waitLog(t *testing.T, logs *syncBuffer, line string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			if strings.Contains(sc.Text(), line) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no %q in the logs after 30s:\n%s", line, logs.String())
}

// syncBuffer collects a child's output while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestSecondChangeOnSameTargetIsRejected checks that approvals are
// remembered per target: moments after a restart was approved, the same
// agent's second restart of the service is refused by target_cooldown and
// another agent's by parallel_operation, even though their JSON lists the
// target's keys in another order. Another device is not affected.
func TestSecondChangeOnSameTargetIsRejected(t *testing.T) {
	g := startGated(t)
	dir := t.TempDir()
	write := func(name, id, agent, target string) string {
		path := filepath.Join(dir, name)
		body := fmt.Sprintf(`{"v":1,"id":%q,"tenant":"acme","action":"host_restart_service","class":"write",
"target":%s,"reason":"wedged","blast_radius":"single_device","requested_by":{"agent":%q}}`, id, target, agent)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	first := write("a.json", "same-target-1", "ops-agent", `{"device_id":9,"service":"nginx"}`)
	again := write("b.json", "same-target-2", "ops-agent", `{"service":"nginx","device_id":9}`)
	parallel := write("c.json", "same-target-3", "db-agent", `{"service":"nginx","device_id":9}`)
	other := write("d.json", "other-target-1", "ops-agent", `{"device_id":10,"service":"nginx"}`)
	if code, out, stderr := propose(t, g.natsURL, "-f", first); code != 0 {
		t.Fatalf("first restart: exit %d\n%s%s", code, out, stderr)
	}
	for path, rule := range map[string]string{again: "target_cooldown", parallel: "parallel_operation"} {
		code, out, _ := propose(t, g.natsURL, "-f", path)
		var v gated.Verdict
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatal(err)
		}
		if code != 3 || v.Outcome != gated.OutcomeRejected || v.Stage != gated.StagePolicy ||
			v.Policy == nil || len(v.Policy.Denies) != 1 || v.Policy.Denies[0].Rule != rule {
			t.Fatalf("%s: exit %d, verdict %s at %s: %s; want %s", filepath.Base(path), code, v.Outcome, v.Stage, v.Reason, rule)
		}
		if !strings.Contains(v.Reason, "same-target-1") {
			t.Errorf("reason %q does not name the earlier proposal", v.Reason)
		}
	}
	if code, out, stderr := propose(t, g.natsURL, "-f", other); code != 0 {
		t.Fatalf("restart on another device: exit %d\n%s%s", code, out, stderr)
	}
}
