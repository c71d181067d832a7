package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gated/gated"
)

// assertReviewedOutOfProcess checks that the review.finished event names
// a plugin process that is a child of gated, runs `gated plugin run sop`,
// and is not gated itself.
func assertReviewedOutOfProcess(t *testing.T, recs []auditRecord, gatedPID int) {
	t.Helper()
	for _, r := range recs {
		if r.ev.Event != gated.EventReviewDone {
			continue
		}
		var data struct {
			PID    int    `json:"pid"`
			Plugin string `json:"plugin"`
		}
		if err := json.Unmarshal(r.ev.Data, &data); err != nil {
			t.Fatal(err)
		}
		if data.PID == 0 || data.PID == gatedPID {
			t.Fatalf("review ran in pid %d; gated is %d", data.PID, gatedPID)
		}
		if ppid := parentPID(t, data.PID); ppid != gatedPID {
			t.Fatalf("reviewer pid %d has parent %d, want gated %d", data.PID, ppid, gatedPID)
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", data.PID))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")[1:], " "); got != "plugin run sop" {
			t.Fatalf("reviewer process runs %q, want %q", got, "plugin run sop")
		}
		return
	}
	t.Fatal("no review.finished event")
}

func parentPID(t *testing.T, pid int) int {
	t.Helper()
	ppid, err := readParentPID(pid)
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}

// readParentPID reads the parent of pid from /proc/<pid>/stat.
func readParentPID(pid int) (int, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the parenthesised command: state, ppid, ...
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 || end+2 > len(stat) {
		return 0, fmt.Errorf("/proc/%d/stat has no command field", pid)
	}
	fields := strings.Fields(string(stat[end+2:]))
	if len(fields) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat is truncated", pid)
	}
	return strconv.Atoi(fields[1])
}

// pluginPIDs lists the children of pid that run `plugin run`.
func pluginPIDs(t *testing.T, parent int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(cmdline, []byte("plugin\x00run\x00")) || !bytes.HasPrefix(cmdline, []byte(gatedBin)) {
			continue
		}
		ppid, err := readParentPID(pid)
		if err != nil {
			continue // the process ended while we looked
		}
		if ppid == parent || parent == 0 {
			out = append(out, pid)
		}
	}
	return out
}

func gone(pid int) bool { return syscall.Kill(pid, 0) != nil }

func waitGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for !gone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("plugin process %d still runs", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestSIGTERMStopsPlugins(t *testing.T) {
	g := startGated(t)
	pids := pluginPIDs(t, g.cmd.Process.Pid)
	if len(pids) != 1 {
		t.Fatalf("found plugin processes %v under gated, want one", pids)
	}
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-g.exited:
		g.exited <- err // for cleanup
		if err != nil {
			t.Fatalf("gated exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("gated did not exit within 30s of SIGTERM")
	}
	waitGone(t, pids)
	if !strings.Contains(g.logs.String(), "gated stopped") {
		t.Errorf("no clean-stop log line:\n%s", g.logs.String())
	}
}

func TestSIGKILLLeavesNoOrphan(t *testing.T) {
	g := startGated(t)
	pids := pluginPIDs(t, g.cmd.Process.Pid)
	if len(pids) != 1 {
		t.Fatalf("found plugin processes %v under gated, want one", pids)
	}
	if err := g.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pids)
}
