package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// llmPersona is the persona the llm path routes to in an embedded run:
// the built-in reviewer's rules, reviewed by the llm plugin against the
// scripted model.
const llmPersona = `---
name: ` + LLMPersona + `
description: The built-in reviewer's three gates, judged by the llm reviewer against gated bench's scripted model.
model: openai-compatible/bench
max_turns: 2
permission_mode: read-only
plugin: llm
tools:
  - get_sop_text
  - get_proposal
required_gates:
  - sop_covers
  - no_parallel_operation
  - rollback_known
---
Approve only when a standard operating procedure covers the action, no
other change is under way on the target, and a rollback is known.
`

// llmPolicyData lets the llm path's proposals, which name persona
// bench-llm, be reviewed by it instead of the routed persona
// (config.reviewer_overrides): without it the policy adds the proposal's
// reviewer beside the routed one, and the path measures a quorum of two
// (the sop reviewer and the llm reviewer) instead of one llm review.
const llmPolicyData = `gated:
  config:
    reviewer_overrides:
      - actions: [host_restart_service]
        personas: [` + LLMPersona + `]
`

// Gated is a gated serve process started for a bench run, with its own
// embedded NATS server and data directory.
type Gated struct {
	URL string
	// HTTP is the address of serve's health and metrics listener.
	HTTP string
	PID  int
	Log  string
	cmd  *exec.Cmd
	done chan error
}

// GatedOptions says how to start the embedded gated.
type GatedOptions struct {
	// Exe is the gated binary; Dir the directory its files go to.
	Exe, Dir string
	// LLMBaseURL is the scripted model's address, for the llm reviewer.
	LLMBaseURL string
	// Args are added to `gated serve`'s command line.
	Args []string
	// Env are KEY=VALUE variables set for gated serve alone, after the
	// bench's own environment, so they win (GOGC, GOMEMLIMIT).
	Env []string
	// Ready bounds the wait for /readyz.
	Ready time.Duration
}

// StartGated runs `gated serve` on free loopback ports and waits until it
// reports ready.
func StartGated(ctx context.Context, o GatedOptions) (*Gated, error) {
	personas := filepath.Join(o.Dir, "personas")
	if err := os.MkdirAll(personas, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(personas, LLMPersona+".md"), []byte(llmPersona), 0o644); err != nil {
		return nil, err
	}
	policyData := filepath.Join(o.Dir, "bench-policy.yaml")
	if err := os.WriteFile(policyData, []byte(llmPolicyData), 0o644); err != nil {
		return nil, err
	}
	natsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	httpAddr := httpFlag(o.Args)
	if httpAddr == "" {
		httpPort, err := freePort()
		if err != nil {
			return nil, err
		}
		httpAddr = "127.0.0.1:" + strconv.Itoa(httpPort)
	}
	logPath := filepath.Join(o.Dir, "gated.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	args := append([]string{"serve",
		"--nats-listen", "127.0.0.1:" + strconv.Itoa(natsPort),
		"--http", httpAddr,
		"--data-dir", filepath.Join(o.Dir, "data"),
		"--personas", personas,
		"--policy-data", policyData,
		"--log-format", "json", "--log-level", "warn",
	}, o.Args...)
	cmd := exec.Command(o.Exe, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = serveEnv(os.Environ(), o.LLMBaseURL, o.Env)
	cmd.SysProcAttr = processGroup()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting gated serve: %w", err)
	}
	g := &Gated{URL: "nats://127.0.0.1:" + strconv.Itoa(natsPort), HTTP: httpAddr, PID: cmd.Process.Pid, Log: logPath,
		cmd: cmd, done: make(chan error, 1)}
	go func() { g.done <- cmd.Wait() }()
	ready := "http://" + httpAddr + "/readyz"
	deadline := time.Now().Add(orDefault(o.Ready, time.Minute))
	for {
		select {
		case err := <-g.done:
			return nil, fmt.Errorf("gated serve exited before it was ready (%v); the end of its log:\n%s", err, logTail(logPath, 20))
		case <-ctx.Done():
			g.Stop(5 * time.Second)
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := http.Get(ready); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return g, nil
			}
		}
		if time.Now().After(deadline) {
			g.Stop(5 * time.Second)
			return nil, fmt.Errorf("gated serve was not ready at %s within %s; the end of its log:\n%s", ready, orDefault(o.Ready, time.Minute), logTail(logPath, 20))
		}
	}
}

// httpFlag returns the address of the last --http among args, the
// caller's own --serve-arg, or "" when there is none: readiness is asked
// where serve listens.
func httpFlag(args []string) string {
	addr := ""
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--http="):
			addr = strings.TrimPrefix(a, "--http=")
		case a == "--http" && i+1 < len(args):
			addr = args[i+1]
		}
	}
	return addr
}

// logTail returns the last n lines of the file at path, for an error
// that outlives the file (the bench's directory is removed on exit).
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Stop sends SIGTERM and waits up to grace, then kills the process group.
func (g *Gated) Stop(grace time.Duration) error {
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-g.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("gated serve: %w; the end of its log:\n%s", err, logTail(g.Log, 20))
		}
		return err
	case <-time.After(grace):
		killGroup(g.cmd)
		<-g.done
		return fmt.Errorf("gated serve did not stop within %s and was killed; the end of its log:\n%s", grace, logTail(g.Log, 20))
	}
}

// benchEnv is the environment without gated's own settings: a GATED_*
// variable meant for another gated (GATED_NATS_URL, GATED_CONFIG, …)
// must not turn the embedded one into something else.
// serveEnv is the embedded gated's environment: the bench's own without
// its GATED_ settings, the scripted model's address, then extra, which
// wins over both (a process takes the last of a repeated variable).
func serveEnv(env []string, llmBaseURL string, extra []string) []string {
	out := append(benchEnv(env), "GATED_OPENAI_COMPATIBLE_BASE_URL="+llmBaseURL)
	return append(out, extra...)
}

func benchEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GATED_") {
			out = append(out, kv)
		}
	}
	return out
}

// CheckEnv checks one KEY=VALUE setting for the embedded gated's
// environment: the key must be a plain variable name.
func CheckEnv(kv string) error {
	key, _, ok := strings.Cut(kv, "=")
	switch {
	case !ok:
		return fmt.Errorf("%q is not KEY=VALUE", kv)
	case key == "":
		return fmt.Errorf("%q has no variable name before '='", kv)
	case strings.IndexFunc(key, func(r rune) bool {
		return r != '_' && (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (r < '0' || r > '9')
	}) >= 0 || key[0] >= '0' && key[0] <= '9':
		return fmt.Errorf("%q: variable names are letters, digits and '_', not starting with a digit", key)
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
