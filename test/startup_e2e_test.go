package test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// refusalGuard bounds how long a serve that should refuse to start may
// run before the test gives up on it. It guards against a hang; it is not
// a measure of how fast the refusal is (the tests log that).
const refusalGuard = 30 * time.Second

// refusedServe runs `gated serve ARGS`, which is expected to refuse to
// start, and returns its exit code and its output (stdout and stderr). A
// serve still running after refusalGuard is killed and fails the test.
func refusedServe(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(gatedBin, append([]string{"serve"}, args...)...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-time.After(refusalGuard):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("gated serve %s was still running after %s instead of refusing to start:\n%s",
			strings.Join(args, " "), refusalGuard, lastLines(out.String(), 40))
	}
	t.Logf("gated serve exited after %s: %v", time.Since(start).Round(time.Millisecond), err)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	}
	t.Fatal(err)
	return 0, ""
}

// auditStreamMsgs returns how many messages the audit stream holds.
func auditStreamMsgs(t *testing.T, natsURL string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, info := auditStream(ctx, t, natsURL)
	return info.State.Msgs
}

// verifyClean runs `gated audit verify` with key and fails the test
// unless it finds no problem; it returns verify's output.
func verifyClean(t *testing.T, natsURL, keyFile string) string {
	t.Helper()
	code, out, stderr := auditCLI(t, natsURL, "verify", "--audit-key-file", keyFile)
	if code != 0 || !strings.Contains(out, "no problem found") {
		t.Fatalf("audit verify: exit %d\n%s%s", code, out, stderr)
	}
	return out
}

// oneLine fails the test unless out is a single line (no log lines, no
// stack trace) that contains every one of want.
func oneLine(t *testing.T, out string, want ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one line naming the cause, got %d lines:\n%s", len(lines), out)
	}
	for _, w := range want {
		if !strings.Contains(lines[0], w) {
			t.Fatalf("the line does not name %q:\n%s", w, out)
		}
	}
}

// errorLine fails the test unless the last line of out is gated's error
// and contains every one of want, and no line is a stack trace.
func errorLine(t *testing.T, out string, want ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "gated: ") || strings.Contains(out, "stacktrace") {
		t.Fatalf("want gated's error on the last line and no stack trace:\n%s", out)
	}
	for _, w := range want {
		if !strings.Contains(last, w) {
			t.Fatalf("the error does not name %q:\n%s", w, out)
		}
	}
}

// TestServeLocksItsDataDir starts a second gated serve on the data
// directory of a running one: the second must refuse to start, naming the
// directory and the first's pid, and the first must go on deciding with
// its audit stream whole.
func TestServeLocksItsDataDir(t *testing.T) {
	dataDir := t.TempDir()
	first := startGated(t, "--data-dir", dataDir)
	if code, _, stderr := propose(t, first.natsURL, "-f", "../examples/proposals/approved.json"); code != 0 {
		t.Fatalf("propose: exit %d: %s", code, stderr)
	}
	before := auditStreamMsgs(t, first.natsURL)

	code, out := refusedServe(t, "--data-dir", dataDir, "--nats-listen", freeAddr(t), "--http", freeAddr(t), "--log-format", "json")
	if code == 0 {
		t.Fatalf("the second serve exited 0:\n%s", out)
	}
	oneLine(t, out, dataDir, "pid "+strconv.Itoa(first.cmd.Process.Pid))

	// The first is unharmed: it still decides, and every record is there.
	if code, _, stderr := propose(t, first.natsURL, "-f", "../examples/proposals/read-pass-through.json"); code != 0 {
		t.Fatalf("propose to the first after the second was refused: exit %d: %s", code, stderr)
	}
	// A read passes through with one record: its arrival, the policy's
	// decision and the verdict with its grant happen at once.
	if after := auditStreamMsgs(t, first.natsURL); after != before+1 {
		t.Fatalf("the audit stream holds %d messages, want %d (%d before the second serve, 1 since)", after, before+1, before)
	}
	verifyClean(t, first.natsURL, filepath.Join(dataDir, "audit.key"))

	// The lock goes with the process: once the first stops, the data
	// directory can be served again.
	_ = first.cmd.Process.Signal(syscall.SIGTERM)
	first.exited <- <-first.exited
	again := startGated(t, "--data-dir", dataDir)
	verifyClean(t, again.natsURL, filepath.Join(dataDir, "audit.key"))
}

