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

// A plugin that fails to start is named with why, in words an operator
// can act on: the start timeout, the line it printed in place of its
// handshake, or how it exited and the last lines it wrote on stderr, never
// go-plugin's guesses about the architecture or the mode of the file.
func TestStartFailuresAreClear(t *testing.T) {
	cases := []struct {
		mode string
		want []string
	}{
		{mode: "hang-start", want: []string{"no answer within its start timeout of 500ms", "it wrote nothing on stderr"}},
		{mode: "noise-start", want: []string{"no handshake: Unrecognized remote plugin message: this is not a plugin handshake", "it wrote nothing on stderr"}},
		{mode: "exit-3", want: []string{"no handshake: the plugin exited with status 3 before writing one; its last lines on stderr:\n" +
			"  loading the reviewer's settings\n  reviewer.toml: no such file or directory"}},
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
			if err == nil || !strings.HasPrefix(err.Error(), `starting plugin "`+tc.mode+`": `) {
				t.Fatalf("Start: err = %v; want an error naming plugin %q", err, tc.mode)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Start: err = %v\nwant it to hold %q", err, want)
				}
			}
			for _, guess := range []string{"compiled for this architecture", "Mode:", "/proc/self/fd"} {
				if strings.Contains(err.Error(), guess) {
					t.Errorf("Start: err = %v\nholds go-plugin's note %q", err, guess)
				}
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
