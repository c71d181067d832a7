package plugins

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/plugins/sdk"
	"github.com/gated/gated/plugins/sop"
)

// stoppableReviewer is the sop reviewer, except that a proposal whose
// reason reads "hang:FILE" creates FILE and then waits for its context:
// the test knows the review is in flight and can stop the process.
type stoppableReviewer struct{ sop.Reviewer }

func (r stoppableReviewer) Review(ctx context.Context, req *sdk.Request) (*sdk.Response, error) {
	if mark, ok := strings.CutPrefix(req.Proposal.Reason, "hang:"); ok {
		if err := os.WriteFile(mark, nil, 0o600); err != nil {
			return nil, err
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return r.Reviewer.Review(ctx, req)
}

// groupGone reports whether no process is left in process group pgid.
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// waitFor polls cond every 20 ms for up to limit and reports whether it
// held. The limit only keeps a broken build from hanging the run.
func waitFor(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// pidsIn reads the pids a wrapper script wrote, one a line.
func pidsIn(t *testing.T, path string) []int {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the wrapper wrote no pids: %v", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(raw)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("pids file %q: %v", raw, err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// A plugin started through a shell wrapper whose child keeps the
// wrapper's stdout open, and never completes the handshake, fails the
// start at its start timeout with an error naming the plugin and the
// timeout; its whole process group is ended, so the child neither keeps
// the host waiting nor outlives the start.
func TestWrapperThatNeverHandshakesEndsAtStartTimeout(t *testing.T) {
	tests := []struct {
		note    string
		wrapper string
	}{
		{note: "wrapper waits with its child", wrapper: "wait\n"},
		{note: "wrapper exits, child keeps stdout", wrapper: "exit 0\n"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			dir := t.TempDir()
			pids, natural := filepath.Join(dir, "pids"), filepath.Join(dir, "natural")
			// The child sleeps with the wrapper's stdout open; it leaves a
			// mark if it was left to finish on its own.
			script := "#!/bin/sh\necho $$ > '" + pids + "'\n" +
				"( sleep 20; echo done > '" + natural + "' ) &\n" +
				"echo $! >> '" + pids + "'\n" + tc.wrapper
			path := filepath.Join(dir, "wrapped")
			if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			sum, err := FileSHA256(path)
			if err != nil {
				t.Fatal(err)
			}
			spec := Spec{Name: "wrapped", Path: path, SHA256: sum, StartTimeout: time.Second}
			h, err := NewHost(zaptest.NewLogger(t), spec.Name, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			began := time.Now()
			err = h.Start(t.Context())
			t.Logf("Start returned after %s: %v", time.Since(began).Round(time.Millisecond), err)
			if _, err := os.Stat(natural); err == nil {
				t.Fatal("Start returned only once the wrapper's child had finished on its own")
			}
			if err == nil || !strings.Contains(err.Error(), `plugin "wrapped"`) || !strings.Contains(err.Error(), "start timeout of 1s") {
				t.Fatalf("Start: err = %v; want an error naming the plugin and its start timeout of 1s", err)
			}
			all := pidsIn(t, pids)
			if !waitFor(10*time.Second, func() bool {
				for _, pid := range all {
					if processExists(pid) {
						return false
					}
				}
				return groupGone(all[0])
			}) {
				t.Fatalf("processes of the plugin's group (wrapper and child %v) outlived its failed start", all)
			}
		})
	}
}

// A plugin stopped (SIGSTOP) while it holds a review misses its health
// checks: the host kills its process group, the review in flight fails at
// once with an error (not at its deadline), and the relaunched
// plugin serves the next review.
func TestStoppedPluginIsKilledAndRelaunched(t *testing.T) {
	spec := helperSpec(t, "stoppable")
	spec.HealthInterval, spec.HealthMisses = 250*time.Millisecond, 3
	h := startHost(t, spec)
	first := h.Plugins()[0].PID
	r, err := h.Route(reviewer)
	if err != nil {
		t.Fatal(err)
	}
	// The review's own deadline, as a bound: health checks end it within
	// about a second; a review still waiting after two minutes waits for
	// its deadline, and says so below, before go test's timeout ends the
	// whole package without naming the test.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	mark := filepath.Join(t.TempDir(), "reviewing")
	req := reviewRequest(t, "host_restart_service", nil)
	withReason(t, &req, "hang:"+mark)
	done := make(chan error, 1)
	go func() {
		_, err := r.Review(ctx, req)
		done <- err
	}()
	if !waitFor(30*time.Second, func() bool { _, err := os.Stat(mark); return err == nil }) {
		t.Fatal("the review never reached the plugin")
	}
	if err := syscall.Kill(first, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	err = <-done
	switch {
	case err == nil:
		t.Fatal("the review on a stopped plugin succeeded")
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		t.Fatalf("the review waited out its deadline: %v", err)
	case errors.Is(err, engine.ErrNoReviewer):
		t.Fatalf("a plugin that stops answering mid-review is an error, not a routing failure: %v", err)
	case !strings.Contains(err.Error(), "health"):
		t.Fatalf("err = %v; want it to say the plugin missed its health checks", err)
	case failureOf(err) != engine.FailureUnresponsive:
		t.Fatalf("failure %q, want %q: %v", failureOf(err), engine.FailureUnresponsive, err)
	}
	if !waitFor(30*time.Second, func() bool { return groupGone(first) }) {
		t.Fatalf("the stopped plugin's process group (pgid %d) is still there", first)
	}
	if !waitFor(30*time.Second, func() bool { p := h.Plugins()[0]; return p.Running && p.PID != first }) {
		t.Fatalf("the plugin was not relaunched: %+v", h.Plugins())
	}
	r, err = h.Route(reviewer)
	if err != nil {
		t.Fatal(err)
	}
	covered := &gated.SOP{ID: "SOP-001", Title: "Restart", Actions: []string{"host_restart_service"}, Rollback: "restart the old unit"}
	res, err := r.Review(t.Context(), reviewRequest(t, "host_restart_service", covered))
	if err != nil {
		t.Fatalf("a review on the relaunched plugin: %v", err)
	}
	if _, approved, why := engine.Judge(res, reviewer); !approved {
		t.Fatalf("the relaunched plugin did not approve a covered change: %s", why)
	}
}