// TestServeSaysWhyItCannotStart gives serve a data directory or a port it
// cannot use: it must exit non-zero with one line that names the path or
// the address, instead of waiting and blaming the port.
func TestServeSaysWhyItCannotStart(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, []byte("not a directory\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	busy := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln.Addr().String()
	}
	tests := []struct {
		note string
		args func(t *testing.T) (args []string, names string)
		skip string
	}{
		{note: "data dir is a file", args: func(t *testing.T) ([]string, string) {
			return []string{"--data-dir", file}, file
		}},
		{note: "data dir under a file", args: func(t *testing.T) ([]string, string) {
			return []string{"--data-dir", filepath.Join(file, "data")}, filepath.Join(file, "data")
		}},
		{note: "data dir not writable", skip: "root writes to a directory whatever its mode", args: func(t *testing.T) ([]string, string) {
			ro := filepath.Join(t.TempDir(), "read-only")
			if err := os.Mkdir(ro, 0o500); err != nil {
				t.Fatal(err)
			}
			return []string{"--data-dir", ro}, ro
		}},
		{note: "nats port in use", args: func(t *testing.T) ([]string, string) {
			addr := busy(t)
			return []string{"--data-dir", t.TempDir(), "--nats-listen", addr}, addr
		}},
		{note: "http port in use", args: func(t *testing.T) ([]string, string) {
			addr := busy(t)
			return []string{"--data-dir", t.TempDir(), "--http", addr}, addr
		}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			if tc.skip != "" && os.Geteuid() == 0 {
				t.Skip(tc.skip)
			}
			args, names := tc.args(t)
			if !contains(args, "--nats-listen") {
				args = append(args, "--nats-listen", "127.0.0.1:0")
			}
			code, out := refusedServe(t, append(args, "--log-format", "json")...)
			if code == 0 {
				t.Fatalf("serve exited 0:\n%s", out)
			}
			oneLine(t, out, names)
			if strings.Contains(out, "is the port in use") {
				t.Fatalf("the line guesses at the cause instead of naming it:\n%s", out)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestServeNeedsTheChainsAuditKey checks that a gated cannot extend a
// chain of MACed audit records without the key that MACs them: a second
// gated joining with no key or another key is refused and writes nothing,
// one with the key joins, and a gated whose key file was deleted does not
// make itself a new one.
func TestServeNeedsTheChainsAuditKey(t *testing.T) {
	dataDir := t.TempDir()
	a := startGated(t, "--data-dir", dataDir)
	keyFile := filepath.Join(dataDir, "audit.key")
	if !strings.Contains(a.logs.String(), "created the audit key") {
		t.Fatalf("a fresh deployment did not create its audit key:\n%s", a.logs.String())
	}
	if code, _, stderr := propose(t, a.natsURL, "-f", "../examples/proposals/approved.json"); code != 0 {
		t.Fatalf("propose: exit %d: %s", code, stderr)
	}
	otherKey := filepath.Join(t.TempDir(), "other.key")
	if err := os.WriteFile(otherKey, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("joining without a key", func(t *testing.T) {
		before := auditStreamMsgs(t, a.natsURL)
		code, out := refusedServe(t, "--nats-url", a.natsURL, "--data-dir", t.TempDir(), "--http", freeAddr(t), "--log-format", "json")
		if code == 0 {
			t.Fatalf("exited 0:\n%s", out)
		}
		errorLine(t, out, "--audit-key-file", "GATED_AUDIT_KEY_FILE")
		if after := auditStreamMsgs(t, a.natsURL); after != before {
			t.Fatalf("the refused gated wrote %d audit messages", after-before)
		}
	})
	t.Run("joining with another key", func(t *testing.T) {
		before := auditStreamMsgs(t, a.natsURL)
		code, out := refusedServe(t, "--nats-url", a.natsURL, "--data-dir", t.TempDir(), "--http", freeAddr(t),
			"--audit-key-file", otherKey, "--log-format", "json")
		if code == 0 {
			t.Fatalf("exited 0:\n%s", out)
		}
		errorLine(t, out, otherKey, "--audit-key-rotate")
		if after := auditStreamMsgs(t, a.natsURL); after != before {
			t.Fatalf("the refused gated wrote %d audit messages", after-before)
		}
	})
	t.Run("joining with the key", func(t *testing.T) {
		b := launchGated(t, "b", a.natsURL, 1, "--audit-key-file", keyFile)
		b.kill(t)
		verifyClean(t, a.natsURL, keyFile)
	})
	t.Run("restarting without the key file", func(t *testing.T) {
		natsAddr := strings.TrimPrefix(a.natsURL, "nats://")
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		a.exited <- <-a.exited
		if err := os.Remove(keyFile); err != nil {
			t.Fatal(err)
		}
		code, out := refusedServe(t, "--data-dir", dataDir, "--nats-listen", natsAddr, "--log-format", "json")
		if code == 0 {
			t.Fatalf("exited 0:\n%s", out)
		}
		errorLine(t, out, keyFile, "--audit-key-rotate")
		if _, err := os.Stat(keyFile); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the refused gated wrote a new key file: %v", err)
		}
	})
}
