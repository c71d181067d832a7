package plugins

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
)

func TestStartFailuresAreClear(t *testing.T) {
	cases := []struct {
		mode, want string
	}{
		{mode: "hang-start", want: "timeout"},
		{mode: "noise-start", want: "handshake"},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			spec := helperSpec(t, tc.mode)
			spec.StartTimeout = 500 * time.Millisecond
			h, err := NewHost(zaptest.NewLogger(t), spec.Name, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			err = h.Start(t.Context())
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), tc.want) || !strings.Contains(err.Error(), tc.mode) {
				t.Fatalf("Start: err = %v; want an error naming the plugin and %q", err, tc.want)
			}
		})
	}
}

func TestTamperedBinaryIsAudited(t *testing.T) {
	spec := helperSpec(t, "sop")
	actual := spec.SHA256
	spec.SHA256 = strings.Repeat("0", 64)
	h, err := NewHost(zaptest.NewLogger(t), spec.Name, spec)
	if err != nil {
		t.Fatal(err)
	}
	var events []gated.AuditEvent
	h.SetEvents(func(ev gated.AuditEvent) { events = append(events, ev) })
	defer h.Close()
	if err := h.Start(t.Context()); !errors.Is(err, ErrChecksum) {
		t.Fatalf("Start: err = %v, want ErrChecksum", err)
	}
	if len(events) != 1 || events[0].Event != EventPluginRefused || events[0].Tenant != gated.UnknownTenant {
		t.Fatalf("events = %+v, want one plugin.refused", events)
	}
	var data map[string]string
	_ = json.Unmarshal(events[0].Data, &data)
	if data["actual_sha256"] != actual || data["pinned_sha256"] != spec.SHA256 {
		t.Errorf("refusal event data %v does not give both checksums", data)
	}
}

// procState returns the state letter of a process (R, S, Z...), or "" when
// the pid no longer exists.
func procState(pid int) string {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(raw)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return "?"
}

func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for procState(pid) != "" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if st := procState(pid); st != "" {
		t.Fatalf("%s: pid %d still exists in state %s (a zombie is Z)", what, pid, st)
	}
}

func TestKilledPluginIsRelaunched(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	h, err := NewHost(zaptest.NewLogger(t), "sop", helperSpec(t, "sop"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []string
	h.SetEvents(func(ev gated.AuditEvent) { mu.Lock(); events = append(events, ev.Event); mu.Unlock() })
	t.Cleanup(h.Close)
	if err := h.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	first := h.Plugins()[0].PID
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, first, "the killed plugin")
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if info := h.Plugins()[0]; info.Running && info.PID != first {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	info := h.Plugins()[0]
	if !info.Running || info.PID == first {
		t.Fatalf("plugin not relaunched: %+v", info)
	}
	r, err := h.Route(reviewer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Review(t.Context(), reviewRequest(t, "host_restart_service", nil)); err != nil {
		t.Fatalf("review on the relaunched plugin: %v", err)
	}
	// The relaunch's plugin.started is told after the plugin is listed as
	// running: wait for it.
	got := func() string { mu.Lock(); defer mu.Unlock(); return strings.Join(events, ",") }
	for deadline := time.Now().Add(10 * time.Second); got() != "plugin.started,plugin.exited,plugin.started" && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if e := got(); e != "plugin.started,plugin.exited,plugin.started" {
		t.Errorf("events = %v", e)
	}
}

func TestKilledHostLeavesNoOrphan(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	spec := helperSpec(t, "sop")
	cmd := exec.Command(spec.Path)
	cmd.Env = append(os.Environ(), helperEnv+"=host", "GATED_TEST_HOST_EXE="+spec.Path, "GATED_TEST_HOST_SUM="+spec.SHA256)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("host printed nothing: %v", err)
	}
	pluginPID, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("host said %q", line)
	}
	if procState(pluginPID) == "" {
		t.Fatalf("plugin pid %d is not running", pluginPID)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitGone(t, pluginPID, "the plugin of a killed host")
}
