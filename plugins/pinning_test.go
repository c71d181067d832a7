package plugins

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gated/gated"

	"go.uber.org/zap/zaptest"

	"github.com/gated/gated/engine"
)

// copyExecutable copies the file at src to dst with mode 0755.
func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// swapPair is a pinned plugin binary and an unpinned one that approves
// everything, both ready to be linked over a plugin's path. The pinned
// one is the test binary serving the sop reviewer (which rejects a change
// no SOP covers); the other is a script that runs the test binary as a
// reviewer that approves everything.
type swapPair struct {
	dir, path, pinned, other, sum string
}

func newSwapPair(t *testing.T) swapPair {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := swapPair{dir: dir, path: filepath.Join(dir, "plugin"), pinned: filepath.Join(dir, "pinned"), other: filepath.Join(dir, "other")}
	copyExecutable(t, exe, s.pinned)
	script := "#!/bin/sh\n" + helperEnv + "=yes exec '" + exe + "' \"$@\"\n"
	if err := os.WriteFile(s.other, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if s.sum, err = FileSHA256(s.pinned); err != nil {
		t.Fatal(err)
	}
	s.put(t, s.pinned)
	return s
}

// put replaces the plugin's path with a hard link to src, atomically.
func (s swapPair) put(t testing.TB, src string) {
	if err := s.link(src); err != nil {
		t.Fatal(err)
	}
}

func (s swapPair) link(src string) error {
	tmp := s.path + ".next"
	_ = os.Remove(tmp)
	if err := os.Link(src, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, s.path)
}

func (s swapPair) spec() Spec {
	return Spec{Name: "swapped", Path: s.path, SHA256: s.sum, Env: []string{helperEnv + "=sop"}}
}

// startedEvents collects a host's plugin.started events.
type startedEvents struct {
	mu   sync.Mutex
	sums []string
}

func (e *startedEvents) record(ev gated.AuditEvent) {
	if ev.Event != EventPluginStarted {
		return
	}
	var data struct {
		SHA256 string `json:"sha256"`
	}
	_ = json.Unmarshal(ev.Data, &data)
	e.mu.Lock()
	e.sums = append(e.sums, data.SHA256)
	e.mu.Unlock()
}

func (e *startedEvents) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.sums...)
}

// A plugin's path swapped over and over between its pinned binary and an
// unpinned one, while the host launches it, must never run the unpinned
// one: the host executes exactly the bytes it verified, or refuses.
func TestSwappedPathNeverRunsUnpinnedBytes(t *testing.T) {
	s := newSwapPair(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			src := s.pinned
			if i%2 == 1 {
				src = s.other
			}
			if err := s.link(src); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(50 * time.Microsecond)
		}
	})
	defer func() { close(stop); wg.Wait() }()

	// At least 40 launches; on a loaded machine the swapper can win every
	// race, so launching goes on (to a bound) until one ran the pinned
	// binary, without which nothing was raced.
	const launches = 40
	ran, refused := 0, 0
	for i := 0; i < launches || ran == 0 && i < 10*launches; i++ {
		var events startedEvents
		h, err := NewHost(zaptest.NewLogger(t), "swapped", s.spec())
		if err != nil {
			t.Fatal(err)
		}
		h.SetEvents(events.record)
		err = h.Start(t.Context())
		if errors.Is(err, ErrChecksum) {
			refused++
			h.Close()
			continue
		}
		if err != nil {
			h.Close()
			t.Fatalf("launch %d: %v", i, err)
		}
		r, err := h.Route(reviewer)
		if err != nil {
			h.Close()
			t.Fatal(err)
		}
		res, err := r.Review(t.Context(), reviewRequest(t, "host_restart_service", nil))
		h.Close()
		if err != nil {
			t.Fatalf("launch %d: review: %v", i, err)
		}
		if _, approved, _ := engine.Judge(res, reviewer); approved {
			t.Fatalf("launch %d: an unpinned binary ran and approved a change no SOP covers; the audit recorded sha256 %v for it (pinned %s)",
				i, events.all(), s.sum)
		}
		if got := events.all(); len(got) != 1 || got[0] != s.sum {
			t.Fatalf("launch %d: plugin.started recorded sha256 %v, want the pinned %s", i, got, s.sum)
		}
		ran++
	}
	t.Logf("%d launches: %d ran the pinned binary, %d refused", ran+refused, ran, refused)
	if ran == 0 {
		t.Fatal("no launch ran the pinned binary, so the swap was never raced")
	}
}

// A plugin relaunched after a crash runs the bytes verified at its first
// launch, even though its path now holds another binary.
func TestRelaunchRunsTheVerifiedBytes(t *testing.T) {
	s := newSwapPair(t)
	var events startedEvents
	h, err := NewHost(zaptest.NewLogger(t), "swapped", s.spec())
	if err != nil {
		t.Fatal(err)
	}
	h.SetEvents(events.record)
	t.Cleanup(h.Close)
	if err := h.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	first := h.Plugins()[0].PID
	s.put(t, s.other)
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		info := h.Plugins()[0]
		if info.Running && info.PID != first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plugin was not relaunched within 30s of its crash (events %v)", events.all())
		}
		time.Sleep(20 * time.Millisecond)
	}
	r, err := h.Route(reviewer)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Review(t.Context(), reviewRequest(t, "host_restart_service", nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, approved, _ := engine.Judge(res, reviewer); approved {
		t.Fatal("the relaunched plugin ran the binary now at its path, not the verified one")
	}
	if got := events.all(); len(got) != 2 || got[0] != s.sum || got[1] != s.sum {
		t.Fatalf("plugin.started recorded sha256 %v, want the pinned %s twice", got, s.sum)
	}
}
